"""The plugin manager: entry-point discovery, and lookups of targets and backends.

The core's own built-ins (directory targets, the mock backend) are registered through the
same ``avo`` entry-point group as any third-party plugin, so there is one path for all.
Set ``AVO_DISABLE_PLUGIN_AUTOLOAD=1`` to load only the core's built-ins.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import cast

import pluggy

from avo import hookspecs
from avo.errors import AvoError
from avo.models import BackendInfo, TargetSpec

GROUP = "avo"
CORE_DISTRIBUTION = "avo"


@dataclass
class PluginRecord:
    """One loaded (or failed) plugin, for ``avo plugins``."""

    name: str
    distribution: str
    version: str
    module: str
    hooks: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    error: str | None = None


_pm: pluggy.PluginManager | None = None
_records: dict[str, PluginRecord] = {}


def get_plugin_manager() -> pluggy.PluginManager:
    """The shared plugin manager, loading entry points the first time it is asked for."""
    global _pm
    if _pm is None:
        pm = pluggy.PluginManager(GROUP)
        pm.add_hookspecs(hookspecs)
        _load_entry_points(pm)
        _pm = pm
    return _pm


def reset_plugin_manager() -> None:
    """Forget the loaded plugins (tests use this to start from a clean manager)."""
    global _pm
    _pm = None
    _records.clear()


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    core_only = os.environ.get("AVO_DISABLE_PLUGIN_AUTOLOAD", "").strip() not in ("", "0")
    seen: set[str] = set()
    for ep in sorted(metadata.entry_points(group=GROUP), key=lambda e: e.name):
        dist = ep.dist.name if ep.dist is not None else "?"
        version = ep.dist.version if ep.dist is not None else "?"
        if core_only and dist != CORE_DISTRIBUTION:
            continue
        if ep.name in seen:  # the same distribution seen twice on sys.path
            continue
        seen.add(ep.name)
        record = PluginRecord(ep.name, dist, version, ep.value)
        try:
            module = ep.load()
            pm.register(module, name=ep.name)
        except Exception as exc:  # a broken third-party plugin is reported, not fatal
            record.error = f"{type(exc).__name__}: {exc}"
            print(f"avo: plugin {ep.name!r} ({dist}) failed to load: {record.error}", file=sys.stderr)
        _records[ep.name] = record


def register(plugin: object, name: str, distribution: str = "(registered)") -> None:
    """Register a plugin object by hand (tests, embedding). Its hooks take part at once."""
    pm = get_plugin_manager()
    pm.register(plugin, name=name)
    _records[name] = PluginRecord(name, distribution, "", getattr(plugin, "__name__", repr(plugin)))


def unregister(name: str) -> None:
    """Undo :func:`register`."""
    pm = get_plugin_manager()
    plugin = pm.get_plugin(name)
    if plugin is not None:
        pm.unregister(plugin)
    _records.pop(name, None)


def _provider_of(pm: pluggy.PluginManager, impl_plugin: object) -> str:
    return pm.get_name(impl_plugin) or repr(impl_plugin)


def all_targets() -> list[TargetSpec]:
    """Every target announced by every plugin, each stamped with its provider."""
    pm = get_plugin_manager()
    specs: list[TargetSpec] = []
    for impl in reversed(pm.hook.avo_targets.get_hookimpls()):
        for spec in cast("list[TargetSpec]", impl.function() or []):
            specs.append(spec.model_copy(update={"provider": _provider_of(pm, impl.plugin)}))
    return specs


def all_backends() -> list[BackendInfo]:
    """Every backend announced by every plugin, each stamped with its provider."""
    pm = get_plugin_manager()
    infos: list[BackendInfo] = []
    for impl in reversed(pm.hook.avo_backends.get_hookimpls()):
        for info in cast("list[BackendInfo]", impl.function() or []):
            infos.append(info.model_copy(update={"provider": _provider_of(pm, impl.plugin)}))
    return infos


def find_target(ref: str) -> TargetSpec:
    """A target by registered name, else by what a plugin resolves (a directory path)."""
    for spec in all_targets():
        if spec.name == ref:
            return spec
    spec = get_plugin_manager().hook.avo_resolve_target(ref=ref)
    if spec is not None:
        return spec
    names = sorted(s.name for s in all_targets())
    known = ", ".join(names) or "none installed"
    raise AvoError(
        f"unknown target {ref!r}: not an installed target ({known}) "
        f"and not a folder holding a target.yaml{did_you_mean(ref, names)}"
    )


def find_backend(name: str) -> BackendInfo:
    """A backend by name, with a clear error listing the installed ones."""
    for info in all_backends():
        if info.name == name:
            return info
    names = sorted(b.name for b in all_backends())
    known = ", ".join(names) or "none installed"
    raise AvoError(f"unknown backend {name!r}; installed backends: {known}{did_you_mean(name, names)}")


def did_you_mean(word: str, names: list[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``names``, or ``""``."""
    import difflib

    close = difflib.get_close_matches(word.lower(), {n.lower(): n for n in names}, n=1, cutoff=0.6)
    match = next((n for n in names if n.lower() == close[0]), None) if close else None
    return f"; did you mean {match!r}?" if match else ""


def plugin_module_dir(name: str) -> Path | None:
    """The package directory of a registered plugin module (hashed as its evaluator)."""
    plugin = get_plugin_manager().get_plugin(name)
    file = getattr(plugin, "__file__", None) if isinstance(plugin, ModuleType) else None
    if file is None:
        file = getattr(sys.modules.get(type(plugin).__module__), "__file__", None)
    return Path(file).resolve().parent if file else None


def plugin_records() -> list[PluginRecord]:
    """Every plugin with its distribution, version and what it provides."""
    pm = get_plugin_manager()
    targets: dict[str, list[str]] = {}
    backends: dict[str, list[str]] = {}
    for spec in all_targets():
        targets.setdefault(spec.provider or "", []).append(spec.name)
    for info in all_backends():
        backends.setdefault(info.provider or "", []).append(info.name)
    out = []
    for name, plugin in pm.list_name_plugin():
        base = _records.get(name) or PluginRecord(
            name, "(registered)", "", getattr(plugin, "__name__", repr(plugin))
        )
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [] if h.name.startswith("avo_"))
        out.append(
            PluginRecord(
                name, base.distribution, base.version, base.module, hooks,
                sorted(targets.get(name, [])), sorted(backends.get(name, [])), base.error,
            )
        )
    failed = [r for r in _records.values() if r.error and pm.get_plugin(r.name) is None]
    return sorted(out + failed, key=lambda r: (r.distribution != CORE_DISTRIBUTION, r.name))

"""The plugin manager: entry-point discovery, guarded calls, lookups of targets and backends.

The core's own built-ins (directory targets, the mock backend) are registered through the
same ``avo`` entry-point group as any third-party plugin, so there is one path for all.

Every call into a plugin goes through this module:

- hooks keyed by a target or backend (:func:`call_target_hook`, :func:`call_backend_hook`)
  go only to the plugin that announced that name (its ``provider``), never to the others;
- a name announced by two plugins is a conflict: neither copy is used until one is removed
  or disabled (``AVO_DISABLE_PLUGINS=name,...``);
- a plugin that raises, or returns something its hook does not promise, is reported with
  its name, distribution and hook (:class:`PluginError`); an announce hook that fails marks
  the plugin failed and skips what it announced, and every other plugin keeps working.

Set ``AVO_DISABLE_PLUGIN_AUTOLOAD=1`` to load only the core's built-ins.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import inspect
import os
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

import pluggy

from avo import hookspecs
from avo.distribution import CORE_DISTRIBUTION, canonical, is_core
from avo.errors import AvoError, validation_summary
from avo.models import BackendInfo, TargetSpec

GROUP = "avo"
DISABLE_ENV = "AVO_DISABLE_PLUGINS"
HOOKS = tuple(sorted(n for n in vars(hookspecs) if n.startswith("avo_")))
# Keyed hooks a provider may leave out, and what not implementing them means.
_OPTIONAL: dict[str, Any] = {"avo_knowledge": None, "avo_baselines": None}

__all__ = [
    "CORE_DISTRIBUTION", "GROUP", "PluginError", "PluginRecord", "all_backends", "all_targets",
    "announced_backends", "announced_targets", "call_backend_hook", "call_module_hook", "call_target_hook",
    "find_backend",
    "find_target", "get_plugin_manager", "not_loaded", "plugin_manager_with", "plugin_module_dir", "plugin_records",
    "register",
    "reset_plugin_manager", "unregister",
]


class PluginError(AvoError):
    """A plugin raised, or returned what its hook does not promise.

    The message names the plugin, its distribution and the hook. ``deliberate`` is set
    when the plugin itself raised an :class:`AvoError` (a message meant for the user, such
    as a missing API key), as opposed to a bug or a malformed result.
    """

    def __init__(self, message: str, *, plugin: str, hook: str, deliberate: bool = False) -> None:
        super().__init__(message)
        self.plugin = plugin
        self.hook = hook
        self.deliberate = deliberate


@dataclass
class PluginRecord:
    """One loaded (or failed) plugin, for ``avo plugins`` and ``avo doctor``."""

    name: str
    distribution: str
    version: str
    module: str
    hooks: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)
    #: why it failed: it did not load, or an announce hook raised or returned the wrong type
    error: str | None = None
    #: what is wrong but not fatal: unknown hooks, unmarked ``avo_*`` functions, name conflicts
    problems: list[str] = field(default_factory=list)
    entry_point: str = ""
    disabled: bool = False


_pm: pluggy.PluginManager | None = None
_records: dict[str, PluginRecord] = {}
_reported: set[str] = set()
# Entry points found but not imported yet, by the name each registers under, in load order:
# a command acting on a run imports only the core's and its target's (plugin_manager_with).
_pending: dict[str, tuple[metadata.EntryPoint, str]] = {}


def get_plugin_manager() -> pluggy.PluginManager:
    """The shared plugin manager with every installed plugin loaded."""
    return plugin_manager_with(None)


def plugin_manager_with(names: set[str] | None) -> pluggy.PluginManager:
    """The shared plugin manager with the core's plugins and those registered as ``names``
    loaded (``None``: every plugin). Importing every plugin cost a command acting on one run
    ~60 ms; a later call that needs them all loads the rest."""
    global _pm
    if _pm is None:
        pm = pluggy.PluginManager(GROUP)
        pm.add_hookspecs(hookspecs)
        _pm = pm  # set first: a plugin that looks avo's plugins up while importing must not recurse
        _find_entry_points()
    for name in [n for n, (_, dist) in _pending.items() if names is None or n in names or is_core(dist)]:
        found = _pending.pop(name, None)  # None: a plugin loaded meanwhile looked the others up
        if found is not None:
            _load(_pm, name, *found)
    return _pm


def reset_plugin_manager() -> None:
    """Forget the loaded plugins (tests use this to start from a clean manager)."""
    global _pm
    _pm = None
    _records.clear()
    _reported.clear()
    _pending.clear()


def _warn(message: str) -> None:
    if message not in _reported:
        _reported.add(message)
        print(f"avo: {message}", file=sys.stderr)


def _disabled() -> set[str]:
    return {canonical(x) for x in os.environ.get(DISABLE_ENV, "").replace(" ", "").split(",") if x}


def _find_entry_points() -> None:
    """Read every entry point (metadata only, nothing imported): each one's record, and the
    name it registers under, into ``_pending``."""
    core_only = os.environ.get("AVO_DISABLE_PLUGIN_AUTOLOAD", "").strip() not in ("", "0")
    disabled = _disabled()
    seen: set[tuple[str, str]] = set()
    eps: list[tuple[metadata.EntryPoint, str, str]] = []
    try:
        found = list(metadata.entry_points(group=GROUP))
    except Exception as exc:  # an unreadable entry_points.txt somewhere on sys.path
        _warn(f"cannot read the installed entry points: {type(exc).__name__}: {exc}")
        found = []
    for ep in found:
        dist = ep.dist.name if ep.dist is not None else "?"
        version = ep.dist.version if ep.dist is not None else "?"
        if canonical(dist) == "avo" and ep.value.startswith("avo.builtin."):
            # This core, installed before it was renamed (`avo doctor` says to reinstall it):
            # the same built-ins as avo-core's, not a second copy of them.
            dist = CORE_DISTRIBUTION
        if core_only and not is_core(dist):
            continue
        if (canonical(dist), ep.value) in seen:  # the same distribution seen twice on sys.path
            continue
        seen.add((canonical(dist), ep.value))
        eps.append((ep, dist, version))
    eps.sort(key=lambda e: (not is_core(e[1]), e[0].name, canonical(e[1])))

    def off(ep: metadata.EntryPoint, dist: str) -> bool:
        return bool({canonical(ep.name), canonical(dist), canonical(f"{dist}:{ep.name}")} & disabled)

    users: dict[str, list[str]] = {}
    for ep, dist, _ in eps:
        if not off(ep, dist):
            users.setdefault(ep.name, []).append(dist)
    for ep, dist, version in eps:
        # Two distributions may pick the same entry-point name; both load, the non-core
        # ones under "distribution:name", so neither hides the other.
        shared = len(users.get(ep.name, [])) > 1
        name = f"{canonical(dist)}:{ep.name}" if shared and not is_core(dist) else ep.name
        record = PluginRecord(name, dist, version, ep.value, entry_point=ep.name)
        if shared:
            others = ", ".join(d for d in users[ep.name] if d != dist)
            record.problems.append(f"entry-point name {ep.name!r} is also used by {others}; "
                                   f"this one is registered as {name!r}")
        _records[name] = record
        if off(ep, dist):
            record.disabled = True
            continue
        _pending[name] = (ep, dist)


def _load(pm: pluggy.PluginManager, name: str, ep: metadata.EntryPoint, dist: str) -> None:
    """Import one entry point's module and register it under ``name`` (failures are recorded)."""
    record = _records[name]
    try:
        with contextlib.redirect_stdout(sys.stderr):  # stdout may be JSON (--json, the MCP stream)
            module = ep.load()
        owner = pm.get_name(module) if pm.is_registered(module) else None
        if owner is not None:  # another distribution's entry point names the same module
            record.error = (f"its entry point {ep.name} = {ep.value} names a module that plugin {owner!r} "
                            f"({plugin_distribution(owner)}) already provides; skipped")
            _records[owner].problems.append(f"its module is also claimed by distribution {dist} "
                                            f"(entry point {ep.name} = {ep.value})")
            _warn(f"plugin {name!r} ({dist}): {record.error}")
            return
        pm.register(module, name=name)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # a broken third-party plugin (even one calling sys.exit) is reported
        record.error = f"failed to load: {type(exc).__name__}: {exc}"
        _warn(f"plugin {name!r} ({dist}) {record.error}")
        return
    record.problems.extend(_inspect(pm, module))


def _inspect(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """Hooks avo does not know (misspelled), and ``avo_*`` functions that lack ``@hookimpl``."""
    try:
        return _hook_problems(pm, plugin)
    except Exception as exc:  # a module with a hostile __dir__ or __getattr__
        return [f"could not be inspected: {type(exc).__name__}: {exc}"]


def _hook_problems(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    problems = []
    marked = set()
    for caller in pm.get_hookcallers(plugin) or []:
        marked.add(caller.name)
        if not caller.has_spec():
            close = difflib.get_close_matches(caller.name, HOOKS, n=1)
            hint = f" (did you mean {close[0]}?)" if close else f"; known hooks: {', '.join(HOOKS)}"
            problems.append(f"unknown hook {caller.name}{hint}: avo never calls it")
        for impl in caller.get_hookimpls():
            if impl.plugin is plugin and (impl.hookwrapper or getattr(impl, "wrapper", False)):
                problems.append(f"{caller.name} is a hook wrapper; avo calls only the providing plugin's "
                                "implementation, so it is never used")
    for attr in dir(plugin):
        if not attr.startswith("avo_") or attr in marked or attr == "avo_impl":
            continue
        try:
            value = inspect.getattr_static(plugin, attr)
        except AttributeError:
            continue
        if isinstance(value, (staticmethod, classmethod)):
            value = value.__func__
        if inspect.isfunction(value) and not hasattr(value, f"{GROUP}_impl"):
            problems.append(f"function {attr} is not marked @avo.hookimpl, so avo never calls it")
    return problems


def register(plugin: object, name: str, distribution: str = "(registered)") -> None:
    """Register a plugin object by hand (tests, embedding). Its hooks take part at once."""
    pm = get_plugin_manager()
    pm.register(plugin, name=name)
    _records[name] = PluginRecord(name, distribution, "", getattr(plugin, "__name__", repr(plugin)),
                                  problems=_inspect(pm, plugin), entry_point=name)


def unregister(name: str) -> None:
    """Undo :func:`register`."""
    pm = get_plugin_manager()
    plugin = pm.get_plugin(name)
    if plugin is not None:
        pm.unregister(plugin)
    _records.pop(name, None)


# -- calling plugins -----------------------------------------------------------------------

def plugin_distribution(name: str) -> str:
    """The distribution a loaded plugin came from (``(registered)`` for one registered by hand)."""
    record = _records.get(name)
    return record.distribution if record else "(registered)"


def _label(name: str) -> str:
    return f"plugin {name!r} ({plugin_distribution(name)})"


@functools.cache
def _expected(hook: str) -> tuple[str, Any]:
    """What ``hook`` must return, in words, and the pydantic adapter that checks it."""
    from pydantic import TypeAdapter

    from avo.models import EvalResult, StepResult, SupervisorAnswer

    table: dict[str, tuple[str, Any]] = {
        "avo_targets": ("a list of avo.models.TargetSpec", list[TargetSpec] | None),
        "avo_backends": ("a list of avo.models.BackendInfo", list[BackendInfo] | None),
        "avo_resolve_target": ("an avo.models.TargetSpec or None", TargetSpec | None),
        "avo_seed": ("None (or True) once the seed is written", bool | None),
        "avo_knowledge": ("None (or True) once the documents are written", bool | None),
        "avo_evaluate": ("an avo.models.EvalResult", EvalResult),
        "avo_baselines": ("a dict of {name: avo.models.EvalResult} or None", dict[str, EvalResult] | None),
        "avo_agent_step": ("an avo.models.StepResult", StepResult),
        "avo_supervise": ("an avo.models.SupervisorAnswer", SupervisorAnswer),
    }
    what, kind = table[hook]
    return what, TypeAdapter(kind)


def _shown(value: Any) -> str:
    text = repr(value)
    text = text if len(text) <= 200 else text[:200] + "..."
    return f"{text} (a {type(value).__name__})"


def _validate(hook: str, value: Any, name: str, label: str) -> Any:
    from pydantic import ValidationError

    what, adapter = _expected(hook)
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise PluginError(f"{label}: {hook} returned {_shown(value)}; expected {what} "
                          f"({validation_summary(exc)})", plugin=name, hook=hook) from None


def _invoke(name: str, hook: str, function: Any, argnames: tuple[str, ...] | list[str],
            kwargs: dict[str, Any], distribution: str | None = None) -> Any:
    """Call one implementation with the arguments it takes; guard the call and check the result."""
    distribution = distribution or plugin_distribution(name)
    label = f"plugin {name!r} ({distribution})"
    try:
        value = function(*[kwargs[a] for a in argnames])
    except KeyboardInterrupt:
        raise
    except AvoError as exc:
        if is_core(distribution):
            raise  # the core's built-ins already word their errors for the user
        raise PluginError(f"{label}: {hook}: {exc}", plugin=name, hook=hook, deliberate=True) from exc
    except BaseException as exc:  # a plugin's bug (or its sys.exit) must not take avo down
        raise PluginError(f"{label}: {hook} raised {type(exc).__name__}: {exc}", plugin=name, hook=hook) from exc
    return _validate(hook, value, name, label)


def call_module_hook(module: object, hook: str, *, plugin: str, distribution: str, **kwargs: Any) -> Any:
    """Call ``hook`` of one plugin object that was imported without the plugin manager (an
    evaluator child that loads only the target's own plugin), guarded and validated as
    :func:`call_target_hook` does.

    :param plugin: the plugin's (entry-point) name and ``distribution`` its distribution,
        both for the error messages.
    :raises PluginError: no such ``@hookimpl``, the call raised, or the result is the wrong type.
    """
    function = getattr(module, hook, None)
    if function is None or not hasattr(function, f"{GROUP}_impl"):
        if hook in _OPTIONAL:
            return _OPTIONAL[hook]
        raise PluginError(f"plugin {plugin!r} ({distribution}) does not implement {hook}", plugin=plugin, hook=hook)
    argnames = [p.name for p in inspect.signature(function).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return _invoke(plugin, hook, function, argnames, kwargs, distribution)


def implementations(hook: str, pm: pluggy.PluginManager | None = None) -> list[tuple[str, Any]]:
    """``(plugin name, hookimpl)`` for each plugin implementing ``hook`` (of those ``pm`` has
    loaded; default: every plugin): the core's first, then in the entry points' order
    (``tryfirst``/``trylast`` and wrappers are ignored: nobody goes first)."""
    pm = pm or get_plugin_manager()
    order = {name: i for i, name in enumerate(_records)}
    impls = [i for i in getattr(pm.hook, hook).get_hookimpls()
             if not (i.hookwrapper or getattr(i, "wrapper", False))]
    impls.sort(key=lambda i: (not is_core_plugin(i.plugin_name), order.get(i.plugin_name, len(order))))
    return [(i.plugin_name, i) for i in impls]


def is_core_plugin(name: str) -> bool:
    record = _records.get(name)
    return record is not None and is_core(record.distribution)


def not_loaded(provider: str, what: str) -> AvoError:
    """The error for ``what``, provided by plugin ``provider``, which is not loaded here: with
    the reason avo knows (its import failed and how, disabled, or no distribution provides it)."""
    record = _records.get(provider)
    if record is None:
        core_only = os.environ.get("AVO_DISABLE_PLUGIN_AUTOLOAD", "").strip() not in ("", "0")
        why = "no installed distribution provides it" + (
            " (AVO_DISABLE_PLUGIN_AUTOLOAD=1 loads the core's built-ins only)" if core_only else " (uninstalled?)")
    elif record.disabled:
        why = f"it is disabled ({DISABLE_ENV})"
    elif record.error:
        why = f"it {record.error}" if record.error.startswith("failed to load") else f"it did not load: {record.error}"
    else:
        why = "it is not loaded here"
    owner = f" ({record.distribution})" if record is not None else ""
    return AvoError(f"{what} is provided by plugin {provider!r}{owner}, but {why}; see `avo plugins`")


def _call_provider(provider: str, hook: str, kwargs: dict[str, Any], what: str) -> Any:
    pm = plugin_manager_with({provider})
    if pm.get_plugin(provider) is None:
        raise not_loaded(provider, what)
    impl = next((i for n, i in implementations(hook, pm) if n == provider), None)
    if impl is None:
        if hook in _OPTIONAL:
            return _OPTIONAL[hook]
        raise _missing(provider, hook, what)
    return _invoke(provider, hook, impl.function, impl.argnames, kwargs)


def _missing(provider: str, hook: str, what: str) -> PluginError:
    typo = [p for p in (_records.get(provider) or PluginRecord("", "", "", "")).problems if "unknown hook" in p]
    return PluginError(f"{_label(provider)} provides {what} but does not implement {hook}"
                       + (f" ({'; '.join(typo)})" if typo else ""), plugin=provider, hook=hook)


def check_target_hook(spec: TargetSpec, hook: str) -> None:
    """Raise the :class:`PluginError` :func:`call_target_hook` would raise for a missing ``hook``
    (used before starting an evaluator child, which runs the plugin without the manager)."""
    provider = _target_provider(spec)
    pm = plugin_manager_with({provider})
    if hook not in _OPTIONAL and not any(n == provider for n, _ in implementations(hook, pm)):
        raise _missing(provider, hook, f"target {spec.name!r}")


def _target_provider(spec: TargetSpec) -> str:
    pm = plugin_manager_with({spec.provider} if spec.provider else set())
    if spec.provider and pm.get_plugin(spec.provider) is not None:
        return spec.provider
    if spec.directory is not None:
        return "directory"
    # Not stamped, or stamped by a plugin registered under another name since (a run made
    # before another distribution took the same entry-point name): look the name up again.
    provider = find_target(spec.name).provider
    assert provider is not None  # announced specs are always stamped
    return provider


def call_target_hook(spec: TargetSpec, hook: str, **kwargs: Any) -> Any:
    """Call ``hook`` (``avo_seed``, ``avo_knowledge``, ``avo_evaluate``, ``avo_baselines``) of the
    plugin that announced ``spec``, and of no other; ``target=spec`` is passed for you.

    :return: the validated result (``None`` for ``avo_seed``/``avo_knowledge``; ``None``
        from ``avo_baselines`` when the provider has none).
    :raises PluginError: the plugin raised, returned the wrong type, or lacks a required hook.
    """
    provider = _target_provider(spec)
    result = _call_provider(provider, hook, {"target": spec, **kwargs}, f"target {spec.name!r}")
    if hook == "avo_seed" and not any(Path(kwargs["dest"]).iterdir()):
        raise PluginError(f"{_label(provider)}: avo_seed wrote no file into {kwargs['dest']} for target "
                          f"{spec.name!r}; it must write the seed program there", plugin=provider, hook=hook)
    return result


def call_backend_hook(backend: BackendInfo | str, hook: str, **kwargs: Any) -> Any:
    """Call ``hook`` (``avo_agent_step``, ``avo_supervise``) of the plugin that announced the
    backend, and of no other; ``backend=<name>`` is passed for you.

    :param backend: the announced :class:`BackendInfo` (from :func:`find_backend`), or a name.
    :raises PluginError: the plugin raised, returned the wrong type, or lacks the hook.
    """
    info = find_backend(backend) if isinstance(backend, str) else backend
    if not info.provider or get_plugin_manager().get_plugin(info.provider) is None:
        info = find_backend(info.name)
    assert info.provider is not None
    return _call_provider(info.provider, hook, {"backend": info.name, **kwargs}, f"backend {info.name!r}")


# -- announcements -------------------------------------------------------------------------

def _fail(name: str, message: str) -> None:
    record = _records.get(name)
    short = message.removeprefix(f"{_label(name)}: ")  # the record already says which plugin
    if record is not None and short not in (record.error or ""):
        record.error = f"{record.error}; {short}" if record.error else short
    _warn(f"{message}; skipped (see `avo plugins`)")


def _announced(hook: str) -> list[Any]:
    items: list[Any] = []
    for name, impl in implementations(hook):
        try:
            with contextlib.redirect_stdout(sys.stderr):
                found = _invoke(name, hook, impl.function, impl.argnames, {}) or []
        except PluginError as exc:
            _fail(name, str(exc))
            continue
        items.extend(item.model_copy(update={"provider": name}) for item in found)
    return items


def _conflicts(kind: str, items: list[Any]) -> tuple[list[Any], dict[str, str]]:
    """Names announced once (usable), and a message for each name announced more than once."""
    by_name: dict[str, list[Any]] = {}
    for item in items:
        by_name.setdefault(item.name, []).append(item)
    usable = [group[0] for group in by_name.values() if len(group) == 1]
    messages = {}
    for name, group in by_name.items():
        if len(group) > 1:
            owners = []
            for item in group:
                record = _records.get(item.provider or "")
                if record is None:
                    owners.append(f"plugin {item.provider!r}")
                else:
                    owners.append(f"plugin {record.name!r} (distribution {record.distribution} {record.version}, "
                                  f"entry point {record.entry_point} = {record.module})")
            dists = sorted({(_records[i.provider].distribution if i.provider in _records else str(i.provider))
                            for i in group})
            removable = " or ".join(d for d in dists if not is_core(d)) or dists[0]
            messages[name] = (
                f"{kind} {name!r} is announced {len(group)} times: by {' and by '.join(owners)}. Neither is used "
                f"until one is removed (pip uninstall {removable}) or disabled ({DISABLE_ENV}={removable.split()[0]})")
    return usable, messages


def announced_targets() -> tuple[list[TargetSpec], dict[str, str]]:
    """Usable targets (announced once, stamped with their provider), and ``{name: conflict}``."""
    return _conflicts("target", _announced("avo_targets"))


def announced_backends() -> tuple[list[BackendInfo], dict[str, str]]:
    """Usable backends (announced once, stamped with their provider), and ``{name: conflict}``."""
    return _conflicts("backend", _announced("avo_backends"))


def all_targets() -> list[TargetSpec]:
    """Every usable target: announced by exactly one plugin, stamped with its provider."""
    return announced_targets()[0]


def all_backends() -> list[BackendInfo]:
    """Every usable backend: announced by exactly one plugin, stamped with its provider."""
    return announced_backends()[0]


def find_target(ref: str) -> TargetSpec:
    """A target by registered name, else by what a plugin resolves (a directory path).

    :raises AvoError: unknown, or announced by two plugins (the message names both).
    """
    specs, conflicts = announced_targets()
    if ref in conflicts:
        raise AvoError(conflicts[ref])
    for spec in specs:
        if spec.name == ref:
            return spec
    errors = []
    answers: list[TargetSpec] = []
    # The core's resolver (folders holding target.yaml) answers first and alone; the others
    # are all asked, and two of them claiming the same reference is a conflict, not a race.
    for name, impl in implementations("avo_resolve_target"):
        try:
            with contextlib.redirect_stdout(sys.stderr):
                resolved = _invoke(name, "avo_resolve_target", impl.function, impl.argnames, {"ref": ref})
        except PluginError as exc:
            if exc.deliberate:
                raise
            errors.append(str(exc))
            continue
        if resolved is not None:
            answers.append(resolved.model_copy(update={"provider": name}))
            if is_core_plugin(name):
                break
    if len(answers) == 1:
        return answers[0]
    if answers:
        raise AvoError(f"target {ref!r} is claimed by {len(answers)} plugins: "
                       + " and ".join(_label(a.provider or "") for a in answers)
                       + f"; neither is used until one is removed or disabled ({DISABLE_ENV}=ENTRY_POINT)")
    names = sorted(s.name for s in specs)
    known = ", ".join(names) or "none installed"
    # The target may be one of theirs: a plugin that did not load announces nothing.
    errors += [f"plugin {r.name!r} ({r.distribution}) is not usable, so no target of its is known: {r.error}"
               for r in _records.values() if r.error and not r.disabled]
    raise AvoError(
        f"unknown target {ref!r}: not an installed target ({known}) "
        f"and not a folder holding a target.yaml{did_you_mean(ref, names)}" + "".join(f"\n  {e}" for e in errors)
    )


def find_backend(name: str) -> BackendInfo:
    """A backend by name, with a clear error listing the installed ones."""
    infos, conflicts = announced_backends()
    if name in conflicts:
        raise AvoError(conflicts[name])
    for info in infos:
        if info.name == name:
            return info
    names = sorted(b.name for b in infos)
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
    plugin = plugin_manager_with({name}).get_plugin(name)
    file = getattr(plugin, "__file__", None) if isinstance(plugin, ModuleType) else None
    if file is None:
        file = getattr(sys.modules.get(type(plugin).__module__), "__file__", None)
    return Path(file).resolve().parent if file else None


def plugin_records() -> list[PluginRecord]:
    """Every plugin with its distribution, version, what it provides and what is wrong with it."""
    pm = get_plugin_manager()
    raw = [*_announced("avo_targets"), *_announced("avo_backends")]
    targets, target_conflicts = _conflicts("target", [i for i in raw if isinstance(i, TargetSpec)])
    backends, backend_conflicts = _conflicts("backend", [i for i in raw if isinstance(i, BackendInfo)])
    provides: dict[str, tuple[list[str], list[str]]] = {}
    for spec in targets:
        provides.setdefault(spec.provider or "", ([], []))[0].append(spec.name)
    for info in backends:
        provides.setdefault(info.provider or "", ([], []))[1].append(info.name)
    conflicted: dict[str, list[str]] = {}
    for item in raw:
        message = (target_conflicts if isinstance(item, TargetSpec) else backend_conflicts).get(item.name)
        if message and message not in conflicted.setdefault(item.provider or "", []):
            conflicted[item.provider or ""].append(message)
    out = []
    for name, plugin in pm.list_name_plugin():
        base = _records.get(name) or PluginRecord(name, "(registered)", "", getattr(plugin, "__name__", repr(plugin)))
        hooks = sorted(h.name for h in pm.get_hookcallers(plugin) or [] if h.name.startswith("avo_"))
        t, b = provides.get(name, ([], []))
        out.append(PluginRecord(name, base.distribution, base.version, base.module, hooks, sorted(t), sorted(b),
                                base.error, [*base.problems, *conflicted.get(name, [])], base.entry_point,
                                base.disabled))
    absent = [r for r in _records.values() if pm.get_plugin(r.name) is None]
    return sorted(out + absent, key=lambda r: (not is_core(r.distribution), r.name))


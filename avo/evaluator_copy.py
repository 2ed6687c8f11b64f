"""The private copy of the evaluator that every evaluation of a run actually executes.

At start (and whenever the copy is missing) the evaluator's files are copied out of the
installed target into the run's private folder, under the digest of their content. A plugin
target's copy holds its package and avo's own, and runs with ``python -I`` (no current
directory, no user site, no ``PYTHON*`` variables) and a private bytecode cache, so neither
a file in the candidate's snapshot nor a ``.pyc`` planted next to the installed source can
stand in for it. The copy, and the interpreter's ``.pth`` start-up files, are hashed before
and after every evaluation.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import site
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from avo.errors import AvoError, IntegrityError
from avo.integrity import Identity, compare, hash_tree, identity
from avo.models import TargetSpec

if TYPE_CHECKING:
    from avo.evaluation import Runtime

RUNTIME_KEY = "runtime"


def _site_dirs() -> list[str]:
    return sorted({p for p in site.getsitepackages() if os.path.isdir(p)})


def _sha256_of(path: str, seen: dict[str, Identity] | None = None, key: str = "") -> str:
    if seen is not None:
        seen[key] = identity(path)
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def startup_files(seen: dict[str, Identity] | None = None) -> dict[str, str]:
    """``{name: sha256}`` of what every interpreter start runs: ``.pth`` files, ``sitecustomize``
    (``seen``: each one's identity, as :func:`avo.integrity.hash_tree` takes them).

    Taken twice per evaluation, so on strings and one listing per folder, not a ``Path`` per
    entry (a site-packages folder holds hundreds)."""
    out: dict[str, str] = {}
    for folder in _site_dirs():
        names = sorted(n for n in os.listdir(folder)
                       if n.endswith(".pth") or n in ("sitecustomize.py", "usercustomize.py"))
        for name in names:
            try:
                out[f"site:{name}"] = _sha256_of(os.path.join(folder, name), seen, f"site:{name}")
            except OSError:
                continue
    for folder in sys.path:
        for name in ("sitecustomize.py", "usercustomize.py"):
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                out[f"path:{Path(folder) / name}"] = _sha256_of(path, seen, f"path:{Path(folder) / name}")
    return out


def core_files() -> dict[str, str]:
    """Hashes of avo's own package, as the evaluator child imports it."""
    import avo

    return hash_tree(Path(avo.__file__).resolve().parent)


def runtime_hashes(plugin: bool) -> dict[str, str]:
    """What runs besides the target's own files: start-up files, and avo for plugin targets."""
    out = startup_files()
    if plugin:
        out.update({f"avo/{k}": v for k, v in core_files().items()})
    return out


def digest(hashes: dict[str, dict[str, str]]) -> str:
    """A short content address for a set of file hashes."""
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()[:20]


def _copy_files(src_root: Path, names: dict[str, str], dest: Path) -> None:
    for rel in names:
        src, out = src_root / rel, dest / rel
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, out)
        out.chmod(0o444 | (src.stat().st_mode & 0o111))


def prepare(private: Path, source: Path, evaluator: dict[str, str], *, module: str | None) -> Path:
    """The copy's root for ``evaluator`` (hashes of ``source``'s files), made if missing.

    ``module``: for a plugin target, the folder its package takes in the copy (``""`` for a
    single-file module, which sits at the root), next to ``root/avo``. A directory target's
    files are the root itself (``module`` is ``None``).
    """
    core = core_files() if module is not None else {}
    address = digest({"evaluator": evaluator, "core": core})
    root = private / "evaluator" / address
    if root.is_dir():
        return root
    tmp = root.with_name(f".{address}.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    src = source if source.is_dir() else source.parent
    if module is None:
        _copy_files(src, evaluator, tmp)
    else:
        import avo

        _copy_files(src, evaluator, tmp / module)
        _copy_files(Path(avo.__file__).resolve().parent, core, tmp / "avo")
    tmp.rename(root)
    return root


def copy_hashes(root: Path, module: str | None,
                seen: dict[str, Identity] | None = None) -> tuple[dict[str, str], dict[str, str]]:
    """``(target files, avo files)`` of a copy, keyed as :func:`prepare` was given them
    (``seen``: every file's identity, the avo files' keys under ``avo/``)."""
    if module is None:
        return hash_tree(root, seen=seen), {}
    core_seen: dict[str, Identity] = {}
    target = hash_tree(root / module, {root / "avo"} if not module else None, seen)
    core = hash_tree(root / "avo", seen=core_seen)
    if seen is not None:
        seen.update({f"avo/{k}": v for k, v in core_seen.items()})
    return target, core


def check(root: Path, module: str | None, evaluator: dict[str, str],
          runtime: dict[str, str]) -> dict[str, Identity]:
    """Raise :class:`IntegrityError` if the copy or the start-up files differ from the record.

    Returns the identity of every file it read (:func:`avo.integrity.identity`): the same
    content is not enough after an evaluation. Round seven of the red team swapped the copy's
    eval.py between this check and the evaluator's start for one that put the original bytes
    back before it printed a forged result (1e9 accepted; the hashes after it matched)."""
    if not root.is_dir():
        raise IntegrityError(f"the private evaluator copy {root} is gone")
    seen: dict[str, Identity] = {}
    target_now, core_now = copy_hashes(root, module, seen)
    compare("evaluator copy", evaluator, target_now, root)
    if module is not None:
        recorded_core = {k[4:]: v for k, v in runtime.items() if k.startswith("avo/")}
        compare("avo package the evaluator runs", recorded_core, core_now, root / "avo")
    recorded_start = {k: v for k, v in runtime.items() if not k.startswith("avo/")}
    compare("interpreter start-up files (.pth, sitecustomize)", recorded_start, startup_files(seen),
            Path(sys.prefix))
    expected = set(evaluator) if module is None else {f"{module}/{k}" if module else k for k in evaluator}
    if module is not None:
        expected |= {f"avo/{k}" for k in core_now}
    present = _everything(root, seen)
    stray = sorted(present - expected)
    if stray:
        raise IntegrityError(
            f"the private evaluator copy {root} holds files that are not the evaluator's: {', '.join(stray[:5])}"
            + (f" and {len(stray) - 5} more" if len(stray) > 5 else "") + ". Python imports a .pyc there "
            "instead of a module (round seven of the red team: a json.pyc beside a directory target's eval.py "
            "forged its result); remove them, or start a new run.")
    return seen


def _everything(root: Path, seen: dict[str, Identity]) -> set[str]:
    """Every file under ``root``, caches included (unlike :func:`avo.integrity.hash_tree`), and
    each folder's identity into ``seen`` (``dir:`` keys; the root's own as ``dir:.``): a folder
    swapped for another, or one where a file was added or removed, is not the same folder."""
    files: set[str] = set()
    for folder, dirs, names in os.walk(root):
        rel = os.path.relpath(folder, root)
        seen[f"dir:{rel}"] = identity(folder)
        dirs.sort()
        files.update(os.path.normpath(os.path.join(rel, n)) for n in names)
    return files


def rewritten(before: dict[str, Identity], after: dict[str, Identity]) -> list[str]:
    """The files :func:`check` read both times that are not the same files any more."""
    return sorted(k for k in before.keys() & after.keys() if before[k] != after[k])


# Where an evaluator child's bytecode cache would be: a path under a device, which no one can
# create, so every module it imports (numpy, the standard library) is compiled from its source.
# A cache of avo's own (`$XDG_CACHE_HOME/avo/pycache`, shared by runs) was the agent's to write:
# round seven of the red team planted a `json` there whose `os.write` multiplied the metrics in
# the result line by 10 (4.11 accepted where 0.41 was measured). The price, measured: numpy and
# pydantic ~0.4 s per evaluation, torch ~2 s.
NO_BYTECODE = "/dev/null/avo-compiles-from-source"


# The boot code of the evaluator child. Modules of the copy (the target's package and avo)
# are imported only from bytes whose hash is the one recorded when the run started, read
# once and compiled without a bytecode cache: a file swapped and restored around the import,
# or a .pyc planted in any cache, never runs. Everything else imports as usual.
_BOOT = """
import hashlib, importlib.abc, importlib.machinery, importlib.util, json, sys
ROOT, FILES = {root!r}, json.loads({manifest!r})
class Loader(importlib.machinery.SourceFileLoader):
    # A file loader (package resources keep working) whose code comes only from checked bytes.
    def __init__(self, name, path, rel):
        super().__init__(name, path)
        self.rel = rel
    def get_code(self, fullname):
        data = self.get_data(self.path)
        if hashlib.sha256(data).hexdigest() != FILES[self.rel]:
            raise ImportError("avo: " + self.rel + " of the evaluator copy changed since the run started")
        return compile(data, self.path, "exec", dont_inherit=True)
class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        base = name.replace(".", "/")
        for rel, package in ((base + "/__init__.py", True), (base + ".py", False)):
            if rel in FILES:
                return importlib.util.spec_from_file_location(
                    name, ROOT + "/" + rel, loader=Loader(name, ROOT + "/" + rel, rel),
                    submodule_search_locations=[ROOT + "/" + base] if package else None)
        return None
sys.meta_path.insert(0, Finder())
from avo.evaluator import main
sys.exit(main())
"""


def manifest(package: str | None, evaluator: dict[str, str], runtime: dict[str, str]) -> dict[str, str]:
    """``{path in the copy: sha256}`` of every module the evaluator child may import from it."""
    if package is None:
        return {}
    files = {(f"{package}/{k}" if package else k): v for k, v in evaluator.items()}
    files.update({k: v for k, v in runtime.items() if k.startswith("avo/")})
    return {k: v for k, v in files.items() if k.endswith(".py")}


def python_command(root: Path, files: dict[str, str]) -> list[str]:
    """The interpreter command that runs :mod:`avo.evaluator` from the copy at ``root``,
    importing the copy's modules only as ``files`` (their recorded hashes) say, and nothing
    from any bytecode cache (:data:`NO_BYTECODE`)."""
    boot = _BOOT.format(root=str(root), manifest=json.dumps(files, sort_keys=True))
    return [sys.executable, "-I", "-B", "-X", f"pycache_prefix={NO_BYTECODE}", "-c", boot]


def evaluator_source(spec: TargetSpec) -> tuple[Path, set[Path], str | None]:
    """``(root, excluded, module)``: what counts as the evaluator of ``spec``.

    A directory target's folder, or a target plugin's package directory (``module`` is its
    import name; ``None`` for a directory target). In both, the seed and knowledge-base
    folders only feed a run's start (the run's own kb/ copy is hashed on its own), so they
    are left out and changing them does not stop running runs.
    """
    if spec.directory is not None:
        from avo.builtin.directory_target import load_target_file

        tf = load_target_file(spec.directory)
        data = {spec.directory / tf.seed}
        if tf.knowledge_base is not None:
            data.add(spec.directory / tf.knowledge_base)
        return spec.directory, data, None
    from types import ModuleType

    from avo.plugins import not_loaded, plugin_manager_with

    plugin = plugin_manager_with({spec.provider or ""}).get_plugin(spec.provider or "")
    if plugin is None:
        raise not_loaded(spec.provider or "", f"target {spec.name!r}")
    file = getattr(plugin, "__file__", None) if isinstance(plugin, ModuleType) else None
    if file is None:
        raise AvoError(f"cannot locate the plugin module that provides target {spec.name!r}; a target "
                       "plugin must be an installed module or package, so avo can copy and run it")
    path = Path(file).resolve()
    # A single-file top-level module is just that file; otherwise its package folder.
    root = path if "." not in plugin.__name__ and path.name != "__init__.py" else path.parent
    return root, {root / "seed", root / "kb"}, plugin.__name__


def copy_folder(root: Path, module: str | None) -> str | None:
    """Where a plugin's files sit inside its copy (see :func:`prepare`)."""
    if module is None:
        return None
    return root.name if root.is_dir() else ""


def fresh_runtime(spec: TargetSpec, private: Path, label: str, *, sandbox: str | None = None) -> Runtime:
    """A runtime for evaluating outside a run (verify, the conformance suites): a new copy
    of the evaluator as installed now, in ``private``."""
    from avo.evaluation import Runtime
    from avo.sandbox import requested_level, resolve_level

    root, exclude, module = evaluator_source(spec)
    package = copy_folder(root, module)
    hashes = hash_tree(root, exclude)
    copy = prepare(private, root, hashes, module=package)
    runtime = runtime_hashes(module is not None)
    check(copy, package, hashes, runtime)
    level, _ = resolve_level(requested_level(sandbox))
    from avo.plugins import plugin_distribution

    return Runtime(copy, package, module, spec.provider if module else None, level, private / "eval" / label,
                   distribution=plugin_distribution(spec.provider or "") if module else None,
                   files=manifest(package, hashes, runtime))

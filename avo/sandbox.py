"""The sandbox every process that runs candidate code starts in.

On Linux this is bubblewrap: the sandbox's view of the file system is built up from nothing
(the system and the interpreter read-only, then exactly the paths the caller names), with
its own PID, network, IPC, UTS and mount namespaces, a fresh ``/tmp``, ``/dev`` and
``/dev/shm``, no capabilities, and ``--die-with-parent``. When the sandbox's first process
ends, the kernel ends every other process in its PID namespace, so a double-forked,
``setsid`` daemon cannot outlive the evaluation. Where bubblewrap cannot run, the level is
``none``: the process still gets its own session and process group, and the run records
that it had nothing more.

Targets call :func:`popen` (or :func:`wrap`) for their candidate processes; the core wraps
directory evaluators the same way. The level comes from ``$AVO_SANDBOX`` (set by the engine
for every evaluation from what the run recorded), else from what this machine supports.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from avo.errors import AvoError

Level = Literal["bwrap", "none"]
LEVELS: tuple[str, ...] = ("auto", "bwrap", "none")
ENV = "AVO_SANDBOX"
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Only what programs need to start: the dynamic loader's cache, name service basics,
# compiler alternatives (cc, c++ are /etc/alternatives links on Debian), time zone.
_ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group",
        "nsswitch.conf", "localtime", "os-release")
_BASE_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp",
             "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


class SandboxError(AvoError):
    """The sandbox the run asked for cannot be set up here."""


@dataclass(frozen=True)
class Sandbox:
    """What a sandboxed process may see.

    ``writable`` and ``readable`` paths appear at the same path inside; ``devices`` are
    device nodes (a GPU's ``/dev/nvidia*``) bound into the fresh ``/dev`` so they can be
    opened (plain binds are mounted ``nodev``); ``hide`` paths are covered with an empty
    directory (used for installed target packages under a bound prefix); ``env`` is the
    whole environment inside besides PATH, HOME, TMPDIR and locale. ``tmp_mb`` bounds the
    fresh ``/tmp`` and ``/dev/shm`` (each): tmpfs pages are memory no ``RLIMIT_AS`` counts.
    """

    writable: tuple[Path, ...] = ()
    readable: tuple[Path, ...] = ()
    devices: tuple[Path, ...] = ()
    hide: tuple[Path, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    network: bool = False
    tmp_mb: int = 256


@functools.lru_cache(maxsize=1)
def probe() -> tuple[bool, str]:
    """Whether bubblewrap works here, and why not when it does not (cached per process)."""
    if not sys.platform.startswith("linux"):
        return False, (f"no sandbox is implemented for {sys.platform}: candidates run in their own "
                       "process group only (no file-system, network or PID isolation)")
    exe = shutil.which("bwrap")
    if exe is None:
        return False, ("bubblewrap is not installed (`apt-get install bubblewrap` on Debian/Ubuntu, "
                       "`dnf install bubblewrap` on Fedora)")
    try:
        proc = subprocess.run(
            [exe, "--unshare-all", "--die-with-parent", "--cap-drop", "ALL",
             "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "true"],
            capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"bubblewrap could not run: {exc}"
    if proc.returncode != 0:
        why = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        return False, (f"bubblewrap cannot create namespaces here ({why[-1] if why else proc.returncode}); "
                       "user namespaces may be disabled (sysctl kernel.unprivileged_userns_clone)")
    return True, "bubblewrap works"


def resolve_level(requested: str = "auto") -> tuple[Level, str]:
    """The level a run gets for ``requested`` (``auto``, ``bwrap`` or ``none``), and why.

    ``bwrap`` requested where it cannot run raises :class:`SandboxError`; ``auto`` falls
    back to ``none`` and says so.
    """
    if requested not in LEVELS:
        raise SandboxError(f"unknown sandbox {requested!r}; choose one of {', '.join(LEVELS)}")
    if requested == "none":
        return "none", "no sandbox (chosen with --sandbox none)"
    ok, why = probe()
    if ok:
        return "bwrap", "bubblewrap: own PID, network, IPC and mount namespaces, read-only system"
    if requested == "bwrap":
        raise SandboxError(f"the bubblewrap sandbox was asked for but {why}")
    return "none", f"no sandbox: {why}"


def current_level() -> Level:
    """The level for this evaluation: ``$AVO_SANDBOX`` when set, else the best available."""
    requested = os.environ.get(ENV, "").strip() or "auto"
    return resolve_level(requested)[0]


def _real(path: Path | str) -> Path:
    return Path(os.path.realpath(path))


@functools.lru_cache(maxsize=1)
def _interpreter_paths() -> tuple[Path, ...]:
    """The interpreter's install and the environment's prefix (read-only inside)."""
    paths = {_real(sys.base_prefix), _real(sys.prefix), _real(sys.executable).parent}
    return tuple(sorted(paths))


def interpreter() -> str:
    """The Python to start inside the sandbox (this interpreter, environment included).

    Absolute (symbolic links kept, so a virtual environment stays one): the sandbox's
    working directory is not the caller's, so a relative ``sys.executable`` would not start.
    """
    return os.path.abspath(sys.executable)


def _covered(path: Path, roots: Iterable[Path]) -> bool:
    return any(path == r or r in path.parents for r in roots)


def bwrap_args(box: Sandbox) -> list[str]:
    """The bubblewrap command line (without the program) for ``box``."""
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv"]
    if box.network:
        args.append("--share-net")
    for name in _SYSTEM_DIRS:
        p = Path(name)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), name]
        elif p.is_dir():
            args += ["--ro-bind", name, name]
    for name in _ETC:
        p = Path("/etc") / name
        if p.exists():
            args += ["--ro-bind", str(p), str(p)]
    args += ["--proc", "/proc"]
    # Where avo runs as root bwrap makes no user namespace, and the fresh /proc's sysctls
    # stay writable by uid 0 even without capabilities: core_pattern alone would run a
    # program of the candidate's as root outside the sandbox. Read-only, always.
    for name in ("/proc/sys", "/proc/sysrq-trigger"):
        args += ["--ro-bind-try", name, name]
    size = str(box.tmp_mb << 20)
    args += ["--dev", "/dev", "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/dev/shm"]
    bound = [Path(d) for d in _SYSTEM_DIRS]
    for p in _interpreter_paths():
        if not _covered(p, bound):
            args += ["--ro-bind", str(p), str(p)]
            bound.append(p)
    for p in box.readable:
        rp = _real(p)
        args += ["--ro-bind", str(rp), str(rp)]
    for p in box.writable:
        rp = _real(p)
        args += ["--bind", str(rp), str(rp)]
    for p in box.devices:
        args += ["--dev-bind", str(p), str(p)]
    roots = [*bound, *(_real(p) for p in (*box.readable, *box.writable))]
    for p in box.hide:
        rp = _real(p)
        if not _covered(rp, roots):  # not visible anyway; covering it would create its parents
            continue
        if rp.is_dir():
            args += ["--size", "4096", "--tmpfs", str(rp), "--remount-ro", str(rp)]
        elif rp.exists():
            args += ["--ro-bind", "/dev/null", str(rp)]
    # The root and /dev are tmpfs mounts bwrap made: read-only, so neither holds a byte.
    args += ["--remount-ro", "/dev", "--remount-ro", "/"]
    env = {**_BASE_ENV, **box.env}
    for key, value in env.items():
        args += ["--setenv", key, value]
    if box.cwd is not None:
        args += ["--chdir", str(_real(box.cwd))]
    args.append("--")
    return args


def wrap(argv: Sequence[str], box: Sandbox, level: Level | None = None) -> tuple[list[str], dict[str, str]]:
    """``(command, environment)`` that run ``argv`` inside ``box`` at ``level``.

    At level ``none`` (no isolation, the user's choice or all this machine offers) the
    command is ``argv`` itself, with the caller's environment plus ``box.env``.
    """
    level = level or current_level()
    if level == "none":
        return list(argv), {**os.environ, **box.env}
    env = {**_BASE_ENV, **box.env}
    ok, why = probe()
    if not ok:
        raise SandboxError(f"this run evaluates in a bubblewrap sandbox but {why}")
    return [*bwrap_args(box), *argv], env


def popen(argv: Sequence[str], box: Sandbox, *, level: Level | None = None, **kwargs: Any) -> subprocess.Popen[Any]:
    """Start ``argv`` inside ``box``: its own session, the sandbox's environment.

    Keyword arguments go to :class:`subprocess.Popen` (pipes, ``pass_fds``, ``preexec_fn``);
    ``env`` and ``cwd`` come from ``box``.
    """
    command, env = wrap(argv, box, level)
    kwargs.setdefault("start_new_session", True)
    cwd = box.cwd if (level or current_level()) == "none" else None
    return subprocess.Popen(command, env=env, cwd=cwd, **kwargs)


def installed_package_dirs() -> list[Path]:
    """Folders of avo and of every installed ``avo`` plugin package.

    A sandbox hides them: a candidate must not read a target's engine, references or seed
    formulas through the interpreter's site-packages.
    """
    from importlib import metadata

    import avo

    found = {Path(avo.__file__).resolve().parent}
    for ep in metadata.entry_points(group="avo"):
        top = ep.value.split(":")[0].split(".")[0]
        spec = _find_spec(top)
        if spec is not None:
            found.add(spec)
    return sorted(found)


def _find_spec(module: str) -> Path | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    origin = Path(spec.origin).resolve()
    return origin.parent if origin.name == "__init__.py" else origin


# -- CPU accounting of a process tree ------------------------------------------------------


def _stat_fields(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()


def _children(pid: int) -> list[int] | None:
    """Direct children of ``pid`` from ``/proc/<pid>/task/*/children`` (``None`` if unavailable)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return []  # gone
    out: list[int] = []
    for tid in tasks:
        try:
            out.extend(int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except FileNotFoundError:
            if not Path(f"/proc/{pid}/task/{tid}").exists():
                continue  # the thread ended while we looked
            return None  # a kernel without CONFIG_PROC_CHILDREN
        except OSError:
            continue
    return out


def tree_pids(root: int) -> list[int]:
    """``root`` and every live descendant (Linux ``/proc``), parents before children.

    Walks each process's ``children`` files (cheap: a sandbox holds few processes); falls
    back to scanning every process on the machine where the kernel does not offer them.
    """
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = _children(pid)
        if kids is None:
            return _tree_pids_by_scan(root)
        out.append(pid)
        todo.extend(kids)
    return out


def _tree_pids_by_scan(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = _stat_fields(int(entry))
        if fields is not None:
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds (user + system) used so far by ``root`` and all its descendants.

    Every live process counts its own time plus that of the children it has reaped; a
    process that ended and was reaped inside the tree is in its reaper's count. Inside a
    bubblewrap PID namespace orphans are reaped by the sandbox's init, so a daemon that
    double-forked is still counted.
    """
    ticks = 0
    for pid in tree_pids(root):
        fields = _stat_fields(pid)
        if fields is not None:
            ticks += sum(int(v) for v in fields[11:15])  # utime stime cutime cstime
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_threads(root: int) -> dict[int, int]:
    """``{pid: number of threads}`` for ``root`` and its live descendants."""
    out = {}
    for pid in tree_pids(root):
        try:
            out[pid] = len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            continue
    return out

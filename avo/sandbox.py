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
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from avo.errors import AvoError
from avo.eval_env import SANDBOX
from avo.programs import find, program

Level = Literal["bwrap", "none"]
LEVELS: tuple[str, ...] = ("auto", "bwrap", "none")
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
    exe = find("bwrap")  # never an agent's bwrap first on its PATH
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
    return resolve_level(requested_level())[0]


def requested_level(explicit: str | None = None) -> str:
    """The level asked for: ``explicit`` (a ``--sandbox`` option), else ``$AVO_SANDBOX``, else auto."""
    return explicit or os.environ.get(SANDBOX, "").strip() or "auto"


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
    # On strings: `r in path.parents` builds a Path per parent, per root (ms per evaluation).
    text = str(path)
    return any(text == str(r) or text.startswith(str(r).rstrip("/") + "/") for r in roots)


def bwrap_args(box: Sandbox) -> list[str]:
    """The bubblewrap command line (without the program) for ``box``."""
    args = [program("bwrap"), "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
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
    return [*candidate_prefix(box, level), *argv], {**_BASE_ENV, **box.env}


def candidate_prefix(box: Sandbox, level: Level) -> list[str]:
    """The words to put before a program's argv so that it runs inside ``box`` at ``level``.

    A directory target with ``isolation: candidate`` receives them, as a JSON list, in
    ``$AVO_CANDIDATE_PREFIX``. Empty at level ``none``; otherwise a bubblewrap command line
    ending in ``--`` that sets the whole environment inside.
    """
    if level == "none":
        return []
    ok, why = probe()
    if not ok:
        raise SandboxError(f"this run evaluates in a bubblewrap sandbox but {why}")
    return bwrap_args(box)


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
    # Scanning every distribution's entry points costs ~10 ms a submit; installing or removing
    # a distribution changes its site directory's mtime, so that is the cache's key.
    return list(_scan_package_dirs(tuple((entry, _mtime_ns(entry)) for entry in sys.path)))


def _mtime_ns(entry: str) -> int:
    try:
        return os.stat(entry or ".").st_mtime_ns
    except OSError:
        return -1


@functools.lru_cache(maxsize=1)
def _scan_package_dirs(_site: tuple[tuple[str, int], ...]) -> tuple[Path, ...]:
    from importlib import metadata

    import avo

    found = {Path(avo.__file__).resolve().parent}
    for ep in metadata.entry_points(group="avo"):
        top = ep.value.split(":")[0].split(".")[0]
        spec = _find_spec(top)
        if spec is not None:
            found.add(spec)
    return tuple(sorted(found))


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


# -- tasks created inside a sandbox ----------------------------------------------------------

_CLONE_NEWUSER, _CLONE_NEWPID = 0x10000000, 0x20000000
_NS_GET_USERNS = 0xB701  # ioctl on a namespace file: the user namespace that owns it
# Probe tasks this process has put into each sandbox's PID namespace (by namespace inode).
_probes: dict[int, int] = {}


def _inside_pid(root: int) -> int | None:
    """A process under ``root`` that lives in another PID namespace than ours (the sandbox's init)."""
    try:
        ours = os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return None
    for pid in tree_pids(root):
        try:
            if os.stat(f"/proc/{pid}/ns/pid").st_ino != ours:
                return pid
        except OSError:
            continue
    return None


def _ns_last_pid(inside: int) -> tuple[int, int] | None:
    """``(namespace inode, last pid)`` of ``inside``'s PID namespace, read from a probe inside it.

    ``ns_last_pid`` is answered for the reader's own PID namespace, whatever ``/proc`` it is
    read through, so a probe must join the namespace: a child of ours enters the user
    namespace that owns it (where we, its creator's user, hold every capability) and then
    the PID namespace, and its own child (the probe, one task in the sandbox) reads it.
    ``None`` when that is not possible here; :class:`SandboxError` when the probe was
    killed (a sandboxed process can see it and has the same user).
    """
    import ctypes
    import fcntl
    import warnings

    try:
        pid_fd = os.open(f"/proc/{inside}/ns/pid", os.O_RDONLY)
    except OSError:
        return None
    try:
        ino = os.fstat(pid_fd).st_ino
        try:
            user_fd = fcntl.ioctl(pid_fd, _NS_GET_USERNS)
        except OSError:
            return None
        try:
            join_user = os.fstat(user_fd).st_ino != os.stat("/proc/self/ns/user").st_ino
            libc = ctypes.CDLL(None, use_errno=True)
            r, w = os.pipe()
            with warnings.catch_warnings():  # 3.12+ warns on fork with threads; the child only makes system calls
                warnings.simplefilter("ignore", DeprecationWarning)
                child = os.fork()
            if child == 0:  # only system calls from here on: this process may have threads
                status = 2
                try:
                    os.close(r)
                    if (join_user and libc.setns(user_fd, _CLONE_NEWUSER) != 0) or \
                            libc.setns(pid_fd, _CLONE_NEWPID) != 0:
                        os._exit(2)
                    probe = os.fork()
                    if probe == 0:
                        try:
                            fd = os.open("/proc/sys/kernel/ns_last_pid", os.O_RDONLY)
                            os.write(w, b"=" + os.read(fd, 32))
                        finally:
                            os._exit(0)
                    _, code = os.waitpid(probe, 0)
                    status = 0 if os.WIFEXITED(code) else 3
                finally:
                    os._exit(status)
            os.close(w)
            with os.fdopen(r, "rb") as pipe:
                data = pipe.read()
            _, code = os.waitpid(child, 0)
        finally:
            os.close(user_fd)
    finally:
        os.close(pid_fd)
    if os.WIFEXITED(code) and os.WEXITSTATUS(code) == 2:
        return None  # not allowed to join the namespace here
    if not data.startswith(b"=") or not os.WIFEXITED(code) or os.WEXITSTATUS(code) != 0:
        raise SandboxError("the probe that counts the sandbox's tasks was killed inside the sandbox")
    _probes[ino] = _probes.get(ino, 0) + 1
    return ino, int(data[1:])


def tasks_created(root: int) -> int | None:
    """How many tasks (processes and threads) have ever been created in ``root``'s sandbox.

    ``root`` is the bubblewrap process (``proc.pid`` of :func:`popen`). The sandbox has its
    own PID namespace, which numbers every new task, thread or process, one past the last:
    its last pid minus the probes this process put in to read it counts every task started
    since the sandbox began, including those that ended long ago, unreaped or reaped by the
    kernel (``SIGCHLD`` ignored). Take a baseline when the worker is ready and compare: a
    worker allowed no helpers must not make it grow. (An attacker could only hide tasks by
    creating about ``kernel.pid_max`` of them, so the count wraps around.)

    ``None`` where ``root`` has no PID namespace of its own (level ``none``, or it ended) or
    this machine does not let us join it; :class:`SandboxError` if the probe was killed.
    Each call forks twice (a few milliseconds): call it at audit points, not in a loop.
    """
    inside = _inside_pid(root)
    if inside is None:
        return None
    seen = _ns_last_pid(inside)
    if seen is None:
        return None
    ino, last = seen
    return last - _probes[ino]


# -- sampled CPU of a whole sandbox -----------------------------------------------------------


class CpuMeter:
    """CPU seconds used by everything that ran under ``root``, counted by sampling ``/proc``.

    :func:`tree_cpu_seconds` sums live processes only: a child whose parent ignores
    ``SIGCHLD`` is reaped by the kernel itself and its CPU lands in nobody's ``cutime``. The
    meter remembers, per process (pid and start time), the largest own CPU (utime + stime)
    it has seen, so a process that ends keeps what it showed; the reaped-children CPU
    (cutime + cstime) of each process counts only by how much it grows beyond the last-seen
    CPU of its children that ended in the same interval (those are counted already).

    Call :meth:`sample` often (before and after each timed call, and every tens of
    milliseconds in a wait). A process that lives shorter than the sampling period and is
    reaped by the kernel is never seen: use :func:`tasks_created` to catch those. A child
    that ends unreaped in the same interval as a sibling is reaped by their parent may
    hide that sibling's CPU up to its own last-seen CPU (it is never double counted).
    """

    def __init__(self, root: int) -> None:
        self.root = root
        self._tick = os.sysconf("SC_CLK_TCK")
        # (pid, start time) -> [ppid, own ticks, reaped-children ticks]
        self._seen: dict[tuple[int, int], list[int]] = {}
        self._ticks = 0

    def sample(self) -> float:
        """Read every live process under ``root`` now; returns :meth:`seconds`."""
        now: dict[tuple[int, int], list[int]] = {}
        for pid in tree_pids(self.root):
            fields = _stat_fields(pid)
            if fields is None:
                continue
            now[(pid, int(fields[19]))] = [int(fields[1]), int(fields[11]) + int(fields[12]),
                                           int(fields[13]) + int(fields[14])]
        # Last-seen CPU of processes that ended, handed up to their nearest live ancestor
        # (whose cutime it may reappear in): parent pid -> ticks.
        gone = {key[0]: (ppid, own + kids) for key, (ppid, own, kids) in self._seen.items() if key not in now}
        ended: dict[int, int] = {}
        for ppid, ticks in gone.values():
            hops = 0
            while ppid in gone and hops < len(gone):
                ppid, hops = gone[ppid][0], hops + 1
            ended[ppid] = ended.get(ppid, 0) + ticks
        for key, (ppid, own, kids) in now.items():
            before = self._seen.get(key)
            own0, kids0 = (before[1], before[2]) if before else (0, 0)
            self._ticks += max(own - own0, 0)
            self._ticks += max(kids - kids0 - ended.get(key[0], 0), 0)
            if before:
                own, kids = max(own, own0), max(kids, kids0)
            now[key] = [ppid, own, kids]
        self._seen = now
        return self.seconds()

    def seconds(self) -> float:
        """CPU seconds counted so far (10 ms tick resolution)."""
        return self._ticks / self._tick

"""The player process seen from the harness: start it in the sandbox, talk over the pipe,
measure the CPU of everything it runs.

The player starts inside the core's sandbox (:mod:`avo.sandbox`): at the ``bwrap`` level it
sees the system and the interpreter read-only, the target package and avo hidden, a fresh
tmpfs ``/tmp`` (also its ``$HOME``), its own PID namespace (``/proc`` shows only sandbox
processes) and exactly two folders of the harness's choosing: a fresh scratch copy of the
candidate (writable, its working directory) and the player-side shim ``runner.py``
(read-only). Nothing it writes survives the evaluation.

What is charged to the player's thinking-time budget: every CPU second (user + system) of
every process and thread in the sandbox from exec to exit — interpreter start-up,
importing agent.py, parsing each request, choose_move itself, writing each reply, and
whatever it started (a double-forked daemon included: inside the PID namespace it is
reaped by the sandbox's init and counted there; a child the kernel reaps itself, with
``SIGCHLD`` ignored, keeps the CPU it was seen with). What is not charged: the engine, the
harness's own pipe reads and writes. The budget is measured here, from the kernel
(:class:`avo.sandbox.CpuMeter` sampling the sandbox's process tree until it ends), never
reported by the player; a task too short-lived for any sample is still counted by the
sandbox's PID namespace (:func:`avo.sandbox.tasks_created`) and fails the evaluation.
"""

from __future__ import annotations

import os
import resource
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import IO

from avo.sandbox import (
    CpuMeter,
    Level,
    Sandbox,
    SandboxError,
    current_level,
    installed_package_dirs,
    interpreter,
    tasks_created,
    tree_pids,
    tree_threads,
    wrap,
)

RUNNER = Path(__file__).with_name("runner.py")
_MAX_LINE = 512
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_WAIT_SLICE_S = 0.25  # how often a waiting harness re-reads the player's CPU time
# The interpreter's flags: -S, no site-packages (standard library only). Not -I: that
# would ignore PYTHONHASHSEED, and set orders of str keys must be the same every run.
PLAYER_ENV = {"PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}


class PlayerFailure(Exception):
    """The player broke a rule or died; the message says what happened."""


def _preexec(cpu_limit_s: int, memory_mb: int, stderr_cap_mb: int) -> None:
    os.setsid()  # its own process group, so everything it started can be killed at once
    # A kernel backstop a little past the budget: SIGXCPU ends a player that spins.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit_s, cpu_limit_s + 5))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (stderr_cap_mb << 20, stderr_cap_mb << 20))


def sanitized_env(cwd: Path) -> dict[str, str]:
    """The player's whole environment at level ``none``: nothing of the harness's leaks through.

    (Inside bubblewrap the sandbox's own environment applies: PATH, HOME=TMPDIR=/tmp, the
    locale and :data:`PLAYER_ENV`.)
    """
    return {"PATH": os.defpath, "HOME": str(cwd), "TMPDIR": str(cwd), "LANG": "C.UTF-8", **PLAYER_ENV}


def _children_cpu_s(pid: int) -> float:
    """CPU seconds of the children ``pid`` has reaped (cutime + cstime)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[13]) + int(fields[14])) / _CLK_TCK


def _wait_gone(pids: list[int], timeout_s: float = 5.0) -> None:
    """Wait (briefly) until killed processes are gone (zombies waiting for a reaper count as gone)."""
    def alive(pid: int) -> bool:
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except OSError:
            return False

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.005)


def _inner_pid(pid: int) -> int | None:
    """``pid``'s number in its innermost PID namespace (``NSpid``), or ``None``.

    A sandbox that runs only the player holds bwrap outside, bwrap's init (PID 1 inside)
    and the runner (PID 2 inside); anything else was started by the player.
    """
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def _describe(pid: int) -> str:
    """``pid 1234 ('python3', 2 threads)`` for a message, from /proc."""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
        threads = len(os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return f"pid {pid} (gone)"
    return f"pid {pid} ({comm!r}, {threads} thread{'s' if threads != 1 else ''})"


class PlayerProcess:
    """One player process for a whole evaluation (caches may persist across its games).

    ``cwd`` is the scratch copy of the candidate (the sandbox's only writable folder);
    ``runner`` a copy of :data:`RUNNER` in a folder of its own, bound read-only (the
    package itself is hidden in the sandbox). ``level`` defaults to the run's sandbox
    level (``$AVO_SANDBOX``).
    """

    def __init__(self, cwd: Path, stderr_path: Path, *, cpu_budget_s: float, runner: Path,
                 level: Level | None = None, memory_mb: int = 4096, stderr_cap_mb: int = 16) -> None:
        self.cwd = cwd
        self.stderr_path = stderr_path
        self.cpu_budget_s = cpu_budget_s
        self.level: Level = level or current_level()
        self._err: IO[bytes] = open(stderr_path, "wb")  # noqa: SIM115 - closed in close()
        cpu_limit = int(cpu_budget_s) + 2
        box = Sandbox(writable=(cwd,), readable=(runner.parent,), hide=tuple(installed_package_dirs()),
                      env=PLAYER_ENV, cwd=cwd)
        command, env = wrap([interpreter(), "-S", str(runner)], box, self.level)
        if self.level == "none":
            env = sanitized_env(cwd)
        self.proc = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            close_fds=True,
            bufsize=0,
            preexec_fn=lambda: _preexec(cpu_limit, memory_mb, stderr_cap_mb),
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in = self.proc.stdin.fileno()
        self._out = self.proc.stdout.fileno()
        self._buf = b""
        self.status: int | None = None
        self.final_cpu_s: float | None = None
        self._peak_cpu_s = 0.0
        self._meter = CpuMeter(self.proc.pid)

    # -- the pipe ---------------------------------------------------------------------------

    def send(self, line: str) -> None:
        """Write one request line; a closed pipe means the player is gone."""
        try:
            os.write(self._in, (line + "\n").encode())
        except (BrokenPipeError, OSError):
            raise PlayerFailure(self.death_reason("the player process closed its input")) from None

    def read_line(self, timeout_s: float) -> str:
        """The next reply line, waiting at most ``timeout_s`` of wall time.

        While it waits it keeps an eye on the budget, so a player that spins inside one
        ``choose_move`` is stopped as soon as it passes the budget, not at the wall limit.
        """
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buf:
            if len(self._buf) > _MAX_LINE:
                raise PlayerFailure(f"the player sent a reply longer than {_MAX_LINE} bytes without a newline")
            left = deadline - time.monotonic()
            if left <= 0:
                raise PlayerFailure(f"no reply within {timeout_s:g} s of wall time (the per-move wall limit)")
            ready, _, _ = select.select([self._out], [], [], min(left, _WAIT_SLICE_S))
            if not ready:
                used = self.cpu_seconds()
                if used > self.cpu_budget_s:
                    raise PlayerFailure(f"over the thinking-time budget: {used:.1f} s of {self.cpu_budget_s:g} s")
                continue
            chunk = os.read(self._out, 4096)
            if not chunk:
                raise PlayerFailure(self.death_reason("the player process exited"))
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode("utf-8", "replace").strip()

    # -- CPU and life -------------------------------------------------------------------------

    def cpu_seconds(self) -> float:
        """CPU time (user + system) of every process in the sandbox so far; final once reaped.

        Sampled from the kernel over the whole process tree, so threads, children and
        daemons are all charged; it never goes down (a process that ended is in its reaper's
        count, or, reaped by the kernel itself, in what the meter saw of it).
        """
        if self.final_cpu_s is not None:
            return self.final_cpu_s
        self._peak_cpu_s = max(self._peak_cpu_s, self._meter.sample())
        return self._peak_cpu_s

    def extra_tasks(self) -> str | None:
        """What the player started besides its one thread in one process, or ``None``."""
        if self.final_cpu_s is not None:
            return None
        threads = tree_threads(self.proc.pid)
        if not threads:  # already gone; the pipe will say how
            return None
        pids = list(threads)
        own = {self.proc.pid} | ({pid for pid in pids if _inner_pid(pid) in (1, 2)} if self.level == "bwrap" else set())
        runner = next((pid for pid in pids if _inner_pid(pid) == 2), pids[-1]) if self.level == "bwrap" \
            else self.proc.pid
        extra = [pid for pid in pids if pid not in own]
        if extra:
            named = ", ".join(_describe(pid) for pid in extra[:4])
            more = f" and {len(extra) - 4} more" if len(extra) > 4 else ""
            return (f"the player started {len(extra)} other process{'es' if len(extra) > 1 else ''} "
                    f"({named}{more}); a single process is allowed")
        if threads[runner] > 1:
            return f"the player runs {threads[runner]} threads; a single thread is allowed"
        for pid in pids:  # a child that ran and ended is in its reaper's count of children's time
            reaped = _children_cpu_s(pid)
            if reaped > 0:
                return (f"the player started another process, which ended after {reaped:.2f} s of CPU "
                        "(charged to the budget); a single process is allowed")
        if self.level == "bwrap":
            return self._ended_tasks(threads)
        if self.level == "none":
            return self._escaped_group()
        return None

    def _ended_tasks(self, threads: dict[int, int]) -> str | None:
        """Tasks the sandbox's PID namespace numbered beyond those alive in it (none may end)."""
        try:
            created = tasks_created(self.proc.pid)
        except SandboxError as exc:
            return f"{exc}; the player may not touch the harness's processes"
        alive = sum(n for pid, n in threads.items() if pid != self.proc.pid)
        if created is None or created <= alive:
            return None
        ended = created - alive
        return (f"the player started {ended} other thread(s) or process(es) that already ended (with SIGCHLD "
                "ignored the kernel reaps a child itself and its CPU is in nobody's account); a single process "
                "with one thread is allowed")

    def _escaped_group(self) -> str | None:
        """At level ``none``: processes that left the tree but kept the player's group or session."""
        root = self.proc.pid
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == root:
                continue
            try:
                other = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if root in (int(other[1]), int(other[2]), int(other[3])):
                return f"the player started another process ({_describe(int(entry))}); a single process is allowed"
        return None

    def death_reason(self, what: str) -> str:
        """Describe how the player ended, with the tail of its stderr."""
        self.close(kill=False, grace_s=1.0)
        how, sig = "", 0
        if self.status is not None:
            if os.WIFSIGNALED(self.status):
                sig = os.WTERMSIG(self.status)
            elif os.WIFEXITED(self.status):
                code = os.WEXITSTATUS(self.status)
                if self.level == "bwrap" and code > 128 and code - 128 in signal.valid_signals():
                    sig = code - 128  # bubblewrap's init passes a signal death on as 128 + n
                else:
                    how = f" (exit status {code})"
        if sig:
            how = f" (killed by {signal.Signals(sig).name})"
            if sig == signal.SIGXCPU:
                how += " after passing the CPU limit"
        return f"{what}{how}{self.stderr_tail()}"

    def stderr_tail(self, lines: int = 8) -> str:
        """The last lines the player wrote to stderr, ready to append to a message."""
        try:
            data = self.stderr_path.read_bytes()[-4000:].decode("utf-8", "replace").strip()
        except OSError:
            return ""
        tail = "\n".join(data.splitlines()[-lines:])
        return f"\n--- last lines of the player's stderr ---\n{tail}" if tail else ""

    def close(self, *, kill: bool = True, grace_s: float = 2.0) -> float:
        """End the player and everything in its sandbox; return the CPU seconds they used.

        EOF first: a well-behaved player exits at once; past the grace period (``kill``: a
        short one) every process of the sandbox is killed. The tree's CPU is read every 5 ms
        until then, and the figure is the larger of the last reading and the ``wait4``
        rusage (exact at level ``none``; inside bubblewrap it holds only bwrap's outer
        process, which exits before the sandbox's init has reaped the rest).
        """
        if self.final_cpu_s is not None:
            return self.final_cpu_s
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: a well-behaved player exits on its own
        except OSError:
            pass
        deadline = time.monotonic() + (min(grace_s, 0.5) if kill else grace_s)
        pid = self.proc.pid
        seen: set[int] = set()  # every process of the sandbox seen while it ended
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done or time.monotonic() >= deadline:
                break
            seen.update(tree_pids(pid))
            self.cpu_seconds()
            time.sleep(0.005)
        if not done:
            self.cpu_seconds()  # the last look before the kill: a killed sandbox is not reaped here
            inside = tree_pids(pid)
            seen.update(inside)
            for victim in reversed(inside):  # children first, then bwrap; the daemons by name
                try:
                    os.kill(victim, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            done, status, usage = os.wait4(pid, 0)
        else:
            try:  # at level none, grandchildren would keep running (and hold pipes) otherwise
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        # bubblewrap's outer process exits as soon as it learns the player's exit status, while
        # the sandbox's init is still killing the rest of the namespace: wait for that too.
        seen.discard(pid)
        _wait_gone(sorted(seen))
        self.status = status
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.final_cpu_s = max(self._peak_cpu_s, usage.ru_utime + usage.ru_stime)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()
        return self.final_cpu_s

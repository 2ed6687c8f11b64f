"""The player process seen from the harness: start it, talk over the pipe, measure its CPU.

What is charged to the player's thinking-time budget: every CPU second (user + system) its
process spends from exec to exit — interpreter start-up, importing agent.py, reading and
parsing each request, choose_move itself, writing each reply. What is not charged: the
engine, the harness's own pipe reads and writes, building tables in the harness. The
budget is measured here, from the kernel (``/proc/<pid>/stat`` while it runs, ``wait4``
rusage at the end), never reported by the player.
"""

from __future__ import annotations

import os
import resource
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

RUNNER = Path(__file__).with_name("runner.py")
_CLK_TCK = os.sysconf("SC_CLK_TCK")
_MAX_LINE = 512
_WAIT_SLICE_S = 0.25  # how often a waiting harness re-reads the player's CPU time


class PlayerFailure(Exception):
    """The player broke a rule or died; the message says what happened."""


def _preexec(cpu_limit_s: int, memory_mb: int, stderr_cap_mb: int) -> None:
    os.setsid()  # its own process group, so everything it started can be killed at once
    # A kernel backstop a little past the budget: SIGXCPU ends a player that spins.
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_limit_s, cpu_limit_s + 5))
    resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
    resource.setrlimit(resource.RLIMIT_FSIZE, (stderr_cap_mb << 20, stderr_cap_mb << 20))


def sanitized_env(cwd: Path) -> dict[str, str]:
    """The player's whole environment: nothing of the harness's leaks through."""
    return {
        "PATH": os.defpath,
        "HOME": str(cwd),
        "TMPDIR": str(cwd),
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",  # set and dict orders of str keys are the same every run
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }


class PlayerProcess:
    """One player process for a whole evaluation (caches may persist across its games)."""

    def __init__(self, cwd: Path, stderr_path: Path, *, cpu_budget_s: float,
                 memory_mb: int = 4096, stderr_cap_mb: int = 16) -> None:
        self.cwd = cwd
        self.stderr_path = stderr_path
        self.cpu_budget_s = cpu_budget_s
        self._err: IO[bytes] = open(stderr_path, "wb")  # noqa: SIM115 - closed in close()
        cpu_limit = int(cpu_budget_s) + 2
        self.proc = subprocess.Popen(
            [sys.executable, "-S", str(RUNNER)],
            cwd=cwd,
            env=sanitized_env(cwd),
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
        self.rusage_cpu_s: float | None = None

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
        """CPU time (user + system) of the player so far; exact once it has been reaped."""
        if self.rusage_cpu_s is not None:
            return self.rusage_cpu_s
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK

    def extra_tasks(self) -> str | None:
        """Why the player is not a single thread in a single process, or ``None``."""
        try:
            fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return None
        threads = int(fields[17])
        if threads > 1:
            return f"the player runs {threads} threads; a single thread is allowed"
        pgid = self.proc.pid
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == pgid:
                continue
            try:
                other = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(other[2]) == pgid or int(other[1]) == pgid:
                return "the player started another process; a single process is allowed"
        return None

    def death_reason(self, what: str) -> str:
        """Describe how the player ended, with the tail of its stderr."""
        self.close(kill=False, grace_s=1.0)
        how = ""
        if self.status is not None:
            if os.WIFSIGNALED(self.status):
                sig = os.WTERMSIG(self.status)
                how = f" (killed by {signal.Signals(sig).name})"
                if sig == signal.SIGXCPU:
                    how += " after passing the CPU limit"
            elif os.WIFEXITED(self.status):
                how = f" (exit status {os.WEXITSTATUS(self.status)})"
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
        """End the player (EOF first, then SIGKILL to its group), reap it, return its CPU seconds."""
        if self.rusage_cpu_s is not None:
            return self.rusage_cpu_s
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: a well-behaved player exits on its own
        except OSError:
            pass
        deadline = time.monotonic() + (0.0 if kill else grace_s)
        pid = self.proc.pid
        while True:
            done, status, usage = os.wait4(pid, os.WNOHANG)
            if done or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
        if not done:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            done, status, usage = os.wait4(pid, 0)
        else:
            try:  # grandchildren would keep running (and hold pipes) otherwise
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.status = status
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.rusage_cpu_s = usage.ru_utime + usage.ru_stime
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()
        return self.rusage_cpu_s

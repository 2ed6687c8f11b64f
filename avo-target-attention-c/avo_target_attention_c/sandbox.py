"""The evaluator's side of the sandbox: a worker process that runs the candidate.

The kernel is untrusted C: it may segfault, abort, loop forever or print to stdout. It
runs only in the worker, which talks to us over a socket pair. Every request has a
timeout; a worker that dies or stops answering is killed and reported with the signal
(or the timeout) and the request it was serving, and the evaluator carries on to report
a failed gate instead of going down with it. The worker's stdout is sent to our stderr,
so nothing the kernel prints can reach the contract line on the evaluator's stdout.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from multiprocessing.connection import Connection
from pathlib import Path
from types import TracebackType
from typing import Any

START_TIMEOUT_S = 60.0


class SandboxFailure(Exception):
    """The worker crashed, hung or refused a request; ``str(exc)`` is the agent's message."""


def _signal_text(returncode: int) -> str:
    if returncode < 0:
        sig = -returncode
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"{name} ({signal.strsignal(sig) or 'unknown signal'})"
    return f"exit status {returncode}"


def choose_cpus(threads: int) -> list[int]:
    """The ``threads`` least busy CPUs we may run on (sampled from /proc/stat for 0.1 s)."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads >= len(allowed):
        return allowed

    def idle() -> dict[int, int]:
        out: dict[int, int] = {}
        try:
            for line in Path("/proc/stat").read_text().splitlines():
                parts = line.split()
                if parts and parts[0].startswith("cpu") and parts[0][3:].isdigit():
                    out[int(parts[0][3:])] = int(parts[4]) + int(parts[5])  # idle + iowait
        except (OSError, IndexError, ValueError):
            pass
        return out

    before = idle()
    time.sleep(0.1)
    after = idle()
    ranked = sorted(allowed, key=lambda c: -(after.get(c, 0) - before.get(c, 0)))
    return sorted(ranked[:threads])


class Sandbox:
    """A running worker; use as a context manager so it is always reaped."""

    def __init__(self, threads: int, cpus: list[int] | None = None) -> None:
        self.threads = threads
        self.cpus = cpus if cpus is not None else choose_cpus(threads)
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        count = str(threads)
        # Every threading runtime the kernel or NumPy might use gets the same count.
        env.update({"AVO_THREADS": count, "OMP_NUM_THREADS": count, "OPENBLAS_NUM_THREADS": count,
                    "MKL_NUM_THREADS": count, "AVO_CPUS": ",".join(map(str, self.cpus))})
        env.pop("OMP_PROC_BIND", None)
        fd = theirs.fileno()
        # Same process group as the evaluator: if avo kills the evaluator's group on its
        # timeout, the worker goes with it.
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "avo_target_attention_c.worker", "--fd", str(fd)],
            pass_fds=[fd], env=env, stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno(),
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.request_raw("start", None, START_TIMEOUT_S, "starting the sandbox worker")

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker (politely, then by force) and reap it."""
        if self.proc.poll() is None:
            try:
                self.conn.send(("exit", ()))
                self.proc.wait(timeout=2)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self._kill()
        self.conn.close()

    def _kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def request_raw(self, kind: str, args: tuple[Any, ...] | None, timeout: float, what: str) -> Any:
        """Send one request and wait for its reply; crashes and hangs become SandboxFailure."""
        try:
            if args is not None:
                self.conn.send((kind, args))
            ready = self.conn.poll(timeout)
        except (OSError, EOFError):
            ready = True  # the worker is gone; recv below says how
        if not ready:
            self._kill()
            raise SandboxFailure(
                f"timed out: no answer within {timeout:g} s while {what}; the sandbox worker was killed "
                "(an infinite loop, a deadlock, or a kernel far too slow for this shape)"
            )
        try:
            status, payload = self.conn.recv()
        except (EOFError, OSError):
            try:
                code = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._kill()
                code = self.proc.returncode
            how = _signal_text(code)
            if code < 0:
                raise SandboxFailure(f"the kernel crashed with {how} while {what}") from None
            raise SandboxFailure(
                f"the sandbox worker exited ({how}) while {what}: did the kernel call exit()?"
            ) from None
        if status != "ok":
            raise SandboxFailure(f"{payload} (while {what})")
        return payload

    def request(self, kind: str, args: tuple[Any, ...], timeout: float, what: str) -> Any:
        """Like :meth:`request_raw`, for a request that must be sent."""
        return self.request_raw(kind, args, timeout, what)

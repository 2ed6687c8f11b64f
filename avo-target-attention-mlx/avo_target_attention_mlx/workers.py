"""The evaluator's side of a sandboxed worker: start it, time its calls, police its process tree.

Each worker gets a fresh scratch folder (the harness and a copy of the kernel's files in
it, its own /tmp and $HOME from the sandbox), is pinned to one CPU, and is reached only by a
request/response pipe and two memory-mapped files: the inputs (read-only inside) and its
own output buffer. The clock is the evaluator's, around each request.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from avo.sandbox import (
    CpuMeter,
    Sandbox,
    SandboxError,
    installed_package_dirs,
    interpreter,
    popen,
    tasks_created,
    tree_pids,
)

HERE = Path(__file__).resolve().parent
HARNESS = HERE / "worker.py"
START_TIMEOUT_S = 120.0
CALL_TIMEOUT_S = 120.0
# Single-threaded BLAS in every worker: OpenBLAS threads started at NumPy's import would be
# helper threads nobody asked for (and would steal the pinned core).
WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class WorkerFailure(Exception):
    """The kernel in a worker broke the contract or the rules; the message says how."""


@dataclass(frozen=True)
class TreeShape:
    """What is running inside one sandbox: processes, and threads of each (by name)."""

    processes: list[tuple[int, str, list[str]]]  # (pid, command name, thread names)

    def describe(self) -> str:
        return "; ".join(f"pid {pid} {name!r} with {len(threads)} thread(s) {sorted(threads)}"
                         for pid, name, threads in self.processes)


def _ticks(path: str, fields: slice) -> int:
    try:
        raw = Path(path).read_text()
    except OSError:
        return 0
    return sum(int(v) for v in raw.rsplit(")", 1)[1].split()[fields])


def _comm(path: str) -> str:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return "?"


def tree_shape(root: int) -> TreeShape:
    """Every live process under ``root`` with its threads' names (from /proc)."""
    procs = []
    for pid in tree_pids(root):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        procs.append((pid, _comm(f"/proc/{pid}/comm"), [_comm(f"/proc/{pid}/task/{t}/comm") for t in tids]))
    return TreeShape(procs)


def affinity_escapes(root: int, cpus: set[int]) -> list[str]:
    """Threads under ``root`` allowed to run beyond ``cpus`` (the pin they were started with)."""
    bad = []
    for pid in tree_pids(root):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                allowed = os.sched_getaffinity(int(tid))
            except OSError:
                continue
            if not allowed <= cpus:
                bad.append(f"thread {tid} of pid {pid} ({_comm(f'/proc/{pid}/task/{tid}/comm')}) "
                           f"may run on CPUs {sorted(allowed)}")
    return bad


def ended_work(root: int) -> tuple[float, float]:
    """CPU seconds of threads and of child processes that have already ended, under ``root``.

    A process's own utime+stime includes its ended threads, its live threads' ``task/*/stat``
    do not: the difference is what short-lived threads did. Its cutime+cstime is what reaped
    children did (bubblewrap's init in the sandbox reaps double-forked orphans: they count).
    """
    tick = os.sysconf("SC_CLK_TCK")
    threads = children = 0
    for pid in tree_pids(root):
        own = _ticks(f"/proc/{pid}/stat", slice(11, 13))
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        live = sum(_ticks(f"/proc/{pid}/task/{t}/stat", slice(11, 13)) for t in tids)
        threads += max(own - live, 0)
        children += _ticks(f"/proc/{pid}/stat", slice(13, 15))
    return threads / tick, children / tick


class Worker:
    """One sandboxed worker process running the kernel in ``kernel_dir``."""

    def __init__(self, label: str, kernel_dir: Path, inputs_dir: Path, cpu: int, dtype: str | None) -> None:
        self.label = label
        self.cpus = {cpu}
        self.scratch = Path(tempfile.mkdtemp(prefix="avo-mlx-worker-"))
        harness = self.scratch / "harness"
        harness.mkdir()
        shutil.copy(HARNESS, harness / "worker.py")
        self.cand = self.scratch / "kernel"
        shutil.copytree(kernel_dir, self.cand, ignore=shutil.ignore_patterns(".avo", ".git", "__pycache__"))
        home = self.scratch / "home"
        home.mkdir()
        self.out_path = self.scratch / "out.bin"
        self.log_path = self.scratch / "log.txt"
        box = Sandbox(writable=(self.scratch,), readable=(inputs_dir,), hide=tuple(installed_package_dirs()),
                      env={**WORKER_ENV, "HOME": str(home)}, cwd=self.cand)
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in close()
        self.proc = popen([interpreter(), "-I", str(harness / "worker.py")], box,
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
                          preexec_fn=lambda: os.sched_setaffinity(0, self.cpus))
        # Sampled, so a process the kernel reaps itself (SIGCHLD ignored) keeps the CPU it showed.
        self._meter = CpuMeter(self.proc.pid)
        self._buf = b""
        self._dtype = dtype
        self.device, self.dtype = "?", dtype or "?"
        self.out_map: Any = None
        self.idle_cpu = 0.0  # CPU its sandbox used between calls
        self.last_cpu = 0.0
        self.busy_wall = 0.0  # wall time of its timed calls

    def start(self) -> None:
        """Ask the worker to import MLX and the kernel (answered by :meth:`finish_start`)."""
        self._send({"op": "init", "dir": str(self.cand), "dtype": self._dtype}, "importing attention.py")

    def finish_start(self) -> None:
        reply, _ = self._receive(time.perf_counter(), START_TIMEOUT_S, "importing attention.py")
        self.device = str(reply.get("device", "?"))
        self.dtype = str(reply.get("dtype", self._dtype))

    def configure(self, msg: dict[str, Any]) -> None:
        """Map a config's inputs and a fresh output buffer of its shape."""
        import numpy as np

        b, hq, _, _, d = msg["shape"]
        self.out_map = None
        self.out_path.unlink(missing_ok=True)
        self.out_map = np.memmap(self.out_path, dtype=np.float32, mode="w+", shape=(b, hq, 1, d))
        self.request({**msg, "out": str(self.out_path)}, what="mapping the inputs")
        self.last_cpu = self.cpu_seconds()

    def request(self, msg: dict[str, Any], timeout: float = CALL_TIMEOUT_S,
                what: str = "") -> tuple[dict[str, Any], float]:
        """Send one request; ``(reply, wall seconds from send to reply)``. Errors raise."""
        t0 = time.perf_counter()
        self._send(msg, what)
        return self._receive(t0, timeout, what)

    def _send(self, msg: dict[str, Any], what: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise WorkerFailure(self._died(what)) from None

    def _receive(self, t0: float, timeout: float, what: str) -> tuple[dict[str, Any], float]:
        assert self.proc.stdout is not None
        out_fd = self.proc.stdout.fileno()
        deadline = t0 + timeout
        while b"\n" not in self._buf:
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([out_fd], [], [], left)[0]:
                self.kill()
                raise WorkerFailure(f"{self.label} timed out: no answer within {timeout:g} s while {what}")
            chunk = os.read(out_fd, 1 << 16)
            if not chunk:
                raise WorkerFailure(self._died(what))
            self._buf += chunk
        t1 = time.perf_counter()
        line, _, self._buf = self._buf.partition(b"\n")
        try:
            reply = json.loads(line)
        except ValueError:
            raise WorkerFailure(f"{self.label} sent a malformed reply while {what}: {line[:200]!r}") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            error = reply.get("error") if isinstance(reply, dict) else None
            if what == "importing attention.py" and error:
                raise WorkerFailure(str(error))
            raise WorkerFailure(f"{self.label} {error or 'failed'}")
        return reply, t1 - t0

    def _died(self, what: str) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.returncode
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        log = self.log_tail()
        return (f"{self.label} exited ({how}) while {what}: did it call exit() or crash?"
                + (f"\nlast output:\n{log}" if log else ""))

    def log_tail(self, n: int = 8) -> str:
        try:
            text = self.log_path.read_bytes()[-4000:].decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.strip().splitlines()[-n:])

    def cpu_seconds(self) -> float:
        """CPU of everything in this worker's sandbox so far (every thread and process).

        Sampled (:class:`avo.sandbox.CpuMeter`): a process that ends between two samples
        without being seen is missed; :meth:`tasks` counts those."""
        return self._meter.sample()

    def tasks(self) -> int | None:
        """Tasks (threads and processes) ever created in this worker's sandbox; ``None`` if unknown."""
        try:
            return tasks_created(self.proc.pid)
        except SandboxError as exc:
            raise WorkerFailure(f"{self.label}: {exc}") from None

    def shape(self) -> TreeShape:
        return tree_shape(self.proc.pid)

    def ended_work(self) -> tuple[float, float]:
        return ended_work(self.proc.pid)

    def affinity_escapes(self) -> list[str]:
        return affinity_escapes(self.proc.pid, self.cpus)

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, 9)
            except OSError:
                self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        self.kill()
        self.out_map = None
        self._log.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

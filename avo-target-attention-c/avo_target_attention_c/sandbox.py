"""The evaluator's side of the sandbox: the worker that runs the candidate, watched from outside.

The kernel is untrusted C: it may segfault, abort, loop forever, print, patch the Python
it is loaded into, start threads or processes, or leave files for the next evaluation. So
it only ever runs in a worker started inside avo's sandbox (:mod:`avo.sandbox`: bubblewrap
with a fresh ``/tmp``, ``$HOME`` and PID namespace, this package hidden), from a copy of
:mod:`avo_target_attention_c.worker` in a fresh scratch folder per evaluation. Inputs and
outputs travel through a memfd mapped by both sides; requests and replies are JSON lines
on a socket (never pickle: nothing the worker sends can run code here), except timed calls,
which a request loop in C of ours serves (:meth:`Worker.serve`, :data:`build.SERVE_SOURCE`).

Everything that judges lives here, outside the worker: the clock (the worker's CPU time read
from this process with ``clock_gettime`` on its process CPU clock, exact to the nanosecond
and counting every thread it ever had; or wall time with more than one thread per side),
the checks of out, and the audit of what the kernel started (threads, child processes, CPU
used after returning). What a request costs besides the kernel is timed in a second worker
that never loads candidate code (``candidate=False``, an empty kernel of ours), beside every
call (see ``evaluate._pairs``).
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from avo_target_attention_c.contention import cpu_ticks

START_TIMEOUT_S = 60.0
NOOP_ROUNDS = 31
GUARD = 64  # guard floats on either side of out
CANARY = -7777.0
MAX_REPLY = 1 << 16
# CPU the worker's other threads may show against its calling thread per call (1-thread
# mode), and CPU it may use between a reply and the next request: far above the few
# microseconds an honest worker shows, far below any useful amount of work.
OFF_THREAD_S = 0.0005
IDLE_S = 0.002
# A gap over IDLE_S is tolerated this many times per evaluation (the request after it is
# marked, and its timing pair left out): measured on a KVM guest, an honest 1-thread worker
# showed 4.1 ms of CPU in one gap while the host stole the vCPUs (steal time 57 s in 17 min),
# and the evaluation failed as if the kernel had kept running. A kernel that does work
# after returning does it after every call and still fails; done a few times, it only
# loses those pairs.
BUSY_GAPS_ALLOWED = 2
# With more threads per side (wall clock from the request), CPU the worker may show between
# the evaluator writing fresh inputs and its request for them (microseconds apart): more
# counts as a busy gap. With one thread the worker's CPU clock runs from the write.
AFTER_PUT_S = 0.0001
# With more threads, OpenMP's idle threads spin a little after each region (libgomp's
# GOMP_SPINCOUNT, ~0.1-1 ms) and a clock read while threads run on other CPUs lags by up
# to a tick, so only the total counts there: CPU between calls beyond this many seconds,
# or this fraction of the CPU of the calls themselves, whichever is more.
IDLE_TOTAL_S = 0.25
IDLE_TOTAL_FRACTION = 0.25
# CPU a worker shows between its reply and the check of the call's output over which the
# notes name the call (all of it is charged to the call either way: see Worker.settle).
LATE_NOTE_S = 0.00005
_CPUCLOCK_SCHED = 2  # Linux: clockid of a process's CPU clock is (~pid << 3) | 2
_PR_SET_CHILD_SUBREAPER = 36


class SandboxFailure(Exception):
    """The worker crashed, hung, refused a request or broke a rule; ``str(exc)`` is the agent's message."""


@dataclass(frozen=True)
class CallTime:
    """One request as seen from outside: the worker's CPU seconds, its calling thread's, wall seconds."""

    cpu: float
    main: float
    wall: float
    after_busy_gap: bool = False  # the worker used CPU since its last reply (IDLE_S) or its inputs (AFTER_PUT_S)

    def plus(self, cpu: float) -> CallTime:
        """This call with ``cpu`` more seconds of the worker's CPU charged to it."""
        return CallTime(self.cpu + cpu, self.main, self.wall, self.after_busy_gap)


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
        return {c: row[3] + row[4] for c, row in cpu_ticks().items() if len(row) > 4}  # idle + iowait

    before = idle()
    time.sleep(0.1)
    after = idle()
    ranked = sorted(allowed, key=lambda c: -(after.get(c, 0) - before.get(c, 0)))
    return sorted(ranked[:threads])


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _children(pid: int) -> set[int]:
    kids: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tasks:
        try:
            kids.update(int(c) for c in Path(f"/proc/{pid}/task/{tid}/children").read_text().split())
        except (OSError, ValueError):
            continue
    return kids


def _describe(pids: set[int]) -> str:
    names = []
    for pid in sorted(pids)[:4]:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            comm = "?"
        names.append(f"{comm!r}")
    return ", ".join(names) + (" ..." if len(pids) > 4 else "")


class Worker:
    """A running sandbox worker; use as a context manager so it is always reaped.

    ``scratch`` is this evaluation's fresh folder (the harness is copied there), ``readable``
    what the worker may read besides (the built kernel), ``max_floats`` the largest tensor.
    """

    def __init__(self, scratch: Path, threads: int, max_floats: int, readable: tuple[Path, ...] = (),
                 candidate: bool = True) -> None:
        import numpy as np
        from avo.sandbox import Sandbox, current_level, installed_package_dirs, interpreter, popen

        self.threads, self.max_floats, self.candidate = threads, max_floats, candidate
        self.level = current_level()
        harness, work = scratch / "harness", scratch / "work"
        harness.mkdir(parents=True)
        work.mkdir()
        shutil.copy(Path(__file__).with_name("worker.py"), harness / "worker.py")
        n_floats = 4 * max_floats + 2 * GUARD
        shm = os.memfd_create("avo-attention-c", 0)
        os.ftruncate(shm, n_floats * 4)
        self.mem = mmap.mmap(shm, n_floats * 4)
        self.flat = np.frombuffer(self.mem, dtype=np.float32)
        ours, theirs = socket.socketpair()
        self.sock = ours
        count = str(threads)
        box = Sandbox(readable=(harness, *readable), writable=(work,), hide=tuple(installed_package_dirs()),
                      env={"AVO_THREADS": count, "OMP_NUM_THREADS": count, "OPENBLAS_NUM_THREADS": count,
                           "MKL_NUM_THREADS": count}, cwd=work)
        if self.level == "none":
            # Without a PID namespace an orphaned (double-forked) process would leave our
            # sight: as a subreaper this process adopts it, so the audit still sees it.
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        try:
            self.proc = popen([interpreter(), "-I", str(harness / "worker.py"), str(theirs.fileno()), str(shm),
                               str(max_floats), str(GUARD), count], box,
                              pass_fds=(theirs.fileno(), shm), stdin=subprocess.DEVNULL, stdout=sys.stderr.fileno())
        finally:
            theirs.close()
            os.close(shm)
        self._buffer = b""
        self.serving = False  # the request loop in C has the socket (serve/unserve)
        self._last_cpu: int | None = None
        self._idle_total = 0.0  # CPU seconds the worker used between replies and requests
        self._calls_total = 0.0  # and during requests
        self.busy_gaps: list[float] = []  # CPU seconds of each gap over IDLE_S (or AFTER_PUT_S, more threads)
        self.late_work: list[float] = []  # CPU seconds charged to timed calls by settle(), over LATE_NOTE_S
        self._put: tuple[int, int] | None = None  # the worker's clocks when the last inputs were written
        self._started = False
        self._reply(START_TIMEOUT_S, "starting the sandbox worker")
        self._started = True
        self.pid, self.watch = self._find_worker(harness / "worker.py")
        # At level none the watched process is this evaluator, whose own children from before
        # the worker (a test's git readers, say) are not the kernel's.
        self._kids0 = _children(self.watch) - {self.pid, self.proc.pid}
        self._clock = ((~self.pid) << 3) | _CPUCLOCK_SCHED
        self._reaped0 = self._reaped()
        # Every task the sandbox creates from now on (a thread or a process, even one the
        # kernel reaps itself with SIGCHLD ignored, whose CPU lands in nobody's cutime).
        self._tasks0 = self._tasks() if threads == 1 and candidate else None
        # The no-op round trip, measured before any candidate code is in the worker, so a
        # kernel cannot inflate it (and with it what is subtracted from every call).
        noops = [self.request({"op": "noop"}, 10.0, "timing a no-op round trip") for _ in range(NOOP_ROUNDS)]
        self.noop = CallTime(statistics.median(t.cpu for t in noops), statistics.median(t.main for t in noops),
                             statistics.median(t.wall for t in noops))

    # -- life cycle --------------------------------------------------------------------------

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker (its sandbox ends every process in it) and reap it."""
        try:
            self.sock.close()
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self._kill()
        self.flat = None  # type: ignore[assignment]
        try:
            self.mem.close()
        except BufferError:  # a view of it is still alive somewhere; the mapping goes with the process
            pass

    def _kill(self) -> None:
        if self.proc.poll() is None:
            if self.level == "none":  # its own session: take anything it started along
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except OSError:
                    self.proc.kill()
            else:
                self.proc.kill()
        self.proc.wait()

    def _find_worker(self, script: Path) -> tuple[int, int]:
        """Our view of the worker's pid, and the process whose children must stay only the worker."""
        from avo.sandbox import tree_pids

        for pid in reversed(tree_pids(self.proc.pid)):
            try:
                if str(script) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    stat = _stat(pid)
                    parent = int(stat[1]) if stat else os.getpid()
                    return pid, (parent if self.level != "none" else os.getpid())
            except OSError:
                continue
        raise SandboxFailure("the sandbox worker started but cannot be found among its processes")

    # -- requests ------------------------------------------------------------------------------

    def cpu_ns(self) -> int:
        """The worker process's CPU time (every thread of it), read from outside, in ns."""
        try:
            return time.clock_gettime_ns(self._clock)
        except OSError:
            return self._last_cpu or 0  # gone; the reply says how

    def _main_ns(self) -> int:
        try:
            return int(Path(f"/proc/{self.pid}/task/{self.pid}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            return 0

    def _reply(self, timeout: float, what: str) -> dict[str, Any]:
        self._read_until(lambda buffer: b"\n" in buffer, timeout, what)
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            self._kill()
            raise SandboxFailure(f"the sandbox worker sent something that is not a reply while {what}")
        if "error" in reply:
            raise SandboxFailure(f"{reply['error']} (while {what})")
        return reply

    def _byte(self, expected: bytes, timeout: float, what: str) -> None:
        """The request loop's one-byte reply (:data:`build.SERVE_SOURCE`)."""
        self._read_until(bool, timeout, what)
        got, self._buffer = self._buffer[:1], self._buffer[1:]
        if got != expected or self._buffer:
            self._kill()
            raise SandboxFailure(f"the sandbox worker sent something that is not a reply while {what}")

    def _read_until(self, enough: Callable[[bytes], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not enough(self._buffer):
            left = deadline - time.monotonic()
            if left <= 0:
                self._kill()
                raise SandboxFailure(
                    f"timed out: no answer within {timeout:g} s while {what}; the sandbox worker was killed "
                    "(an infinite loop, a deadlock, or a kernel far too slow for this shape)")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(MAX_REPLY)
            except TimeoutError:
                continue
            except OSError:
                chunk = b""
            if not chunk:
                self._died(what)
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY:
                self._kill()
                raise SandboxFailure(f"the sandbox worker sent a reply of over {MAX_REPLY} bytes while {what}")

    def _died(self, what: str) -> None:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._kill()
            code = self.proc.returncode
        if self.level != "none" and 128 < code < 128 + 65:
            code = 128 - code  # bubblewrap's init exits with 128 + the signal that ended the worker
        how = _signal_text(code)
        if not self._started:
            raise SandboxFailure(f"the sandbox worker could not start ({how}); its output is in the evaluation log")
        if code < 0:
            raise SandboxFailure(f"the kernel crashed with {how} while {what}")
        raise SandboxFailure(f"the sandbox worker exited ({how}) while {what}: did the kernel call exit()?")

    def request(self, req: dict[str, Any], timeout: float, what: str) -> CallTime:
        """Send one JSON request, wait for its reply, and return what it cost as seen from here."""
        if self.serving:
            raise RuntimeError("the worker's request loop in C is serving: unserve() before a JSON request")
        return self._timed((json.dumps(req) + "\n").encode(), lambda: self._reply(timeout, what), what)

    def serve(self) -> None:
        """Hand the worker's socket to the request loop in C (loaded with the kernel): timed
        calls then go through :meth:`call`, until :meth:`unserve`."""
        try:
            self.sock.sendall(b'{"op": "serve"}\n')
        except OSError:
            self._died("starting the request loop")
        self._byte(b"S", 10.0, "starting the request loop")
        self.serving = True

    def unserve(self) -> None:
        """Back to JSON requests (the loop answers the stop with the serve request's reply)."""
        self.serving = False
        try:
            self.sock.sendall(struct.pack("<4i", 0, 0, 0, 0))
        except OSError:
            self._died("stopping the request loop")
        self._reply(10.0, "stopping the request loop")

    def call(self, heads: int, n: int, d: int, causal: bool, timeout: float, what: str) -> CallTime:
        """One call of the kernel through the request loop in C; what it cost as seen from here."""
        if not self.serving:
            raise RuntimeError("call() needs the request loop: serve() first")
        return self._timed(struct.pack("<4i", heads, n, d, 1 if causal else 0),
                           lambda: self._byte(b"k", timeout, what), what)

    def _timed(self, payload: bytes, wait: Callable[[], object], what: str) -> CallTime:
        """Send ``payload``, ``wait`` for its reply, and return what the request cost."""
        c0, m0, t0 = self.cpu_ns(), self._main_ns(), time.perf_counter_ns()
        since_put = 0.0
        if self._put is not None:
            since_put = (c0 - self._put[0]) * 1e-9
            if self.threads == 1:
                # The worker's clocks run from the moment its inputs were written: what it does
                # from there (a signal handler computing out early) is the call's.
                c0, m0 = self._put
        busy = False
        if self._last_cpu is not None and self.candidate:
            idle = (c0 - self._last_cpu) * 1e-9
            self._idle_total += idle
            over = idle > IDLE_S if self.threads == 1 else since_put > AFTER_PUT_S
            if over:
                self.busy_gaps.append(idle if self.threads == 1 else since_put)
                busy = True
                if len(self.busy_gaps) > BUSY_GAPS_ALLOWED:
                    self._kill()
                    shown = ", ".join(f"{g * 1e3:.1f}" for g in self.busy_gaps)
                    raise SandboxFailure(
                        f"the kernel kept running after it returned: {shown} ms of CPU between replies (or "
                        "between the next inputs being written and their call), "
                        f"{len(self.busy_gaps)} times, the last before {what} (work done after returning is off the "
                        f"clock, so it is not allowed; {BUSY_GAPS_ALLOWED} such gaps are tolerated per evaluation, "
                        "for a host that takes the CPU)")
            if self._idle_total > max(IDLE_TOTAL_S, IDLE_TOTAL_FRACTION * self._calls_total):
                self._kill()
                raise SandboxFailure(
                    f"the kernel kept running after it returned: {self._idle_total:.2f} s of CPU between replies "
                    f"against {self._calls_total:.2f} s during calls, before {what} (threads must be idle when "
                    "the call returns: work done after returning is off the clock)")
        self._put = None
        try:
            self.sock.sendall(payload)
        except OSError:
            self._died(what)
        wait()
        t1, c1, m1 = time.perf_counter_ns(), self.cpu_ns(), self._main_ns()
        self._last_cpu = c1
        self._calls_total += (c1 - c0) * 1e-9
        return CallTime((c1 - c0) * 1e-9, (m1 - m0) * 1e-9, (t1 - t0) * 1e-9, busy)

    def settle(self, cost: CallTime) -> CallTime:
        """``cost`` plus the CPU the worker used since it replied (1 thread; call it once the
        call's output has been checked, and before the next request).

        A worker that replied waits for its next request and uses no CPU; a kernel that returns
        early and lets a timer finish out before the evaluator reads it (the red team's round
        six: 1.19x an honest kernel, each gap under IDLE_S) has that work charged to its call.
        """
        if self.threads != 1 or self._last_cpu is None:
            return cost  # more threads: wall clock, and the idle totals bound what runs after it
        now = self.cpu_ns()
        late = max(0.0, (now - self._last_cpu) * 1e-9)
        self._last_cpu = now
        if self.candidate:
            self._calls_total += late
            if late > LATE_NOTE_S:
                self.late_work.append(late)
        return cost.plus(late)

    # -- shared memory ---------------------------------------------------------------------------

    def views(self, size: int) -> tuple[Any, Any, Any, Any]:
        """q, k, v and out (flat, ``size`` floats) as the kernel sees them."""
        m, f = self.max_floats, self.flat
        return f[0:size], f[m:m + size], f[2 * m:2 * m + size], f[3 * m + GUARD:3 * m + GUARD + size]

    def put(self, q: Any, k: Any, v: Any) -> None:
        """Write the inputs, fill out with NaN (poison) and the cells around it with the canary."""
        size = q.size
        if self.candidate:
            self._put = (self.cpu_ns(), self._main_ns())
        sq, sk, sv, _ = self.views(size)
        sq[:], sk[:], sv[:] = q.reshape(-1), k.reshape(-1), v.reshape(-1)
        m, f = self.max_floats, self.flat
        f[3 * m:3 * m + GUARD] = CANARY
        f[3 * m + GUARD:3 * m + GUARD + size] = float("nan")
        f[3 * m + GUARD + size:3 * m + 2 * GUARD + size] = CANARY

    def overrun(self, size: int) -> bool:
        """Whether the kernel wrote into the guard cells on either side of out."""
        m, f = self.max_floats, self.flat
        return bool((f[3 * m:3 * m + GUARD] != CANARY).any()
                    or (f[3 * m + GUARD + size:3 * m + 2 * GUARD + size] != CANARY).any())

    # -- the audit ---------------------------------------------------------------------------------

    def _reaped(self) -> float:
        """CPU seconds of processes that ran and ended inside the sandbox (tick resolution)."""
        ticks = 0
        stat = _stat(self.pid)
        if stat is not None:
            ticks += int(stat[13]) + int(stat[14])  # the worker's reaped children
        if self.level != "none":
            init = _stat(self.watch)  # the sandbox's init reaps orphans
            if init is not None:
                ticks += sum(int(v) for v in init[11:15])
        return ticks / os.sysconf("SC_CLK_TCK")

    def _tasks(self) -> int | None:
        from avo.sandbox import SandboxError, tasks_created

        try:
            return tasks_created(self.proc.pid)
        except SandboxError as exc:
            self._kill()
            raise SandboxFailure(f"{exc}: the kernel may not touch the evaluator's processes") from None

    def audit(self, what: str, cost: CallTime | None = None) -> None:
        """Fail naming what the kernel started: threads (1-thread mode), any process, off-thread CPU."""
        if not self.candidate:
            return
        stat = _stat(self.pid)
        if stat is None:
            return  # gone: the next request says how
        hint = (" (1-thread mode allows no other threads; AVO_ATTENTION_C_THREADS=2 measures a parallel kernel, "
                "both sides on 2 threads)")
        threads = int(stat[17])
        if self.threads == 1 and threads > 1:
            self._kill()
            raise SandboxFailure(f"the kernel started {threads - 1} thread(s) while {what}{hint}")
        if self.threads == 1 and cost is not None and cost.main > 0 and cost.cpu - cost.main > OFF_THREAD_S:
            self._kill()
            raise SandboxFailure(f"the kernel ran {(cost.cpu - cost.main) * 1e3:.1f} ms on a thread other than the "
                                 f"calling one while {what}, and that thread ended before the call returned{hint}")
        kids = _children(self.pid) | (_children(self.watch) - {self.pid} - self._kids0)
        if self.level == "none":
            kids -= {self.proc.pid}
        if kids:
            self._kill()
            raise SandboxFailure(f"the kernel started {len(kids)} child process(es) ({_describe(kids)}) while {what}; "
                                 "the kernel may not start processes")
        reaped = self._reaped() - self._reaped0
        if reaped > 0:
            self._kill()
            raise SandboxFailure(f"child processes of the kernel that already ended used {reaped:.2f} s of CPU "
                                 f"while {what}; the kernel may not start processes")
        if self._tasks0 is not None:
            created = (self._tasks() or self._tasks0) - self._tasks0
            if created > 0:
                self._kill()
                raise SandboxFailure(f"the kernel created {created} thread(s) or process(es) that ended before the "
                                     f"audit while {what}{hint}; the kernel may not start processes")

    def audit_tree(self, what: str) -> None:
        """The whole sandbox (``avo.sandbox.tree_threads``): only its launcher chain and the worker."""
        from avo.sandbox import tree_threads

        if not self.candidate:
            return
        tree = tree_threads(self.proc.pid)
        extra = {pid for pid in tree if pid not in (self.proc.pid, self.watch, self.pid)}
        if extra:
            self._kill()
            raise SandboxFailure(f"the kernel started {len(extra)} process(es) ({_describe(extra)}) while {what}; "
                                 "the kernel may not start processes")
        if self.threads == 1 and tree.get(self.pid, 1) > 1:
            self.audit(what)

"""Run an evaluator as a child process: own process group, timeout, limits, output caps.

The child never shares a process with the run state. Its stdout and stderr stream to a
log file; only the last stdout line (the contract) is parsed. Anything abnormal (a
timeout, a signal, a limit, a flood of output, garbage) becomes a failed evaluation whose
error says what happened.
"""

from __future__ import annotations

import os
import resource
import select
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from avo.contract import count_results, failed, last_json_object, parse_output
from avo.models import EvalResult, ResourceLimits
from avo.regular_files import open_own

OUTPUT_CAP = 8 * 1024 * 1024  # bytes per stream; past this the evaluator is killed
PIPE_GRACE_S = 5.0  # how long to drain pipes still held open after the evaluator's group is gone
_TAIL_LINES = 12
_TAIL_BYTES = 16 * 1024
RESULT_CAP = 1024 * 1024  # bytes on the result channel


@dataclass
class ChildOutcome:
    """What happened to the child: its parsed result plus how it ended.

    ``payload`` is the text the result was read from (the result channel, or stdout).
    """

    result: EvalResult
    payload: str
    wall_s: float
    returncode: int | None
    log_path: Path


def _limits_preexec(limits: ResourceLimits) -> Callable[[], None]:
    def apply() -> None:
        def setlimit(kind: int, value: int | None, slack: int = 0) -> None:
            if value is None:
                return
            _, hard = resource.getrlimit(kind)
            soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
            new_hard = hard if hard != resource.RLIM_INFINITY else soft + slack
            resource.setrlimit(kind, (soft, max(soft, new_hard)))

        setlimit(resource.RLIMIT_AS, limits.address_space_mb and limits.address_space_mb << 20)
        # A hard limit a few seconds above the soft one: SIGXCPU first, so we can name it.
        setlimit(resource.RLIMIT_CPU, limits.cpu_seconds, slack=5)
        setlimit(resource.RLIMIT_NPROC, limits.processes)
        setlimit(resource.RLIMIT_NOFILE, limits.open_files)
        setlimit(resource.RLIMIT_FSIZE, limits.file_size_mb and limits.file_size_mb << 20)

    return apply


class _Pump(threading.Thread):
    """Copy one stream into the log, keep it in memory if asked, stop at the cap.

    Bytes are counted as they arrive (not per line), so a flood without a newline trips
    the cap as early as any other.
    """

    def __init__(self, stream: IO[bytes], log: IO[bytes] | None, keep: bool,
                 on_overflow: Callable[[], None], cap: int = OUTPUT_CAP, progress: bool = False):
        super().__init__(daemon=True)
        self.stream, self.log, self.keep, self.on_overflow, self.cap = stream, log, keep, on_overflow, cap
        self.progress = progress  # pass `avo-progress: ...` lines on as they arrive (stderr)
        self._line = b""
        self.chunks: list[bytes] = []
        self.tail = b""
        self.total = 0
        self.overflow = False
        self.abandoned = False

    def run(self) -> None:
        try:
            self._copy()
        except (ValueError, OSError):  # the log or the stream was closed after we stopped waiting
            pass
        try:
            self.stream.close()
        except OSError:
            pass

    def _copy(self) -> None:
        fd = self.stream.fileno()
        while True:
            chunk = os.read(fd, 1 << 16)
            if not chunk or self.abandoned:
                return
            room = self.cap - self.total
            self.total += len(chunk)
            if room < len(chunk):
                chunk = chunk[:max(room, 0)]
                if not self.overflow:
                    self.overflow = True
                    if self.log is not None:
                        self.log.write(chunk + b"\n[avo] output cap reached; evaluator killed\n")
                    self.on_overflow()
                continue
            if self.log is not None:
                self.log.write(chunk)
            if self.keep:
                self.chunks.append(chunk)
            self.tail = (self.tail + chunk)[-_TAIL_BYTES:]
            if self.progress:
                self._pass_progress(chunk)

    def _pass_progress(self, chunk: bytes) -> None:
        from avo import progress

        *lines, self._line = (self._line + chunk).split(b"\n")
        self._line = self._line[-4096:]  # a progress line is short; keep no flood in memory
        for raw in lines:
            text = raw.decode("utf-8", "replace").strip()
            if text.startswith(progress.PREFIX):
                progress.emit(text[len(progress.PREFIX):][:300])

    def data(self) -> bytes:
        return b"".join(self.chunks)

    def text(self) -> str:
        return self.data().decode("utf-8", "replace")

    def tail_text(self) -> str:
        lines = self.tail.decode("utf-8", "replace").rstrip().splitlines()
        return "\n".join(lines[-_TAIL_LINES:])


@contextmanager
def _terminate_with(group: dict[str, int], pid_file: Path | None) -> Iterator[None]:
    """While the evaluator runs, a SIGTERM or SIGHUP to us takes its process group down too.

    Python dies of those signals without unwinding, which would leave the evaluator running
    with nobody to enforce its timeout. The handler kills the group, then lets the signal
    end this process as it would have. Signal handlers exist only on the main thread.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def handler(signum: int, frame: object) -> None:
        if "pgid" in group:  # set as soon as the evaluator exists
            _kill_group(group["pgid"])
        if pid_file is not None:
            pid_file.unlink(missing_ok=True)
        signal.signal(signum, previous.get(signum, signal.SIG_DFL))
        os.kill(os.getpid(), signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        current = signal.getsignal(sig)
        if current in (signal.SIG_DFL, None):  # someone else's handler stays in charge
            previous[sig] = current if current is not None else signal.SIG_DFL
            signal.signal(sig, handler)
    try:
        yield
    finally:
        for signum, old_handler in previous.items():
            signal.signal(signum, old_handler)


def process_start_time(pid: int) -> str | None:
    """When ``pid`` started, in clock ticks since boot (Linux ``/proc``; ``None`` elsewhere or gone).

    Stored next to an evaluator's pid so a later command that finds the pid file can tell
    the evaluator from an unrelated process that was given the same number since.
    """
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _limit_hint(returncode: int | None, stderr_tail: str, limits: ResourceLimits) -> str | None:
    if returncode is not None and returncode < 0 and -returncode == signal.SIGXCPU:
        return f"hit the CPU-time limit ({limits.cpu_seconds} s of CPU, RLIMIT_CPU)"
    if "MemoryError" in stderr_tail or "bad_alloc" in stderr_tail or "Cannot allocate memory" in stderr_tail:
        return f"hit the address-space limit ({limits.address_space_mb} MiB, RLIMIT_AS)"
    if "File too large" in stderr_tail or (returncode is not None and -returncode == signal.SIGXFSZ):
        return f"hit the file-size limit ({limits.file_size_mb} MiB per file, RLIMIT_FSIZE)"
    if "Too many open files" in stderr_tail:
        return f"hit the open-files limit ({limits.open_files}, RLIMIT_NOFILE)"
    if "Resource temporarily unavailable" in stderr_tail and ("fork" in stderr_tail or "spawn" in stderr_tail):
        return f"hit the process-count limit ({limits.processes}, RLIMIT_NPROC)"
    return None


def _describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"evaluator was killed by {name}"
    return f"evaluator exited with status {returncode}"


def _wait_exit(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """``proc.wait(timeout)``, woken the moment the child exits.

    Popen.wait with a timeout polls with sleeps of up to 50 ms, which every evaluation would
    pay in latency; a pidfd (Linux 5.3+) is readable exactly when the process ends.
    """
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here: the polling wait
        proc.wait(timeout=timeout)
        return
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(proc.args, timeout)
            poller.poll(min(left, 1.0) * 1000)
    finally:
        os.close(fd)


def run_child(
    command: Sequence[str],
    *,
    cwd: Path,
    timeout: float,
    limits: ResourceLimits,
    log_path: Path,
    env: dict[str, str] | None = None,
    pid_file: Path | None = None,
    result_channel: bool = False,
) -> ChildOutcome:
    """Run ``command``, parse its contract, and turn every abnormal end into a failure.

    With ``result_channel`` the child gets the write end of a private pipe as
    ``--result-fd N`` (appended to ``command``) and must send its one result object there;
    its stdout is then only a log. Otherwise the result is the last line of stdout.
    Either way, more than one result object is a failed evaluation. ``log_path`` is a file in
    a folder of avo's own (a run's ``logs/``, reached without following a link).
    """
    started = time.monotonic()
    group: dict[str, int] = {}
    command = list(command)
    result_r = result_w = -1
    if result_channel:
        result_r, result_w = os.pipe()
        command += ["--result-fd", str(result_w)]
    # The guard is up before the child exists, so no signal can slip in between.
    with os.fdopen(open_own(log_path, append=True, own=1), "ab", buffering=0) as log, _terminate_with(group, pid_file):
        log.write(f"[avo] $ {' '.join(command)}\n[avo] cwd {cwd}\n".encode())
        try:
            proc = subprocess.Popen(
                command,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                preexec_fn=_limits_preexec(limits),
                pass_fds=(result_w,) if result_channel else (),
            )
        except OSError as exc:
            log.write(f"[avo] could not start: {exc}\n".encode())
            for fd in (result_r, result_w):
                if fd >= 0:
                    os.close(fd)
            return ChildOutcome(
                failed(f"could not start the evaluator {command[0]!r}: {exc.strerror or exc}"),
                "", 0.0, None, log_path,
            )
        pgid = group["pgid"] = proc.pid
        assert proc.stdout is not None and proc.stderr is not None
        out = _Pump(proc.stdout, log, keep=not result_channel, on_overflow=lambda: _kill_group(pgid))
        err = _Pump(proc.stderr, log, keep=False, on_overflow=lambda: _kill_group(pgid), progress=True)
        channel: _Pump | None = None
        if result_channel:
            os.close(result_w)  # only the child holds the write end now
            channel = _Pump(os.fdopen(result_r, "rb", buffering=0), None, keep=True,
                            on_overflow=lambda: _kill_group(pgid), cap=RESULT_CAP)
        pumps = [p for p in (out, err, channel) if p is not None]
        timed_out = False
        try:
            if pid_file is not None:  # lets the next command kill us if our parent is killed
                pid_file.write_text(f"{pgid} {process_start_time(pgid) or ''}".strip())
            for pump in pumps:
                pump.start()
            _wait_exit(proc, timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        except BaseException:  # Ctrl-C: never leave an evaluator running behind us
            _kill_group(pgid)
            proc.wait()
            if pid_file is not None:
                pid_file.unlink(missing_ok=True)
            raise
        # Kill the whole group: grandchildren left behind would hold the pipes open.
        _kill_group(pgid)
        proc.wait()
        if pid_file is not None:
            pid_file.unlink(missing_ok=True)
        # A process that left the group (setsid, a daemonising build server) may still hold
        # the pipes: read what is already there, then stop waiting for it.
        wall = time.monotonic() - started
        deadline = time.monotonic() + PIPE_GRACE_S
        for pump in (out, err):
            pump.join(max(0.0, deadline - time.monotonic()))
        if out.is_alive() or err.is_alive():
            out.abandoned = err.abandoned = True
            log.write(b"\n[avo] a process outside the evaluator's group still holds its output; "
                      b"stopped reading\n")
        leaked = False
        if channel is not None:
            # Only the evaluator held the write end: once it is gone the channel is at EOF.
            # A channel still open means another process holds it, to write after the end.
            channel.join(max(0.5, deadline - time.monotonic()))
            if channel.is_alive():
                leaked = channel.abandoned = True
        stderr_tail = err.tail_text()
        log.write(f"\n[avo] exit {proc.returncode} after {wall:.2f}s\n".encode())

    stdout = out.text()
    payload = channel.text() if channel is not None else stdout
    if channel is not None and payload.strip():
        with os.fdopen(open_own(log_path, append=True, own=1), "a", encoding="utf-8") as fh:
            fh.write(f"[avo] result channel: {payload.strip()[:2000]}\n")
    if leaked:
        result = failed("a process other than the evaluator still holds its result channel after it ended; "
                        "the result is not trusted")
    elif timed_out:
        result = failed(
            f"evaluator timed out after {timeout:g} s (the target's timeout); "
            "its whole process group was killed"
        )
    elif out.overflow or err.overflow or (channel is not None and channel.overflow):
        which = "stdout" if out.overflow else "stderr" if err.overflow else "its result channel"
        cap = RESULT_CAP if which == "its result channel" else OUTPUT_CAP
        result = failed(f"evaluator wrote more than {cap >> 20} MiB on {which} (output cap); killed")
    else:
        many = count_results(payload)
        data, _ = last_json_object(payload)
        if many > 1:
            where = "its result channel" if channel is not None else "stdout"
            result = failed(f"evaluator sent {many} result objects on {where}; exactly one is allowed "
                            "(a second one is what a forged result looks like)")
        elif channel is not None and not payload.strip():
            result = failed(f"{_describe_exit(proc.returncode)} without sending a result on its result channel"
                            + (f"\n--- last lines of its stderr ---\n{stderr_tail}" if stderr_tail else ""))
        else:
            result = parse_output(payload)
        # A non-zero exit is a crash unless the evaluator itself reported a closed gate.
        if many <= 1 and proc.returncode != 0 and not (data is not None and data.get("correct") is False):
            why = _describe_exit(proc.returncode)
            hint = _limit_hint(proc.returncode, stderr_tail, limits)
            detail = f": {hint}" if hint else ""
            tail = f"\n--- last lines of its stderr ---\n{stderr_tail}" if stderr_tail else ""
            result = failed(f"{why}{detail}{tail}")
    return ChildOutcome(result, payload, wall, proc.returncode, log_path)

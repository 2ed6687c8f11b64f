"""The built-in ``local`` executor: each evaluation in a child process on this machine.

This is avo's default and today's path: the run's private evaluator copy, the sandbox, the
limits, the timeout and the output caps of :func:`avo.runner.run_child`, one job at a time
(a second timed evaluation on the same machine would disturb the first).
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

from avo.hookspecs import hookimpl
from avo.models import EvalJob, ExecutorCheck, ExecutorInfo, JobResult, TargetSpec

NAME = "local"
_running: dict[str, Path] = {}  # job id -> the pid file of its evaluator child
_lock = threading.Lock()


@hookimpl
def avo_executors() -> list[ExecutorInfo]:
    return [ExecutorInfo(name=NAME, description="a child process on this machine (the default)")]


@hookimpl
def avo_execute(executor: str, job: EvalJob, options: dict[str, str]) -> JobResult | None:
    if executor != NAME:
        return None
    from avo.executors import read_tail, temporary_private

    if job.workspace is None or job.log_path is None:  # outside a run (verify): a throwaway copy
        with temporary_private() as tmp:
            private = Path(tmp)
            res = _run(job, private, private / "job.log", private / "child.pid")
            return res.model_copy(update={"log": read_tail(private / "job.log")})
    return _run(job, job.workspace, job.log_path, job.workspace / "child.pid")


def _run(job: EvalJob, private: Path, log_path: Path, pid_file: Path) -> JobResult:
    from avo.executors import run_job

    with _lock:
        _running[job.id] = pid_file
    try:
        return run_job(job, private, log_path, pid_file=pid_file, executor=NAME)
    finally:
        with _lock:
            _running.pop(job.id, None)


@hookimpl
def avo_cancel(executor: str, job_id: str) -> bool | None:
    if executor != NAME:
        return None
    with _lock:
        pid_file = _running.get(job_id)
    if pid_file is None or not pid_file.exists():
        return False
    try:
        os.killpg(int(pid_file.read_text().split()[0]), signal.SIGKILL)
    except (ValueError, OSError):
        return False
    return True


@hookimpl
def avo_executor_check(executor: str, target: TargetSpec | None, options: dict[str, str]) -> ExecutorCheck | None:
    if executor != NAME:
        return None
    return ExecutorCheck(ok=True, lines=["evaluations run here, one at a time"], capacity=1)

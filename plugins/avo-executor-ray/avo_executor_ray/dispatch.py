"""The driver side: put the candidate in the object store, start the task, wait with a deadline.

A task that is not done ``timeout + grace`` seconds after it was submitted is cancelled
with ``ray.cancel(force=True)``; a lost node, a dead worker or a cancelled task is a failed
evaluation with a clear error. After such an end, a small cleanup task on every alive node
kills what the evaluation left behind (its evaluator child, a worker that did not die).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any

from avo.contract import failed
from avo.errors import AvoError
from avo.models import EvalJob, JobResult
from avo_executor_ray.cluster import connect, task_options

NAME = "ray"
GRACE_S = 60.0  # beyond the in-task timeout: worker start, unpacking, the evaluator copy
CANCEL_WAIT_S = 10.0  # how long a cancelled task may take to report that it ended
ARCHIVES_KEPT = 16  # candidate archives kept in the object store (confirm runs reuse two)

_lock = threading.Lock()
_archives: OrderedDict[str, Any] = OrderedDict()  # sha256 -> ObjectRef of the tar bytes
_inflight: dict[str, Any] = {}  # job id -> ObjectRef of its result
_cancelled: set[str] = set()
_remotes: dict[str, Any] = {}  # the remote functions, made once per process


def _archive_ref(ray: Any, job: EvalJob) -> Any:
    """The object-store copy of the candidate's archive, put once per tree."""
    if job.archive is None or job.archive_sha256 is None:
        return None
    with _lock:
        ref = _archives.get(job.archive_sha256)
        if ref is not None:
            _archives.move_to_end(job.archive_sha256)
            return ref
        ref = _archives[job.archive_sha256] = ray.put(job.archive)
        while len(_archives) > ARCHIVES_KEPT:
            _archives.popitem(last=False)
        return ref


def _why(exc: BaseException) -> str:
    """A user's sentence for each way a Ray task can end without a result."""
    from ray import exceptions as rx

    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, rx.TaskCancelledError):
        return "the evaluation task was cancelled"
    if isinstance(exc, rx.NodeDiedError):
        return f"the Ray node running the evaluation was lost ({text})"
    if isinstance(exc, rx.WorkerCrashedError):
        return "the Ray worker running the evaluation died (killed, or out of memory) before it answered"
    if isinstance(exc, rx.OutOfMemoryError):
        return f"Ray killed the evaluation for memory ({text})"
    if isinstance(exc, (rx.ObjectLostError, rx.OwnerDiedError)):
        return f"the evaluation's result was lost with its node ({text})"
    if isinstance(exc, rx.RayTaskError):
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        return f"the evaluation task raised {type(cause).__name__}: {str(cause).strip()[:500]}"
    return f"Ray failed the evaluation: {type(exc).__name__}: {text}"


def run(job: EvalJob, options: dict[str, str]) -> JobResult:
    """Run ``job`` as one Ray task and wait for it, never longer than its deadline."""
    try:
        ray = connect(options)
    except AvoError as exc:
        return JobResult(result=failed(str(exc)), executor=NAME)
    from avo_executor_ray.worker import evaluate, reap

    grace = float(options.get("grace") or GRACE_S)
    spec = job.target
    payload = job.model_copy(update={"archive": None, "workspace": None, "log_path": None}).model_dump_json()
    remote = _remote(ray, "evaluate", evaluate).options(name="avo_eval", **task_options(spec.resources))
    ref = remote.remote(payload, _archive_ref(ray, job))
    with _lock:
        _inflight[job.id] = ref
    deadline = time.monotonic() + job.timeout + grace
    error: str | None = None
    try:
        while True:
            ready, _ = ray.wait([ref], timeout=max(0.05, min(1.0, deadline - time.monotonic())))
            if ready:
                break
            if job.id in _cancelled:
                error = "the evaluation was cancelled by avo"
                break
            if time.monotonic() >= deadline:
                error = (f"the evaluation did not answer within {job.timeout:g} s + {grace:g} s of grace "
                         "(a hung or lost worker); it was cancelled")
                break
        if error is None:
            out = ray.get(ref)
    except KeyboardInterrupt:
        ray.cancel(ref, force=True)
        raise
    except Exception as exc:
        if not isinstance(exc, ray.exceptions.RayError):
            raise
        error = _why(exc)
    finally:
        with _lock:
            _inflight.pop(job.id, None)
            _cancelled.discard(job.id)
    if error is not None:
        _stop(ray, ref, job.id, reap)
        return JobResult(result=failed(error), executor=NAME, log=f"[avo] {error}\n")
    res = JobResult.model_validate_json(out)
    return res


def _remote(ray: Any, key: str, fn: Any) -> Any:
    """``fn`` as a Ray remote function: run once, never retried, in a fresh worker each time."""
    with _lock:
        if key not in _remotes:
            _remotes[key] = ray.remote(max_retries=0, retry_exceptions=False, max_calls=1)(fn)
        return _remotes[key]


def _stop(ray: Any, ref: Any, job_id: str, reap: Any) -> None:
    """Cancel the task if it still runs, then clean up what it left on every node."""
    try:
        ray.cancel(ref, force=True)
        ray.wait([ref], timeout=CANCEL_WAIT_S)
    except Exception:  # a task that already ended cannot be cancelled: nothing to stop
        pass
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    refs = []
    for node in ray.nodes():
        if node.get("Alive"):
            strategy = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
            refs.append(_remote(ray, "reap", reap).options(name="avo_reap", num_cpus=0,
                                                           scheduling_strategy=strategy).remote(job_id))
    try:
        ray.wait(refs, num_returns=len(refs), timeout=CANCEL_WAIT_S)
    except Exception:
        pass


def cancel(job_id: str) -> bool:
    """Mark ``job_id`` cancelled: its waiting :func:`run` cancels the task and returns."""
    with _lock:
        if job_id not in _inflight:
            return False
        _cancelled.add(job_id)
    return True

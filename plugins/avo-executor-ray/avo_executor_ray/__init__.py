"""avo executor ``ray``: each evaluation is a Ray task on a cluster.

``avo evolve --executor ray [--executor-option address=ray://head:10001]``. The task holds
the resources of the target's ``resources`` (cpus, gpus, memory, accelerator type), runs once
(``max_retries=0``) in a fresh worker (``max_calls=1``), and evaluates exactly as the local
executor does, with the evaluator installed on the worker's node, which must hash to what
the run recorded. See docs/SCALING.md.
"""

from __future__ import annotations

from avo.hookspecs import hookimpl
from avo.models import EvalJob, ExecutorCheck, ExecutorInfo, JobResult, TargetSpec

NAME = "ray"


@hookimpl
def avo_executors() -> list[ExecutorInfo]:
    return [ExecutorInfo(name=NAME, remote=True,
                         description="each evaluation a Ray task on a cluster (address=... or $RAY_ADDRESS)")]


@hookimpl
def avo_execute(executor: str, job: EvalJob, options: dict[str, str]) -> JobResult | None:
    if executor != NAME:
        return None
    from avo_executor_ray.dispatch import run

    return run(job, options)


@hookimpl
def avo_cancel(executor: str, job_id: str) -> bool | None:
    if executor != NAME:
        return None
    from avo_executor_ray.dispatch import cancel

    return cancel(job_id)


@hookimpl
def avo_executor_check(executor: str, target: TargetSpec | None, options: dict[str, str]) -> ExecutorCheck | None:
    if executor != NAME:
        return None
    from avo_executor_ray.cluster import check

    return check(target, options)

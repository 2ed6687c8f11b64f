"""The worker side: one evaluation inside a Ray task, exactly as the local executor runs it.

The candidate archive is unpacked into a private folder, the evaluator copy is made from
the target installed on this node and checked against the run's recorded hashes (a
difference refuses the job, naming the files), and :func:`avo.executors.run_job` runs the
same child runner, sandbox, limits and timeout as on the driver's machine.

Each running job leaves two small files in a per-node folder: who runs it (the Ray worker,
and the job's private folder) and its evaluator child's process group. If the worker dies
(killed, force-cancelled), the next task on the node, or the driver's cleanup task, kills
the orphaned evaluator and removes the folder.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

NAME = "ray"


def jobs_dir() -> Path:
    """Where this node keeps the owner and pid files of running jobs."""
    return Path(tempfile.gettempdir()) / f"avo-ray-jobs-{os.getuid()}"


def _alive(pid: int, started: str) -> bool:
    from avo.runner import process_start_time

    now = process_start_time(pid)
    return now is not None and (not started or now == started)


def _read(path: Path) -> tuple[int, str] | None:
    try:
        pid, _, started = path.read_text().strip().splitlines()[0].partition(" ")
        return int(pid), started
    except (OSError, ValueError, IndexError):
        return None


def _forget(owner: Path) -> None:
    """Remove a dead job's owner file and the private folder it names (second line)."""
    try:
        lines = owner.read_text().splitlines()
    except OSError:
        lines = []
    if len(lines) > 1 and Path(lines[1]).name.startswith("avo-ray-"):
        shutil.rmtree(lines[1], ignore_errors=True)
    owner.unlink(missing_ok=True)


def _kill_evaluator(job_id: str) -> None:
    """Kill the evaluator process group of ``job_id`` (if it is still the same process)."""
    pid_file = jobs_dir() / f"{job_id}.pid"
    entry = _read(pid_file)
    if entry is not None and _alive(*entry):
        try:
            os.killpg(entry[0], signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    pid_file.unlink(missing_ok=True)


def reap_orphans() -> list[str]:
    """Kill the evaluators of jobs whose Ray worker is gone; return their ids."""
    folder = jobs_dir()
    done = []
    for owner in sorted(folder.glob("*.owner")) if folder.is_dir() else []:
        entry = _read(owner)
        if entry is not None and _alive(*entry):
            continue
        _kill_evaluator(owner.stem)
        _forget(owner)
        done.append(owner.stem)
    return done


def reap(job_id: str) -> list[str]:
    """The driver's cleanup after a job ended without a result: stop its worker and evaluator."""
    owner = jobs_dir() / f"{job_id}.owner"
    entry = _read(owner)
    if entry is not None and entry[0] != os.getpid() and _alive(*entry):
        try:
            os.kill(entry[0], signal.SIGKILL)  # a hung (stopped, stuck) worker that did not die on cancel
        except (ProcessLookupError, PermissionError):
            pass
    _kill_evaluator(job_id)
    _forget(owner)
    return reap_orphans()


def _where(ray: Any, job: Any) -> tuple[str, str | None]:
    """``(node, accelerator)`` of this task, as the lineage shows them."""
    ctx = ray.get_runtime_context()
    node_id = ctx.get_node_id()
    node = f"{ray.util.get_node_ip_address()}/{node_id[:8]}"
    gpus = [str(g) for g in (ctx.get_accelerator_ids().get("GPU") or [])]
    kind = job.target.resources.accelerator
    if kind is None:
        for info in ray.nodes():
            if info.get("NodeID") == node_id:
                kinds = [k.split(":", 1)[1] for k in info.get("Resources", {}) if k.startswith("accelerator_type:")]
                kind = kinds[0] if kinds else None
    if gpus:
        return node, f"{kind or 'GPU'} {','.join(gpus)}"
    return node, kind


def evaluate(payload: str, archive: bytes | None) -> str:
    """The Ray task: run the job in ``payload`` (an EvalJob as JSON) here; a JobResult as JSON."""
    import ray

    from avo.executors import read_tail, run_job
    from avo.models import EvalJob
    from avo.runner import process_start_time

    job = EvalJob.model_validate_json(payload).model_copy(update={"archive": archive})
    node, accelerator = _where(ray, job)
    reap_orphans()
    folder = jobs_dir()
    folder.mkdir(mode=0o700, exist_ok=True)
    owner, pid_file = folder / f"{job.id}.owner", folder / f"{job.id}.pid"
    try:
        with tempfile.TemporaryDirectory(prefix="avo-ray-") as tmp:
            # Who runs the job, and its folder: the cleanup's only clue if this worker dies.
            owner.write_text(f"{os.getpid()} {process_start_time(os.getpid()) or ''}\n{tmp}\n")
            log = Path(tmp) / "job.log"
            res = run_job(job, Path(tmp), log, pid_file=pid_file, executor=NAME, node=node, accelerator=accelerator)
            return res.model_copy(update={"log": read_tail(log)}).model_dump_json()
    finally:
        owner.unlink(missing_ok=True)
        pid_file.unlink(missing_ok=True)

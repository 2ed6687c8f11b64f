"""Executors: where an evaluation job runs. The core's ``local`` one is the default.

The engine turns each evaluation into an :class:`avo.models.EvalJob` (the candidate as a
content-addressed tar, the run's recorded evaluator hashes, the secret) and hands it to the
run's executor through the ``avo_execute`` hook. Every executor runs a job with
:func:`run_job`, here or on a worker, so a result is the same object whichever produced it.
"""

from __future__ import annotations

import hashlib
import io
import os
import secrets
import shutil
import socket
import tarfile
import tempfile
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

from avo.contract import failed
from avo.errors import AvoError
from avo.integrity import Identity
from avo.models import EvalJob, ExecutorCheck, ExecutorInfo, JobResult, TargetSpec

DEFAULT = "local"
ENV = "AVO_EXECUTOR"
LOG_TAIL = 1 << 20  # bytes of a remote evaluator's log sent back with its result


# -- the candidate archive -------------------------------------------------------------------


def pack(folder: Path) -> tuple[bytes, str]:
    """``(tar bytes, sha256)`` of an exported snapshot: regular files and folders only."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(folder.rglob("*")):
            rel = path.relative_to(folder).as_posix()
            if path.is_symlink() or not (path.is_file() or path.is_dir()):
                continue
            info = tar.gettarinfo(str(path), arcname=rel)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0  # the same tree packs to the same bytes, so its address is stable
            if path.is_file():
                with open(path, "rb") as fh:
                    tar.addfile(info, fh)
            else:
                tar.addfile(info)
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def unpack(data: bytes, sha256: str | None, dest: Path) -> None:
    """Unpack a candidate archive into the empty folder ``dest`` after checking its address."""
    if sha256 is None or hashlib.sha256(data).hexdigest() != sha256:
        raise AvoError("the candidate archive does not match its sha256: it was corrupted on the way")
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        for member in tar.getmembers():
            if not (member.isfile() or member.isdir()):
                raise AvoError(f"the candidate archive holds {member.name!r}, which is not a file or a folder")
        tar.extractall(dest, filter="data")


# -- running a job (here, or inside a worker) ------------------------------------------------


def _prepare_runtime(job: EvalJob, private: Path, label: str) -> tuple[Any, dict[str, Identity]]:
    """The evaluator copy for ``job`` from the target installed HERE, checked against the run,
    and the identity of each file the check read (compared again after the evaluation).

    Only the recorded files are copied (a file added since does not run); a recorded file
    that is modified or missing here refuses the job, naming it.
    """
    from avo import evaluator_copy
    from avo.evaluation import Runtime
    from avo.integrity import compare, hash_tree

    spec = job.target
    root, exclude, module = evaluator_copy.evaluator_source(spec)
    here = hash_tree(root, exclude)
    installed = {k: here[k] for k in job.evaluator_hashes if k in here}
    compare("evaluator", job.evaluator_hashes, installed, root)
    package = evaluator_copy.copy_folder(root, module)
    copy = evaluator_copy.prepare(private, root, job.evaluator_hashes, module=package)
    seen = evaluator_copy.check(copy, package, job.evaluator_hashes, job.runtime_hashes)
    from avo.plugins import plugin_distribution

    return Runtime(copy, package, module, spec.provider if module else None, job.sandbox,
                   private / "eval" / f"{label}-scratch", job.secret,
                   plugin_distribution(spec.provider or "") if module else None,
                   evaluator_copy.manifest(package, job.evaluator_hashes, job.runtime_hashes)), seen


def run_job(job: EvalJob, private: Path, log_path: Path, *, pid_file: Path | None = None,
            executor: str = DEFAULT, node: str | None = None, accelerator: str | None = None) -> JobResult:
    """Run ``job`` on this machine with the evaluator installed here; never raises for the job.

    ``private`` holds the evaluator copy (kept, content-addressed) and the job's scratch and
    candidate folders (removed after). The log goes to ``log_path``.
    """
    from avo import evaluator_copy
    from avo.evaluation import evaluate_dir, measure_baselines
    from avo.host_cpu import cpu_class
    from avo.regular_files import write_json_atomic
    from avo.sandbox import probe

    where = {"executor": executor, "node": node or socket.gethostname(), "accelerator": accelerator,
             "cpu": cpu_class()}
    # A role-free name: the candidate sees its own path, and a label (`confirm0-best`) let a
    # committed version tell it was being re-measured as the incumbent, and score low on purpose.
    label = secrets.token_hex(8)
    snap = private / "eval" / label
    sandbox_works, why_not = probe() if job.sandbox == "bwrap" else (True, "")
    if not sandbox_works:  # this machine's fault, not the candidate's: nothing is measured or counted
        return JobResult(refused=f"the evaluation could not run on {where['node']}: this run evaluates in a "
                         f"bubblewrap sandbox but {why_not}; nothing was measured or counted", **where)
    try:
        rt, seen = _prepare_runtime(job, private, label)
    except (AvoError, OSError) as exc:
        write_json_atomic(log_path, f"[avo] the job was refused on {where['node']}: {exc}\n", sync="none", own=1)
        return JobResult(refused=f"refused on {where['node']}: {exc}", **where)
    try:
        if job.baselines:
            measured = measure_baselines(job.target, log_path, rt, quick=job.quick)
            table = {k: v.result for k, v in measured.items()}
            wall = max((v.wall_s for v in measured.values()), default=0.0)
            res = JobResult(baselines=table, wall_s=wall, **where)
        else:
            if job.archive is None:
                raise AvoError("the job carries no candidate archive")
            unpack(job.archive, job.archive_sha256, snap)
            ev = evaluate_dir(job.target, snap, log_path, rt, quick=job.quick,
                              configs=set(job.configs) if job.configs is not None else None, pid_file=pid_file)
            res = JobResult(result=ev.result, wall_s=ev.wall_s, **where)
    except (AvoError, OSError) as exc:
        return JobResult(result=failed(f"the evaluation could not run on {where['node']}: {exc}"), **where)
    finally:
        shutil.rmtree(snap, ignore_errors=True)
        shutil.rmtree(rt.scratch, ignore_errors=True)
    try:
        swapped = evaluator_copy.rewritten(
            seen, evaluator_copy.check(rt.copy_root, rt.package, job.evaluator_hashes, job.runtime_hashes))
    except AvoError as exc:
        return res.model_copy(update={"result": failed(f"the evaluator changed while it ran, so its result "
                                                       f"is void: {exc}"), "baselines": None})
    if swapped:
        return res.model_copy(update={"result": failed(
            f"the evaluator changed while it ran, so its result is void: {', '.join(swapped[:5])} under "
            f"{rt.copy_root} (or the interpreter's start-up files) were rewritten or replaced after they were "
            "checked; their content is the recorded one again, but what ran is unknown"), "baselines": None})
    return res


def read_tail(path: Path, limit: int = LOG_TAIL) -> str:
    """The last ``limit`` bytes of a log, as text."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - limit))
            return fh.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def new_job_id() -> str:
    """A fresh job id."""
    return uuid.uuid4().hex


def make_job(target: TargetSpec, label: str, *, snapshot: Path | None, **fields: Any) -> EvalJob:
    """An :class:`EvalJob` for the candidate exported at ``snapshot`` (``None`` for baselines)."""
    archive, sha = pack(snapshot) if snapshot is not None else (None, None)
    timeout = target.baseline_timeout if fields.get("baselines") else target.eval_timeout
    return EvalJob(id=new_job_id(), label=label, target=target, archive=archive, archive_sha256=sha,
                   timeout=timeout, **fields)


# -- finding an executor and calling only the plugin that announced it -----------------------


def all_executors(*, core_only: bool = False) -> list[ExecutorInfo]:
    """Every executor announced by every plugin (``core_only``: by the core's, the only ones
    loaded then), each stamped with its provider; the core's first."""
    from avo.plugins import get_plugin_manager, implementations, is_core_plugin, plugin_manager_with

    pm = plugin_manager_with(set()) if core_only else get_plugin_manager()
    infos: list[ExecutorInfo] = []
    for provider, impl in implementations("avo_executors", pm):
        if core_only and not is_core_plugin(provider):
            continue
        for info in cast("list[ExecutorInfo]", impl.function() or []):
            infos.append(info.model_copy(update={"provider": provider}))
    return infos


def find_executor(name: str) -> ExecutorInfo:
    """An executor by name, with a clear error listing the installed ones. A name the core
    announces (``local``) is the core's, found without importing any other plugin; a name two
    plugins announce is the first's, in the entry points' order."""
    for info in all_executors(core_only=True):
        if info.name == name:
            return info
    infos = all_executors()
    for info in infos:
        if info.name == name:
            return info
    known = ", ".join(sorted(i.name for i in infos)) or "none installed"
    hint = " (pip install ./plugins/avo-executor-ray)" if name == "ray" else ""
    raise AvoError(f"unknown executor {name!r}; installed executors: {known}{hint}")


def _call(hook: str, name: str, **kwargs: Any) -> Any:
    """Call ``hook`` on the one plugin that announced executor ``name`` (its provider)."""
    from avo.plugins import plugin_manager_with

    provider = find_executor(name).provider
    pm = plugin_manager_with({provider or ""})
    for impl in getattr(pm.hook, hook).get_hookimpls():
        if pm.get_name(impl.plugin) == provider:
            given = {"executor": name, **kwargs}
            return impl.function(**{k: v for k, v in given.items() if k in impl.argnames})
    return None


def execute(name: str, job: EvalJob, options: dict[str, str]) -> JobResult:
    """Run ``job`` on executor ``name``; an executor that does not answer is a failed result."""
    res = _call("avo_execute", name, job=job, options=options)
    if res is None:
        return JobResult(result=failed(f"executor {name!r} did not run the job"), executor=name)
    return cast(JobResult, res)


def cancel(name: str, job_id: str) -> bool:
    """Ask executor ``name`` to stop job ``job_id``."""
    return bool(_call("avo_cancel", name, job_id=job_id))


def check(name: str, target: TargetSpec | None, options: dict[str, str]) -> ExecutorCheck:
    """Whether executor ``name`` can run ``target`` here, and how many jobs at once."""
    res = _call("avo_executor_check", name, target=target, options=options)
    return cast(ExecutorCheck, res) if res is not None else ExecutorCheck(ok=True, capacity=1)


def execute_many(name: str, jobs: Sequence[EvalJob], options: dict[str, str], capacity: int) -> list[JobResult]:
    """Run ``jobs`` at most ``capacity`` at a time, in order; results in the jobs' order.

    An interrupt cancels every job still running before it propagates.
    """
    if capacity <= 1 or len(jobs) <= 1:
        return [execute(name, job, options) for job in jobs]
    pool = ThreadPoolExecutor(max_workers=min(capacity, len(jobs)), thread_name_prefix="avo-job")
    futures = [pool.submit(execute, name, job, options) for job in jobs]
    try:
        out = [f.result() for f in futures]
    except BaseException:
        for job, f in zip(jobs, futures, strict=True):
            if not f.done():
                f.cancel()
                cancel(name, job.id)
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return out


def where(res: JobResult) -> str:
    """Where a result was produced, in words: ``ray node 10.0.0.3 (A100)``."""
    place = f"{res.executor} {res.node}" if res.node else res.executor
    return place + (f" ({res.accelerator})" if res.accelerator else "")


def temporary_private() -> tempfile.TemporaryDirectory[str]:
    """A private folder for a job run outside a run (verify, a worker)."""
    return tempfile.TemporaryDirectory(prefix="avo-job-")

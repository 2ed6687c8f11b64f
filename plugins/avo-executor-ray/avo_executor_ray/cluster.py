"""The connection to the Ray cluster, and what it can hold.

``address=...`` (an executor option) or ``$RAY_ADDRESS`` names a running cluster; with
neither, a local Ray instance is started on first use and stopped when the process ends
(``ray.init`` registers its own shutdown at exit; :func:`shutdown` does it earlier).
"""

from __future__ import annotations

import importlib.util
import math
import os
import threading
from typing import Any

from avo.errors import AvoError
from avo.models import ExecutorCheck, TargetResources, TargetSpec

_lock = threading.Lock()
_address: str | None = None  # what this process is connected to ("local": an instance it started)

KNOWN_OPTIONS = {"address", "grace", "jobs", "num_cpus"}


def address_of(options: dict[str, str]) -> str | None:
    """The cluster address the options or the environment name (``None``: start a local one)."""
    return (options.get("address") or os.environ.get("RAY_ADDRESS") or "").strip() or None


def _check_options(options: dict[str, str]) -> None:
    unknown = sorted(set(options) - KNOWN_OPTIONS)
    if unknown:
        known = ", ".join(sorted(KNOWN_OPTIONS))
        raise AvoError(f"unknown ray executor option(s) {', '.join(unknown)}; known: {known}")


def connect(options: dict[str, str]) -> Any:
    """The ``ray`` module, connected to the cluster of ``options`` (once per process)."""
    global _address
    _check_options(options)
    if importlib.util.find_spec("ray") is None:
        raise AvoError("the ray executor needs Ray: pip install ./plugins/avo-executor-ray (or pip install ray)")
    import ray

    wanted = address_of(options)
    with _lock:
        if ray.is_initialized():
            if _address is not None and (wanted or "local") != _address:
                raise AvoError(f"this process is connected to Ray at {_address}, not {wanted or 'a local instance'}")
            return ray
        kwargs: dict[str, Any] = {"namespace": "avo", "log_to_driver": False, "logging_level": "warning",
                                  "configure_logging": False}
        if wanted is None:
            # No cluster named: a private instance for this run, stopped when avo exits.
            if options.get("num_cpus"):
                kwargs["num_cpus"] = int(options["num_cpus"])
            kwargs.update(include_dashboard=False, address="local")
        else:
            kwargs["address"] = wanted
        try:
            ray.init(**kwargs)
        except Exception as exc:  # ConnectionError, a bad address, a version mismatch
            where = wanted or "a local Ray instance"
            raise AvoError(f"cannot connect to the Ray cluster at {where}: {type(exc).__name__}: {exc}") from None
        _address = wanted or "local"
        return ray


def shutdown() -> None:
    """Disconnect (and stop a local instance this process started)."""
    global _address
    import ray

    with _lock:
        if ray.is_initialized():
            ray.shutdown()
        _address = None


def task_options(res: TargetResources) -> dict[str, Any]:
    """Ray task options for a target's resources: what one evaluation holds."""
    opts: dict[str, Any] = {"num_cpus": res.cpus, "num_gpus": res.gpus}
    if res.memory_mb is not None:
        opts["memory"] = res.memory_mb * 1024 * 1024
    if res.accelerator:
        opts["accelerator_type"] = res.accelerator
    return opts


def _fits(node: dict[str, float], res: TargetResources) -> int:
    """How many evaluations with ``res`` a node with resources ``node`` holds at once."""
    counts = [math.floor(node.get("CPU", 0.0) / res.cpus + 1e-9) if res.cpus > 0 else 1 << 16]
    if res.gpus > 0:
        counts.append(math.floor(node.get("GPU", 0.0) / res.gpus + 1e-9))
    if res.memory_mb is not None:
        counts.append(math.floor(node.get("memory", 0.0) / (res.memory_mb * 1024 * 1024) + 1e-9))
    if res.accelerator and node.get(f"accelerator_type:{res.accelerator}", 0.0) <= 0:
        return 0
    return max(0, min(counts))


def capacity(ray: Any, res: TargetResources) -> tuple[int, list[str]]:
    """``(jobs at once, a line per alive node)`` over the whole cluster."""
    total, lines = 0, []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        resources = node.get("Resources") or {}
        fits = _fits(resources, res)
        total += fits
        shown = ", ".join(f"{k}={v:g}" for k, v in sorted(resources.items())
                          if k in ("CPU", "GPU") or k.startswith("accelerator_type:"))
        lines.append(f"node {node.get('NodeManagerAddress')}: {shown}; holds {fits} evaluation(s) at once")
    return total, lines


def check(target: TargetSpec | None, options: dict[str, str]) -> ExecutorCheck:
    """Ray importable, the cluster reachable, the target's resources present (``avo doctor``)."""
    if importlib.util.find_spec("ray") is None:
        return ExecutorCheck(ok=False, problems=["pip install ./plugins/avo-executor-ray (Ray is not installed)"])
    from importlib.metadata import version

    lines = [f"Ray {version('ray')} importable"]
    if target is None and address_of(options) is None and not _connected():
        lines.append("no cluster named (address=... or $RAY_ADDRESS): each run starts a local Ray instance")
        return ExecutorCheck(ok=True, lines=lines)
    try:
        ray = connect(options)
    except AvoError as exc:
        return ExecutorCheck(ok=False, lines=lines, problems=[str(exc)])
    lines.append(f"connected to {_address}")
    res = target.resources if target is not None else TargetResources()
    fits, nodes = capacity(ray, res)
    lines.extend(nodes)
    cap = fits
    if options.get("jobs"):
        cap = min(cap, max(1, int(options["jobs"])))
    if fits == 0:
        need = ", ".join(f"{k}={v}" for k, v in task_options(res).items())
        return ExecutorCheck(ok=False, lines=lines, problems=[
            f"no alive node of the cluster has what one evaluation of {target.name if target else 'a target'} "
            f"holds ({need}); add such a node or change the target's resources"])
    return ExecutorCheck(ok=True, lines=lines, capacity=max(1, cap))


def _connected() -> bool:
    return _address is not None

"""Evaluate a candidate directory through its target: always in a child process.

Plugin targets run as ``python -m avo.evaluator``; directory targets run their configured
command. Either way :func:`avo.runner.run_child` supplies the timeout, the limits, the
output caps and the strict parsing of the contract.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from avo.contract import check_configs, failed, last_json_object, parse_object, scalar_of
from avo.models import EvalResult, TargetSpec
from avo.runner import run_child


@dataclass
class Evaluation:
    """A parsed result plus its scalar (``None`` when the gate is closed)."""

    result: EvalResult
    scalar: float | None
    wall_s: float
    log_path: Path


def _fill(template: list[str], spec: TargetSpec, workdir: Path | None) -> list[str]:
    values = {
        "target": str(spec.directory or ""),
        "workdir": str(workdir or ""),
        "python": sys.executable,
    }
    try:
        return [part.format(**values) for part in template]
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"bad placeholder in the command {template!r}: {exc}; "
            "only {target}, {workdir} and {python} are known"
        ) from None


def command_for(spec: TargetSpec, workdir: Path | None, *, quick: bool, baselines: bool = False) -> list[str]:
    """The child command that evaluates ``workdir`` (or measures baselines)."""
    template = spec.baselines_command if baselines else spec.evaluate_command
    if template is not None:
        return _fill(template, spec, workdir)
    cmd = [sys.executable, "-m", "avo.evaluator", "--target", spec.name]
    if workdir is not None:
        cmd += ["--workdir", str(workdir)]
    if baselines:
        cmd.append("--baselines")
    if quick:
        cmd.append("--quick")
    return cmd


def _child_env(quick: bool, log_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["AVO_QUICK"] = "1" if quick else "0"
    env["AVO_LOG_DIR"] = str(log_dir)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def evaluate_dir(
    spec: TargetSpec,
    workdir: Path,
    log_path: Path,
    *,
    quick: bool = False,
    configs: set[str] | None = None,
    pid_file: Path | None = None,
) -> Evaluation:
    """Evaluate the candidate files in ``workdir`` with the target's evaluator."""
    try:
        cmd = command_for(spec, workdir, quick=quick)
    except ValueError as exc:
        return Evaluation(failed(str(exc)), None, 0.0, log_path)
    outcome = run_child(
        cmd, cwd=workdir, timeout=spec.eval_timeout, limits=spec.limits, log_path=log_path,
        env=_child_env(quick, log_path.parent), pid_file=pid_file,
    )
    result = check_configs(outcome.result, configs)
    scalar, why = scalar_of(result)
    if scalar is None and result.correct:
        result = failed(why or "no scalar", result.notes)
    return Evaluation(result, scalar, outcome.wall_s, log_path)


MALFORMED_BASELINES = "(baselines)"
MALFORMED_PREFIX = "malformed baselines output"
BASELINES_SHAPE = '{"baselines": {"NAME": {"correct": true, "metrics": {...}}, ...}}'


def measure_baselines(spec: TargetSpec, log_path: Path, *, quick: bool = False) -> dict[str, Evaluation]:
    """Run the target's baselines once: ``{name: evaluation}`` (empty when it has none)."""
    if not spec.has_baselines and spec.baselines_command is None:
        return {}
    cmd = command_for(spec, None, quick=quick, baselines=True)
    outcome = run_child(
        cmd, cwd=log_path.parent, timeout=spec.baseline_timeout, limits=spec.limits,
        log_path=log_path, env=_child_env(quick, log_path.parent),
    )
    data, problem = last_json_object(outcome.stdout)
    if data is None or outcome.returncode != 0:
        error = problem if data is None else (outcome.result.error or f"exit {outcome.returncode}")
        return {MALFORMED_BASELINES: Evaluation(failed(f"baselines failed: {error}"), None, outcome.wall_s, log_path)}
    table = data.get("baselines", data)
    out: dict[str, Evaluation] = {}
    if not isinstance(table, dict) or not table or not all(isinstance(raw, dict) for raw in table.values()):
        shape = "a single result" if isinstance(table, dict) and "correct" in table else "something else"
        return {MALFORMED_BASELINES: Evaluation(failed(
            f"{MALFORMED_PREFIX} of target {spec.name!r}: its last line is {shape}, expected {BASELINES_SHAPE}; "
            "no baselines are recorded for this run"), None, outcome.wall_s, log_path)}
    for name, raw in table.items():
        result = parse_object(raw)
        scalar, why = scalar_of(result)
        if scalar is None and result.correct:
            result = failed(why or "no scalar")
        out[str(name)] = Evaluation(result, scalar, outcome.wall_s, log_path)
    return out


def baselines_payload(results: dict[str, EvalResult]) -> str:
    """The JSON line a baselines child prints (used by :mod:`avo.evaluator`)."""
    return json.dumps({"baselines": {k: v.model_dump(exclude_none=True) for k, v in results.items()}})

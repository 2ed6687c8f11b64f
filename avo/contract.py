"""The evaluator contract: strict parsing of the last stdout line, and the scalar.

Anything that is not a well-formed result becomes a failed evaluation whose error names
the problem, so a broken evaluator can never produce a score by accident.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable

from pydantic import ValidationError

from avo.models import Direction, EvalResult


def failed(error: str, notes: str | None = None) -> EvalResult:
    """A failed evaluation (gate closed) carrying ``error``."""
    return EvalResult(correct=False, metrics={}, error=error, notes=notes)


def last_json_object(stdout: str) -> tuple[dict[str, object] | None, str | None]:
    """The JSON object on the last non-empty stdout line, or ``(None, why not)``."""
    lines = [line for line in stdout.splitlines() if line.strip()]
    if not lines:
        return None, "evaluator printed nothing on stdout; expected a JSON object as its last line"
    last = lines[-1].strip()
    try:
        data = json.loads(last)
    except json.JSONDecodeError as exc:
        return None, f"evaluator's last stdout line is not valid JSON ({exc.msg}): {last[:200]!r}"
    if not isinstance(data, dict):
        return None, f"evaluator's last stdout line is JSON but not an object: {last[:200]!r}"
    return data, None


def count_results(text: str) -> int:
    """How many lines of ``text`` are result objects (a JSON object with ``correct`` or ``baselines``)."""
    n = 0
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            data = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(data, dict) and ("correct" in data or "baselines" in data):
            n += 1
    return n


def parse_output(stdout: str) -> EvalResult:
    """Parse an evaluator's stdout: the last non-empty line must be the JSON contract."""
    data, problem = last_json_object(stdout)
    if data is None:
        return failed(problem or "no result")
    return parse_object(data)


def parse_object(data: dict[str, object]) -> EvalResult:
    """Validate a decoded contract object into an :class:`EvalResult`."""
    if "correct" not in data:
        return failed("evaluator result has no 'correct' key (the gate)")
    if not isinstance(data["correct"], bool):
        return failed(f"evaluator result 'correct' must be true or false, got {data['correct']!r}")
    if data["correct"] and "metrics" not in data and "primary" not in data:
        return failed("evaluator result has no 'metrics' key")
    metrics = data.get("metrics", {})
    if isinstance(metrics, dict):
        for key, value in metrics.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return failed(f"metric {key!r} is not a number: {value!r}")
    try:
        return EvalResult.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'result'}: {err['msg']}" for err in exc.errors()
        )
        return failed(f"evaluator result does not match the contract: {problems}")


def geometric_mean(values: Iterable[float]) -> float:
    """Geometric mean of positive values."""
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))


def scalar_of(result: EvalResult) -> tuple[float | None, str | None]:
    """The scalar of a passing result, or ``(None, why)`` when none can be formed."""
    if not result.correct:
        return None, result.error or "failed the correctness gate"
    if result.primary is not None:
        return result.primary, None
    if not result.metrics:
        return None, "no metrics to aggregate"
    bad = {k: v for k, v in result.metrics.items() if v <= 0}
    if bad:
        return None, f"metrics must be positive for a geometric mean, got {bad}"
    return geometric_mean(result.metrics.values()), None


def check_configs(result: EvalResult, expected: set[str] | None) -> EvalResult:
    """Fail a result whose metric keys differ from the seed's (the score vector's axes)."""
    if expected is None or not result.correct or result.primary is not None:
        return result
    got = set(result.metrics)
    if got != expected:
        missing, extra = sorted(expected - got), sorted(got - expected)
        parts = []
        if missing:
            parts.append(f"missing {missing}")
        if extra:
            parts.append(f"unexpected {extra}")
        return failed(f"metric configs differ from the seed's: {', '.join(parts)}", result.notes)
    return result


def better(a: float, b: float, direction: Direction) -> bool:
    """``a`` strictly better than ``b``."""
    return a > b if direction == "maximize" else a < b


def gain(candidate: float, best: float, direction: Direction) -> float:
    """Relative improvement of ``candidate`` over ``best`` (positive = better)."""
    if best == 0:
        return math.inf if better(candidate, best, direction) else 0.0
    rel = (candidate - best) / abs(best)
    return rel if direction == "maximize" else -rel

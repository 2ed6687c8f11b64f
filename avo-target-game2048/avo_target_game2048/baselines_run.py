"""Measure the reference players exactly as candidates are measured: one process each,
through the runner and the pipe, under the same budget and limits."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from avo.contract import scalar_of
from avo.models import EvalOptions, EvalResult
from avo_target_game2048 import BASELINES, BASELINES_DIR
from avo_target_game2048.harness import Settings, evaluate_dir


def stage(name: str, dest: Path) -> Path:
    """Lay out baseline ``name`` in ``dest`` as a candidate would be: ``agent.py`` (+ helpers)."""
    if name not in BASELINES:
        raise ValueError(f"unknown baseline {name!r}; known: {', '.join(BASELINES)}")
    shutil.copy2(BASELINES_DIR / f"{name}.py", dest / "agent.py")
    shutil.copy2(BASELINES_DIR / "_board.py", dest / "_board.py")
    return dest


def measure(name: str, options: EvalOptions) -> EvalResult:
    """Evaluate one baseline."""
    settings = Settings.from_options(options)
    with tempfile.TemporaryDirectory(prefix=f"game2048-{name}-") as tmp:
        return evaluate_dir(stage(name, Path(tmp)), settings, options.log_dir, label=f"baseline-{name}")


def measure_all(options: EvalOptions) -> dict[str, EvalResult]:
    """Every baseline, weakest first."""
    from avo.progress import report

    out = {}
    for name in BASELINES:
        out[name] = result = measure(name, options)
        # The scalar avo will show for it (the geometric mean of the banks), not another average.
        scalar, why = scalar_of(result)
        report(f"baseline {name}: " + (f"{scalar:,.1f}" if scalar is not None else f"failed: {why}"))
    return out

"""Two evaluations of the same candidate agree within the spread the evaluator reports."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

from avo_target_attention_mlx import spec
from mlx_target_helpers import evaluate, write_candidate


def test_two_evaluations_of_one_candidate_agree_within_the_reported_spread(tmp_path: Path) -> None:
    source = """
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """
    work = write_candidate(tmp_path, source)
    a, b = evaluate(work), evaluate(work)
    assert a["correct"] and b["correct"], (a.get("error"), b.get("error"))
    assert a["metrics"] != b["metrics"]  # two real measurements (fresh inputs), not a cache
    scalar_a = math.exp(statistics.fmean(math.log(v) for v in a["metrics"].values()))
    scalar_b = math.exp(statistics.fmean(math.log(v) for v in b["metrics"].values()))
    # Per-pair spread of one measurement, averaged over configs: the evaluator's own figure.
    reported = max(statistics.fmean(a["spread"].values()), statistics.fmean(b["spread"].values()))
    tolerance = max(spec().noise.band, 3 * reported)
    assert abs(math.log(scalar_a / scalar_b)) <= tolerance, (scalar_a, scalar_b, a["spread"], b["spread"])
    # SDPA against itself: the ratio must sit at 1 within that spread.
    assert abs(math.log(scalar_a)) <= tolerance

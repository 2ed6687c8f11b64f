"""The timing estimator's logic, on synthetic pair series and on a real evaluation's table (no timed assertions)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from avo.models import EvalResult
from conftest import SEED

from avo_target_attention_c.evaluate import MIN_KEPT_QUADS, SLOW_FACTOR, at_speed, quad_ratios, speed_gated

# What was measured here: NumPy ran ~30 % faster right after a NumPy call (reference first in
# the pair) than right after the kernel, so the ratios t_ref / t_kernel of one config form two
# clusters, one per order.
KERNEL_S = 1e-3
REF_WARM_S, REF_COLD_S = 2.2e-3, 3.1e-3


def _series(orders: str, jitter: list[float] | None = None) -> list[tuple[float, float]]:
    """Pairs (t_ref, t_cand) in ``orders`` ("r": reference first, "k": kernel first)."""
    jitter = jitter or [0.0] * len(orders)
    return [((REF_WARM_S if o == "r" else REF_COLD_S) * (1 + j), KERNEL_S) for o, j in zip(orders, jitter, strict=True)]


def test_each_quad_combines_one_pair_of_each_order_into_the_geometric_mean_of_their_ratios() -> None:
    pairs = _series("rk" * 6)
    want = math.sqrt(REF_WARM_S / KERNEL_S * REF_COLD_S / KERNEL_S)
    assert quad_ratios(pairs) == pytest.approx([want] * 6)


def test_the_quad_median_does_not_jump_between_the_order_clusters_as_the_median_of_pairs_does() -> None:
    # Twelve pairs with the order effect and a little noise; two of the kernel-first pairs then
    # land a few percent lower (a preempted call, say). The median over all pairs sat in the
    # gap between the two clusters and moves with them; the median over quads barely moves.
    noise = [0.01, -0.01, 0.0, 0.02, -0.02, 0.01, 0.0, -0.01, 0.02, 0.0, -0.01, 0.01]
    before = _series("rk" * 6, noise)
    after = list(before)
    for i in (1, 3):
        after[i] = (after[i][0] * 0.72, after[i][1])  # two kernel-first ratios fall into the other cluster
    pair_median = [statistics.median(t / c for t, c in s) for s in (before, after)]
    quad_median = [statistics.median(quad_ratios(s)) for s in (before, after)]
    assert pair_median[0] / pair_median[1] > 1.15  # the old estimator jumps by the order effect
    assert quad_median[0] / quad_median[1] < 1.02  # the quads lose only the two affected quads' weight


def test_pairs_come_in_quads() -> None:
    with pytest.raises(ValueError, match="pairs come in quads"):
        quad_ratios(_series("rkr"))


def _slow_phase(quads: int, slow: range, ref_slowdown: float, kernel_slowdown: float) -> list[tuple[float, float]]:
    """Quads with the order effect; in ``slow`` both sides take longer, the kernel more (as measured here)."""
    pairs: list[tuple[float, float]] = []
    for j in range(quads):
        r, k = (ref_slowdown, kernel_slowdown) if j in slow else (1.0, 1.0)
        wobble = 1 + 0.01 * ((j * 7) % 5 - 2)  # +-2 %, the quiet phases' jitter
        pairs += [(REF_WARM_S * r * wobble, KERNEL_S * k), (REF_COLD_S * r * wobble, KERNEL_S * k)]
    return pairs


def test_quads_timed_while_the_machine_ran_slow_are_left_out() -> None:
    # 30 quads; during 14 of them NumPy takes 35 % longer and the kernel 60 % longer (the
    # slow phases measured here), so their ratio is 16 % lower.
    pairs = _slow_phase(30, range(8, 22), 1.35, 1.6)
    ok = at_speed(pairs)
    assert ok == [j not in range(8, 22) for j in range(30)]
    kept, dropped = speed_gated(pairs)
    assert dropped == 14 and len(kept) == 16
    quiet = statistics.median(quad_ratios(_slow_phase(30, range(0), 1.0, 1.0)))
    assert statistics.median(kept) == pytest.approx(quiet, rel=0.002)
    assert statistics.median(quad_ratios(pairs)) < 0.985 * quiet  # the median of all quads moves with the phase


def test_the_reference_within_the_slow_factor_counts_as_at_speed_and_the_gate_needs_enough_quads() -> None:
    # Just inside and just outside the factor.
    pairs = _slow_phase(20, range(0), 1.0, 1.0)
    inside = [(t * (SLOW_FACTOR - 0.05) if i in (0, 1) else t, c) for i, (t, c) in enumerate(pairs)]
    outside = [(t * (SLOW_FACTOR + 0.1) if i in (0, 1) else t, c) for i, (t, c) in enumerate(pairs)]
    assert at_speed(inside)[0] and not at_speed(outside)[0]
    # Mostly slow with a few fast quads: too few at speed to stand alone, so all are used.
    few = _slow_phase(20, range(MIN_KEPT_QUADS - 1, 20), 1.35, 1.6)
    kept, dropped = speed_gated(few)
    assert dropped is None and len(kept) == 20
    assert at_speed([]) == [] and speed_gated(pairs[:2]) == (quad_ratios(pairs[:2]), 0)


def test_every_config_is_timed_in_whole_quads(candidate: Callable[..., Path],
                                              evaluate: Callable[[Path], EvalResult]) -> None:
    result = evaluate(candidate(SEED))
    assert result.correct, result.error
    assert result.notes is not None and "median over quads of pairs" in result.notes
    lines = result.notes.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("config"))
    rows = [line.split() for line in lines[header + 1:header + 9]]
    assert len(rows) == 8
    pairs = [int(row[5]) for row in rows]
    assert all(p >= 4 and p % 2 == 0 for p in pairs), pairs

"""The commit policy (paper §3.2): pass the gate and match or improve the best committed score.

Two scores within a relative tolerance (``tie_tolerance``, 1e-9 by default) are a *tie*:
re-finding the same optimum through another path of floating-point arithmetic is a match,
never a new best and never a loss, whatever the last bits say.

With a declared noise band, a gain inside the band is not taken on one measurement: the
candidate and the best version are re-measured alternately and the medians decide. To be
accepted there the candidate's median must beat the incumbent's by the band's standard
error (``band / sqrt(runs)``), so a change that is only noise (a new random seed, say)
does not enter the lineage as progress. A gain beyond the band is measured once more
(``NoiseSpec.recheck_gains``, avo/engine.py): kept at the lower draw when both are beyond
it, decided by the medians as above when the second is not.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

from avo.contract import gain
from avo.models import Direction
from avo.numbers import fmt_pct

Verdict = Literal["accept", "reject", "confirm"]
TIE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class Decision:
    accepted: bool
    new_best: bool
    scalar: float
    reason: str
    gain: float  # what the decision stood on: the candidate against the best (medians after a confirmation)


def is_tie(a: float, b: float, tolerance: float = TIE_TOLERANCE) -> bool:
    """Whether ``a`` and ``b`` are equal within the relative ``tolerance``."""
    return abs(a - b) <= tolerance * max(abs(a), abs(b))


def first_look(
    candidate: float, best: float, direction: Direction, band: float, tie: float = TIE_TOLERANCE
) -> Verdict:
    """Decide on one measurement, or ask for confirmation when the gain is inside the band."""
    if is_tie(candidate, best, tie):
        return "accept"  # a match, however the rounding fell
    g = gain(candidate, best, direction)
    if band <= 0:
        return "accept" if g >= 0 else "reject"
    if g > band:
        return "accept"
    if g < -band:
        return "reject"
    return "confirm"


def fmt_tolerance(tolerance: float) -> str:
    """``1e-9`` rather than Python's ``1e-09``."""
    return f"{tolerance:g}".replace("e-0", "e-").replace("e+0", "e+")


def single_decision(
    candidate: float, best: float, best_n: int, direction: Direction, tie: float = TIE_TOLERANCE
) -> Decision:
    """The decision and its reason when one measurement decides (no noise confirmation)."""
    g = gain(candidate, best, direction)
    if is_tie(candidate, best, tie):
        return Decision(True, False, candidate, f"matches v{best_n} (tie within {fmt_tolerance(tie)})", g)
    if g > 0:
        return Decision(True, True, candidate, f"improves the best v{best_n} ({fmt_pct(g, 2)})", g)
    return Decision(False, False, candidate, f"worse than the best v{best_n} ({fmt_pct(g, 2)})", g)


def confirm(candidate_runs: list[float], best_runs: list[float], direction: Direction, band: float) -> Decision:
    """Medians of interleaved re-measurements decide a gain that was inside the band."""
    mc, mb = statistics.median(candidate_runs), statistics.median(best_runs)
    g = gain(mc, mb, direction)
    threshold = band / math.sqrt(max(1, min(len(candidate_runs), len(best_runs))))
    if g >= threshold:
        return Decision(True, True, mc, f"confirmed: median {mc:.6g} vs {mb:.6g} ({g:+.2%}, needed {threshold:+.2%})",
                        g)
    return Decision(
        False, False, mc,
        f"inside the noise band: median {mc:.6g} vs best re-measured {mb:.6g} ({g:+.2%}, needed {threshold:+.2%})",
        g,
    )

"""How numbers are shown: enough digits to tell every version from its predecessor.

Four significant figures hide the small, late gains that matter most on a converging
run (1e-3 .. 1e-6 relative), so every view asks :func:`display_digits` how many digits
the run's lineage needs (or takes the target's declared ``precision``) and formats with
:func:`fmt_number` and :func:`fmt_pct`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from avo.state import RunState, Version

DEFAULT_DIGITS = 4
MAX_DIGITS = 15


def fmt_number(x: float | None, digits: int | None = None) -> str:
    """``x`` with four significant figures, or ``digits`` when more are needed."""
    if x is None:
        return "—"
    if digits is not None and digits > DEFAULT_DIGITS:
        return f"{x:,.{digits}g}" if 1e3 <= abs(x) < 1e15 else f"{x:.{digits}g}"
    if x == 0 or 1e-3 <= abs(x) < 1e6:
        return f"{x:.4g}" if abs(x) < 100 else f"{x:,.1f}"
    return f"{x:.3e}"


def fmt_pct(g: float | None, decimals: int = 1) -> str:
    """A relative change as a signed percentage with at least two significant figures.

    ``+0.0%`` is kept for a change that is exactly zero; a change of 1e-6 reads
    ``+0.00010%`` instead of rounding to ``+0.0%``.
    """
    if g is None:
        return "—"
    if math.isinf(g):
        return "+∞" if g > 0 else "-∞"
    pct = abs(g) * 100
    if pct > 0:
        decimals = max(decimals, min(12, 1 - math.floor(math.log10(pct) + 1e-9)))
    return f"{g:+.{decimals}%}"


def digits_to_separate(pairs: Sequence[tuple[float, float]], floor: int = DEFAULT_DIGITS) -> int:
    """The fewest significant digits (at least ``floor``) at which each pair prints differently."""
    digits = floor
    for a, b in pairs:
        if a == b:
            continue
        d = digits
        while d < MAX_DIGITS and fmt_number(a, d) == fmt_number(b, d):
            d += 1
        digits = max(digits, d)
    return digits


def display_digits(state: RunState) -> int:
    """Significant digits for this run's scores: the target's ``precision``, else from the lineage.

    Automatic: enough that every accepted version's scalar (and each config's value) prints
    differently from its predecessor's, unless the two are a tie within the target's
    tolerance (those are reported as ties, not as progress).
    """
    spec = state.target
    if spec.precision is not None:
        return spec.precision
    versions = state.versions
    if not versions:
        return DEFAULT_DIGITS
    # One view asks several times (the prompt: four) of the same list, which avo only ever
    # extends: the answer is kept with the list itself (held, so its id is never reused).
    key = (len(versions), versions[-1].sha, versions[-1].scalar, spec.tie_tolerance)
    held, held_key, digits = _last_digits
    if held is not versions or held_key != key:
        digits = _digits_of(versions, spec.tie_tolerance)
        _last_digits[:] = [versions, key, digits]
    return int(digits)


_last_digits: list[Any] = [None, None, DEFAULT_DIGITS]


def _digits_of(versions: Sequence[Version], tolerance: float) -> int:
    from avo.policy import is_tie

    # digits_to_separate over the pairs that are not ties, in one pass: a pair that already
    # prints differently at the digits reached so far cannot raise them, so it is passed
    # over before the tie test (every view calls this; a run may have 10,000 versions).
    digits = DEFAULT_DIGITS
    for prev, v in zip(versions, versions[1:], strict=False):
        pm = prev.metrics
        for a, b in [(prev.scalar, v.scalar), *((pm[c], x) for c, x in v.metrics.items() if c in pm)]:
            if a == b or fmt_number(a, digits) != fmt_number(b, digits) or is_tie(a, b, tolerance):
                continue
            d = digits
            while d < MAX_DIGITS and fmt_number(a, d) == fmt_number(b, d):
                d += 1
            digits = d
    return digits

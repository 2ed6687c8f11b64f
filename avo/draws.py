"""The draws of one submit: each evaluation of the candidate and of the best, as the trajectory
records them, and the per-config metrics that go with a median of them.

A gain inside the noise band is decided on the medians of several draws, and the version it
makes records the candidate's median as its scalar. Its metrics are taken at that median too
(they were the first draw's, so `avo log`, the plot's per-config panels and the report showed
banks that did not go with the scalar); every draw keeps its own figures in the record.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

if TYPE_CHECKING:
    from avo.evaluation import Evaluation


class Draw(BaseModel):
    """One evaluation of a submit (its first look, a second look, a confirmation run), as recorded."""

    label: str | None
    scalar: float | None
    metrics: dict[str, float]
    notes: str | None = None
    error: str | None = None
    log: str
    wall_s: float
    where: str | None = None
    cpu: str | None = None
    secret: str | None = None


@dataclass
class Medians:
    """The per-config figures a confirmation decided on: the candidate's and the best's, each at
    the median of its own draws (``at_median``), and how many draws each median is of."""

    candidate: dict[str, float]
    best: dict[str, float]
    candidate_draws: int
    best_draws: int


def draw_record(ev: Evaluation) -> dict[str, Any]:
    """What the trajectory keeps of one draw: its scalar, metrics, notes, log and where it ran."""
    return Draw(label=ev.label, scalar=ev.scalar, metrics=ev.result.metrics, notes=ev.result.notes,
                error=ev.result.error, log=ev.log_path.name, wall_s=round(ev.wall_s, 3), where=ev.where,
                cpu=ev.cpu, secret=ev.secret).model_dump()


def at_median(draws: list[Evaluation]) -> tuple[dict[str, float], str | None]:
    """The metrics and notes that go with the median of ``draws``' scalars (all passing).

    An odd count: the middle draw's own. An even count: the median is the mean of the two middle
    draws, and each metric is taken between theirs at the same point, on the log scale when the
    scalar is the metrics' geometric mean (their geometric mean is then the median exactly),
    linearly when the target gives its own scalar (``primary``); the notes are both draws'.
    """
    ranked = sorted(draws, key=lambda ev: ev.scalar or 0.0)
    middle = ranked[len(ranked) // 2]
    if len(ranked) % 2:
        return dict(middle.result.metrics), middle.result.notes
    low = ranked[len(ranked) // 2 - 1]
    a, b = low.result.metrics, middle.result.metrics
    notes = " | ".join(n for n in (low.result.notes, middle.result.notes) if n) or None
    sa, sb = low.scalar or 0.0, middle.scalar or 0.0
    if sa == sb or set(a) != set(b):
        return dict(a), low.result.notes
    median = statistics.median([sa, sb])
    geometric = low.result.primary is None and middle.result.primary is None and all(
        x > 0 for x in [*a.values(), *b.values(), sa, sb])
    if geometric:
        w = (math.log(median) - math.log(sa)) / (math.log(sb) - math.log(sa))
        return {k: math.exp(math.log(a[k]) + w * (math.log(b[k]) - math.log(a[k]))) for k in a}, notes
    w = (median - sa) / (sb - sa)
    return {k: a[k] + w * (b[k] - a[k]) for k in a}, notes

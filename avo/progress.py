"""Live progress from inside a long evaluation (the baselines at start, a slow full run).

An evaluator calls :func:`report` (or, in any language, prints a line starting with
``avo-progress: `` on stderr); avo's child runner passes each such line, as it arrives, to
whoever is listening (``avo start`` prints it under "measuring baselines ..."). The line
still goes to the log like any other. Nothing is listening on a remote executor.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal, InvalidOperation

PREFIX = "avo-progress: "
_listeners: list[Callable[[str], None]] = []


def report(text: str) -> None:
    """Say what the evaluation is doing now, in one line (call from an evaluator)."""
    print(PREFIX + " ".join(str(text).split()), file=sys.stderr, flush=True)


@contextmanager
def shown_by(say: Callable[[str], None]) -> Iterator[None]:
    """While the block runs, progress lines of evaluator children go to ``say``."""
    _listeners.append(say)
    try:
        yield
    finally:
        _listeners.remove(say)


def emit(line: str) -> None:
    """Pass one progress line (prefix stripped) to the current listener, if any."""
    if _listeners:
        _listeners[-1](line)


def says_baseline(line: str, name: str, shown: str) -> bool:
    """Whether progress ``line`` already said what avo's own line for baseline ``name`` says
    (``shown``: what avo prints after ``baseline NAME: ``), so ``avo start`` prints it once.

    The same text, or a number that reads as avo's at avo's precision (``2,734.97`` for
    ``2,735.0``); a coarser one (``3`` for ``3.4``) or another value leaves avo's line to print.
    """
    prefix = f"baseline {name}: "
    if not line.startswith(prefix):
        return False
    said = line[len(prefix):].strip()
    if said == shown.strip():
        return True
    try:
        theirs, ours = (Decimal(text.replace(",", "")) for text in (said, shown.strip()))
        return bool(theirs.is_finite() and ours.is_finite() and theirs.quantize(ours) == ours)
    except (InvalidOperation, ValueError):  # not a number (`measured`, a failure), or past quantize's range
        return False

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

"""Attempts that take no step of the budget (a revert, an aborted submit): how views place them.

Their trajectory records carry the number of the step being worked on, the next one, which
read as "step 1" beside `avo status`'s "steps 0/12". Every view names them by the step they
came after instead, so none is mistaken for a step.
"""

from __future__ import annotations

from typing import Any


def after_step(record: dict[str, Any]) -> str:
    """``after step K`` for the record of an attempt that used no step (K steps were taken before it)."""
    step = record.get("step")
    return f"after step {step - 1}" if isinstance(step, int) and not isinstance(step, bool) else "after step ?"

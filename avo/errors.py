"""Errors a user sees. Each message names the problem and what to do about it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pydantic import ValidationError


class AvoError(Exception):
    """An error meant for the user: printed without a traceback by the CLI."""


class SpecError(AvoError):
    """A target.yaml (or a plugin's spec) is invalid."""


class IntegrityError(AvoError):
    """The evaluator or knowledge base changed after the run started."""


class BlockedError(AvoError):
    """The run cannot take this step yet (supervisor due, budget spent, lock held).

    ``reason`` says which, so a front end can name its own way out.
    """

    def __init__(self, message: str, reason: str = "") -> None:
        super().__init__(message)
        self.reason = reason


class RecordError(AvoError):
    """run.json, the trajectory and the lineage disagree: the record was edited or damaged."""


def validation_summary(exc: ValidationError) -> str:
    """A pydantic validation error in one line a user reads: where and what, for the first
    problem, and how many more (pydantic's own text adds input dumps and a documentation link)."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where + ': ' if where else ''}{first['msg']}{more}"

"""Errors a user sees. Each message names the problem and what to do about it."""

from __future__ import annotations


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

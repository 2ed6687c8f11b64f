"""``avo evolve``: unattended mode (a backend agent per step) and its dashboard."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this module's commands to ``app`` (filled in by its issue)."""

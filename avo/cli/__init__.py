"""The ``avo`` command line. Each command group lives in its own module."""

from __future__ import annotations


def main() -> None:
    """Entry point of the ``avo`` console script."""
    from avo.cli.app import app

    app()

"""The ``avo`` command line. Each command group lives in its own module."""

from __future__ import annotations


def main() -> None:
    """Entry point of the ``avo`` console script."""
    import sys

    from avo.distribution import foreign_avo

    warning = foreign_avo()  # one metadata lookup: cheap enough for every start
    if warning:
        print(f"avo: warning: {warning}", file=sys.stderr)

    from avo.cli.app import for_args

    for_args(sys.argv[1:])()

"""``python -m avo`` runs the CLI."""

from avo.cli import main

main()

"""The typer application: registers the command modules. Heavy imports stay in commands."""

from __future__ import annotations

import copy
from collections.abc import Sequence

import typer
from typer.main import get_command_name

from avo.cli import evolve, examples, info, mcp_cmd, record, report, session, supervisor

app = typer.Typer(
    name="avo",
    help="AVO: a coding agent as the variation operator of an evolutionary search.\n\n"
    "Session mode: `avo start --target NAME`, edit work/, run avo-eval, `avo submit -m MSG`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

info.register(app)
session.register(app)
record.register(app)
app.add_typer(supervisor.app, name="supervisor")
evolve.register(app)
mcp_cmd.register(app)
report.register(app)
examples.register(app)


def for_args(args: Sequence[str]) -> typer.Typer:
    """``app`` narrowed to the one command ``args`` names (the whole app for `avo`, `avo --help`
    or a name it does not know, so click lists the commands).

    Before parsing, typer turns every registered command into a click command (signatures,
    type hints: ~50 ms for avo's twenty), though only one of them runs.
    """
    if not args or args[0].startswith("-"):
        return app
    commands = [c for c in app.registered_commands
                if (c.name or get_command_name(getattr(c.callback, "__name__", ""))) == args[0]]
    groups = [g for g in app.registered_groups if g.name == args[0]]
    if not commands and not groups:
        return app
    lean = copy.copy(app)
    lean.registered_commands, lean.registered_groups = commands, groups
    lean.callback()(_group)  # a group, like the whole app: one command alone would take no name
    return lean


def _group() -> None:
    """AVO: a coding agent as the variation operator of an evolutionary search."""

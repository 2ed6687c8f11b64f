"""The typer application: registers the command modules. Heavy imports stay in commands."""

from __future__ import annotations

import typer

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

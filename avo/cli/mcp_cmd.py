"""``avo mcp``: serve the session loop as MCP tools over stdio."""

from __future__ import annotations

import typer

from avo.cli.common import RunsDir, runs_root, user_errors


def register(app: typer.Typer) -> None:
    """Add ``avo mcp`` to ``app``."""

    @app.command()
    def mcp(runs_dir: RunsDir = None) -> None:
        """Serve the eleven avo_* tools over stdio for an MCP client (Claude Code, Codex, ...).

        Register it once, e.g. `claude mcp add avo -s user -- avo mcp`; see docs/DRIVING.md.
        """
        from avo.mcp_server import serve

        with user_errors():
            serve(runs_root(runs_dir))

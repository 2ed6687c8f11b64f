"""``avo supervisor brief|record``: the stall review (paper §3.3)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from avo.cli.common import RunRef, RunsDir, out, runs_root, say, user_errors

app = typer.Typer(help="Review a stalled run and record a redirect.", no_args_is_help=True)


@app.command()
def brief(run: RunRef = None, runs_dir: RunsDir = None) -> None:
    """Write and print the review prompt: whole trajectory, per-config trends, the ask."""
    from avo.engine import open_run, write_brief

    with user_errors():
        r = open_run(run, runs_root(runs_dir), check=False)  # checked under the lock
        path, text = write_brief(r)
        say(text)
        say(f"(brief saved to {path.relative_to(r.paths.root)})", err=True)


@app.command()
def record(
    text: Annotated[str | None, typer.Argument(help="The redirect text, or - for stdin.")] = None,
    file: Annotated[
        Path | None, typer.Option("--file", "-f", help="Read the redirect from a file (- = stdin).")
    ] = None,
    run: RunRef = None,
    runs_dir: RunsDir = None,
) -> None:
    """Store the redirect; it unblocks the run and is injected into the next step's prompt."""
    from avo.cli.session import read_text_arg
    from avo.engine import open_run, record_redirect

    with user_errors():
        r = open_run(run, runs_root(runs_dir), check=False)  # checked under the lock
        path = record_redirect(r, read_text_arg(text, file))
        out.print(f"redirect recorded ({path.relative_to(r.paths.root)}); `avo prompt` carries it for the next step")

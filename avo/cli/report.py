"""``avo plot`` and ``avo report``: the trajectory figure and a shareable HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from avo.cli.common import JsonFlag, RunRef, RunsDir, print_json, runs_root, say, user_errors

RunArg = Annotated[
    str | None,
    typer.Argument(metavar="RUN", help="Run id or path (default: the newest run).", show_default=False),
]


def _pick(positional: str | None, option: str | None) -> str | None:
    from avo.cli.common import Enclosing
    from avo.errors import AvoError

    if isinstance(option, Enclosing):  # only the current directory's run: a named one wins
        return positional if positional is not None else option
    if positional is not None and option is not None and positional != option:
        raise AvoError(f"two different runs given: {positional!r} and --run {option!r}; give one")
    return positional if positional is not None else option


def _wrote(run_id: str, path: Path, json_out: bool) -> None:
    if json_out:
        print_json({"run": run_id, "path": str(path.resolve())})
    else:
        say(f"wrote {path}")


def register(app: typer.Typer) -> None:
    """Add ``plot`` and ``report`` to ``app``."""

    @app.command()
    def plot(
        run_arg: RunArg = None,
        output: Annotated[Path, typer.Option("--output", "-o", help="Where to write: .png, .svg or .pdf.")] = Path(
            "trajectory.png"),
        x: Annotated[str, typer.Option("--x", help="x axis: 'version' (committed versions) or 'time' (wall time).")
                     ] = "version",
        attempts: Annotated[bool, typer.Option("--attempts", help="Also draw every rejected or failed attempt.")
                            ] = False,
        since: Annotated[str | None, typer.Option(
            "--since", help="Zoom on the committed versions from vN on (e.g. v1: hides the first jump).")] = None,
        log: Annotated[bool, typer.Option("--log", help="Scalar on a log axis.")] = False,
        run: RunRef = None,
        runs_dir: RunsDir = None,
        json_out: JsonFlag = False,
    ) -> None:
        """Plot the trajectory (the paper's Figure 5/6): running best, new bests, baselines, per-config panels."""
        from avo.engine import open_run
        from avo.errors import AvoError
        from avo.plot import plot_run

        with user_errors(json_out):
            first = None
            if since is not None:
                if not since.lstrip("v").isdigit():
                    raise AvoError(f"--since expects a version like v3, got {since!r}")
                first = int(since.lstrip("v"))
            from avo.cli.colony import colony_ref

            colony = colony_ref(_pick(run_arg, run), runs_dir)
            if colony is not None:  # every island's running best in one figure
                from avo.colony_report import plot_colony

                _wrote(colony.name, plot_colony(colony, output), json_out)
                return
            r = open_run(_pick(run_arg, run), runs_root(runs_dir))
            path = plot_run(r, output, x=x, attempts=attempts, since=first, log=log)
            _wrote(r.state.id, path, json_out)

    @app.command()
    def report(
        run_arg: RunArg = None,
        output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("report.html"),
        no_plot: Annotated[bool, typer.Option("--no-plot", help="Leave the plot out (no matplotlib needed).")
                           ] = False,
        run: RunRef = None,
        runs_dir: RunsDir = None,
        json_out: JsonFlag = False,
    ) -> None:
        """Write one self-contained HTML page for sharing a run: plot, lineage, diffs, attempts, supervisor, notes."""
        from avo.engine import open_run
        from avo.report import write_report

        with user_errors(json_out):
            from avo.cli.colony import colony_ref

            colony = colony_ref(_pick(run_arg, run), runs_dir)
            if colony is not None:  # the islands side by side, the migrations, who found what
                from avo.colony_report import write_colony_report

                _wrote(colony.name, write_colony_report(colony, output, plot=not no_plot), json_out)
                return
            r = open_run(_pick(run_arg, run), runs_root(runs_dir))
            path = write_report(r, output, plot=not no_plot)
            _wrote(r.state.id, path, json_out)

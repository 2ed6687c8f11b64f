"""``avo export`` and ``avo verify``: ship a run as an example and re-check it later."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from avo.cli.common import (
    ExecutorOpt,
    ExecutorOptionsOpt,
    RunRef,
    RunsDir,
    key_values,
    out,
    runs_root,
    say,
    user_errors,
)


def register(app: typer.Typer) -> None:
    @app.command()
    def export(
        output: Annotated[Path, typer.Option("--output", "-o", help="Folder to write the example into.")],
        run: RunRef = None,
        runs_dir: RunsDir = None,
        no_plot: Annotated[bool, typer.Option("--no-plot", help="Skip the plot and the HTML report.")] = False,
    ) -> None:
        """Write a run as a shippable example: lineage bundle, record, archive, plot, report."""
        from avo.cli.colony import colony_ref
        from avo.engine import open_run
        from avo.examples import export_run

        with user_errors():
            colony = colony_ref(run, runs_dir)
            if colony is not None:  # the colony's record and every island
                from avo.colony_report import export_colony

                for path in export_colony(colony, output, plot=not no_plot):
                    say(f"wrote {path}")
                return
            r = open_run(run, runs_root(runs_dir))
            for path in export_run(r, output, plot=not no_plot):
                say(f"wrote {path}")

    @app.command()
    def verify(
        example: Annotated[Path, typer.Argument(help="A folder written by `avo export`.")],
        version: Annotated[int | None, typer.Option("--version", help="Check vN instead of the best.")] = None,
        executor: ExecutorOpt = None,
        executor_option: ExecutorOptionsOpt = None,
        record_host: Annotated[bool, typer.Option(
            "--record-host", help="Measure the version --draws times here and keep the middle draw in the "
            "example's hosts.json as the reference for this CPU class (timed targets, another CPU than "
            "the record's).")] = False,
        draws: Annotated[int, typer.Option("--draws", help="Evaluations --record-host takes.")] = 3,
        fresh: Annotated[int, typer.Option(
            "--fresh", help="Also evaluate the version N times on fresh secrets (inputs nobody chose) and "
            "compare their median with the record within the noise band: whether the recorded draw was a "
            "fair one, not only what it scored.")] = 0,
    ) -> None:
        """Re-evaluate a shipped example's best version and compare with its recorded score.

        It replays the evaluation's own secret (the same games or inputs); with --fresh N it also
        measures N draws nobody chose, for a record whose producer you do not trust.

        The target's settings (a thread count, say) are the ones the run recorded at its start.
        A timed score measured on another class of CPU than the record's is compared with the
        example's reference for that class (hosts.json) when it has one.
        """
        from avo.colony import is_colony
        from avo.errors import AvoError
        from avo.examples import verify_example

        with user_errors():
            opts = key_values(executor_option, "--executor-option")
            if is_colony(example):  # a shipped colony: every island's best
                from avo.colony_report import verify_colony

                if version is not None or record_host or fresh:
                    flag = "--version N" if version is not None else "--record-host" if record_host else "--fresh N"
                    raise AvoError(f"{flag} names one run's version; verify one island with "
                                   f"`avo verify {example}/island-K {flag}`")
                results = verify_colony(example, executor=executor, executor_options=opts)
                for name, res in results:
                    say(f"{name}: {'OK' if res.ok else 'MISMATCH'}: v{res.version.n} — {res.detail}")
                    if res.host_note:
                        out.print(f"  note: {res.host_note}")
                if not results or not all(res.ok for _, res in results):
                    raise typer.Exit(1)
                return
            if record_host:
                from avo.examples import record_host_reference

                ref, path = record_host_reference(example, version=version, draws=draws, executor=executor,
                                                  executor_options=opts, progress=say)
                say(f"wrote {path}: v{ref.version} = {ref.scalar:.6g} on {ref.cpu} (the middle of "
                    f"{len(ref.draws)} draws)")
                return
            result = verify_example(example, version=version, executor=executor, executor_options=opts)
            if result.evaluator_changed:
                out.print("note: the installed target's evaluator differs from the one this run used")
            from avo.numbers import digits_to_separate, fmt_number

            verdict = "OK" if result.ok else "MISMATCH"
            say(f"{verdict}: v{result.version.n} — {result.detail}")
            if result.host_note:
                out.print(f"note: {result.host_note}")
            v = result.version
            pairs = [(v.scalar, result.scalar)] if result.scalar is not None else []
            pairs += [(x, result.metrics[k]) for k, x in v.metrics.items() if k in result.metrics]
            d = digits_to_separate([p for p in pairs if p[0] != p[1]] or [], floor=6)
            for label, scalar, metrics in (("recorded", v.scalar, v.metrics),
                                           ("measured", result.scalar, result.metrics)):
                vector = ", ".join(f"{k} {fmt_number(x, d)}" for k, x in metrics.items())
                say(f"  {label}: scalar {fmt_number(scalar, d)}" + (f" ({vector})" if vector else ""))
            fair = True
            if fresh:
                from avo.examples import verify_fresh

                drawn = verify_fresh(example, version=version, draws=fresh, executor=executor,
                                     executor_options=opts, progress=say)
                fair = drawn.ok
                say(f"{'OK' if fair else 'MISMATCH'} on fresh draws: v{drawn.version.n} — {drawn.detail}")
            if not result.ok or not fair:
                raise typer.Exit(1)

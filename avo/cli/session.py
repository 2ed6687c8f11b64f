"""Session-mode commands: start, prompt, eval, submit, revert, status, log, runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from avo.cli.common import (
    EXIT_ERROR,
    ExecutorOpt,
    ExecutorOptionsOpt,
    JsonFlag,
    RunRef,
    RunsDir,
    SandboxOpt,
    key_values,
    print_json,
    runs_root,
    say,
    user_errors,
)

if TYPE_CHECKING:
    from avo.engine import EvalReport, Run, SubmitOutcome


def _fmt(x: float | None) -> str:
    from avo.prompts import fmt_number

    return fmt_number(x)


def _print_lines(lines: list[str]) -> None:
    for line in lines:
        say(line)


def _print_eval(report: EvalReport, run: Run) -> None:
    from avo.summaries import eval_lines

    _print_lines(eval_lines(report, run))


def _print_submit(res: SubmitOutcome, run: Run) -> None:
    from avo.summaries import submit_lines

    _print_lines(submit_lines(res, run, via="cli"))


def register(app: typer.Typer) -> None:  # noqa: C901 - one function per command below
    @app.command()
    def start(
        target: Annotated[
            str | None, typer.Option("--target", "-t", help="Target name or folder with target.yaml.")
        ] = None,
        max_steps: Annotated[int | None, typer.Option("--max-steps", min=1, help="Step budget of this session.")
                             ] = None,
        quick: Annotated[bool, typer.Option("--quick", help="Use the target's cheap smoke evaluation.")] = False,
        stall_limit: Annotated[
            int | None,
            typer.Option("--stall-limit", min=1,
                         help="Steps without a new best before the supervisor (default: the target's, 3)."),
        ] = None,
        from_run: Annotated[
            str | None, typer.Option("--from", help="Seed from another run's version: RUN[:vN].")
        ] = None,
        no_prompt: Annotated[bool, typer.Option("--no-prompt", help="Do not print the first prompt.")] = False,
        sandbox: SandboxOpt = None,
        executor: ExecutorOpt = None,
        executor_option: ExecutorOptionsOpt = None,
        runs_dir: RunsDir = None,
        islands: Annotated[int | None, typer.Option(
            "--islands", min=2, help="Start a colony of N islands, one agent session driving each.")] = None,
        migration: Annotated[str | None, typer.Option(
            "--migration", help="Migration topology of the colony: ring (default), best or none.")] = None,
        migrate_every: Annotated[int | None, typer.Option(
            "--migrate-every", min=1, help="An island's steps between two migrant offers (default 3).")] = None,
    ) -> None:
        """Start a run: seed x_0, copy K, evaluate the seed, measure baselines, tag v0.

        With --islands N: a colony of N such runs; each session drives one (--run COLONY/island-K).
        """
        from avo.engine import start_run
        from avo.prompts import variation_prompt

        with user_errors():
            if islands is not None:
                from avo.colony import TOPOLOGIES, MigrationPolicy, island_specs
                from avo.errors import AvoError
                from avo.islands import start_colony

                if not target or from_run:
                    raise AvoError("a colony starts from a target's seed: give --target (not --from)")
                if (migration or "ring") not in TOPOLOGIES:
                    raise AvoError(f"--migration {migration!r}: choose one of {', '.join(TOPOLOGIES)}")
                policy = MigrationPolicy(topology=migration or "ring",  # type: ignore[arg-type]
                                         **({"every": migrate_every} if migrate_every else {}))
                folder = start_colony(target, runs_root(runs_dir), island_specs(islands, {}), policy,
                                      progress=lambda m: say(m, err=True), max_steps=max_steps, quick=quick,
                                      stall_limit=stall_limit, sandbox=sandbox, executor=executor,
                                      executor_options=key_values(executor_option, "--executor-option"))
                say(f"started colony {folder.name} at {folder} ({policy.describe()})")
                for k in range(1, islands + 1):
                    say(f"  island-{k}: avo prompt --run {folder}/island-{k}")
                return
            run = start_run(target, runs_root(runs_dir), max_steps=max_steps, quick=quick,
                            stall_limit=stall_limit, from_ref=from_run, progress=lambda m: say(m, err=True),
                            sandbox=sandbox, executor=executor,
                            executor_options=key_values(executor_option, "--executor-option"))
            v0 = run.state.versions[0]
            say(f"started {run.state.id}: x_0 = {_fmt(v0.scalar)} at {run.paths.root}", err=True)
            if not no_prompt:
                say(variation_prompt(run))

    @app.command()
    def prompt(run: RunRef = None, runs_dir: RunsDir = None) -> None:
        """Print the variation prompt for the next step (blocked while the supervisor is due)."""
        from avo.engine import _check_can_step, open_run
        from avo.prompts import variation_prompt

        with user_errors():
            r = open_run(run, runs_root(runs_dir))
            _check_can_step(r.state)
            say(variation_prompt(r))

    @app.command("eval")
    def eval_(
        run: RunRef = None,
        runs_dir: RunsDir = None,
        json_out: JsonFlag = False,
        quick: Annotated[bool, typer.Option(
            "--quick", help="A cheap screening in the target's quick mode (not comparable with the lineage).")] = False,
        executor: Annotated[str | None, typer.Option(
            "--executor", show_default=False, help="Run this evaluation on another executor than the run's.")] = None,
        executor_option: ExecutorOptionsOpt = None,
    ) -> None:
        """Evaluate the current work tree (no lineage change); exit status 1 when it fails the gate.

        The run's avo-eval calls this.
        """
        from avo.engine import evaluate_work, open_run

        with user_errors(json_out):
            r = open_run(run, runs_root(runs_dir), check=False)  # evaluate_work checks it under the lock
            opts = key_values(executor_option, "--executor-option") if executor_option else None
            report = evaluate_work(r, quick=quick, executor=executor, executor_options=opts)
            if json_out:
                ev = report.evaluation
                print_json({"correct": ev.scalar is not None, "scalar": ev.scalar, "metrics": ev.result.metrics,
                            "error": ev.result.error, "notes": ev.result.notes, "gain_vs_best": report.gain,
                            "best": f"v{report.compared_to.n}", "log": str(ev.log_path),
                            "screening": report.screening, "warning": report.warning})
            else:
                _print_eval(report, r)
        if report.evaluation.scalar is None:  # FAIL: a script (or an agent's shell) can tell from the status
            raise typer.Exit(EXIT_ERROR)

    @app.command()
    def submit(
        message: Annotated[str, typer.Option("--message", "-m", help="What changed and why.")],
        run: RunRef = None,
        runs_dir: RunsDir = None,
        json_out: JsonFlag = False,
    ) -> None:
        """Evaluate work/ and commit it iff it passes the gate and matches or beats the best."""
        from avo.engine import open_run
        from avo.engine import submit as do_submit

        with user_errors(json_out):
            r = open_run(run, runs_root(runs_dir), check=False)  # submit checks it under the lock
            steps_before = r.state.steps
            try:
                res = do_submit(r, message, progress=None if json_out else (lambda line: say(line, err=True)))
            except KeyboardInterrupt:  # late in a submit the step may be decided, work/ reset: say so
                from avo.summaries import interrupted_submit_line

                say(interrupted_submit_line(r, steps_before), err=True)
                raise
            from avo.migration import offer_if_due

            came = offer_if_due(r, progress=None if json_out else (lambda line: say(line, err=True)))
            if came is not None:
                r = open_run(r.paths.root, runs_root(runs_dir))
            if json_out:
                print_json({"step": res.step, "outcome": res.outcome, "reason": res.reason,
                            "version": f"v{res.version.n}" if res.version else None,
                            "scalar": res.evaluation.scalar, "metrics": res.evaluation.result.metrics,
                            "error": res.evaluation.result.error, "best": f"v{res.best.n}",
                            "best_scalar": res.best.scalar, "supervisor_due": res.supervisor_due,
                            "supervisor_reason": res.supervisor_reason, "notes": res.notes,
                            "log": str(res.evaluation.log_path), "steps_left": r.state.steps_left(),
                            "migrant": None if came is None else {
                                "donor": came.donor, "outcome": came.outcome, "reason": came.reason,
                                "origin": came.origin.model_dump() if came.origin else None,
                                "best": f"v{r.state.best_version.n}"}})
            else:
                _print_submit(res, r)
                if came is not None:
                    from avo.migration import offer_line

                    say(offer_line(came, r))

    @app.command()
    def revert(
        message: Annotated[str | None, typer.Option(
            "--message", "-m", help="Why the experiment is abandoned (recorded with its diff as an attempt).")] = None,
        run: RunRef = None,
        runs_dir: RunsDir = None,
    ) -> None:
        """Discard the uncommitted experiment in work/ (its diff is archived and recorded as an attempt)."""
        from avo.engine import open_run
        from avo.engine import revert as do_revert

        with user_errors():
            r = open_run(run, runs_root(runs_dir), check=False)  # revert checks it under the lock
            from avo.summaries import revert_line

            say(revert_line(do_revert(r, message), r))

    @app.command()
    def status(run: RunRef = None, runs_dir: RunsDir = None, json_out: JsonFlag = False) -> None:
        """Where the run stands: best, steps, supervisor, budget (a colony: every island side by side)."""
        from avo.cli.colony import colony_ref
        from avo.engine import open_run

        with user_errors(json_out):
            colony = colony_ref(run, runs_dir)
            if colony is not None:
                from avo.colony_view import colony_summary
                from avo.colony_view import status_lines as colony_lines

                if json_out:
                    print_json(colony_summary(colony))
                else:
                    _print_lines(colony_lines(colony))
                return
            r = open_run(run, runs_root(runs_dir))
            from avo.summaries import status_dict, status_lines, work_dirty

            data = status_dict(r, work_dirty(r))
            if json_out:
                print_json(data)
                return
            _print_lines(status_lines(data))

    @app.command()
    def log(
        run: RunRef = None,
        runs_dir: RunsDir = None,
        attempts: Annotated[bool, typer.Option(
            "--attempts", help="Every attempt instead, one line each: step, outcome (accepted, match, rejected, "
            "failed), the version it became, its scalar or error, and its message; a revert or an aborted "
            "submit (neither uses a step) as 'after step K: reverted' or 'after step K: submit aborted'.")] = False,
        every: Annotated[bool, typer.Option(
            "--all", help="Every version in the table (by default v0 and the newest 49, the rest summarised "
            "in one line).")] = False,
        json_out: JsonFlag = False,
    ) -> None:
        """The lineage table: accepted versions with per-config scores (--attempts: every attempt).

        With --json, the versions as recorded; with --json --attempts, every submit, revert, aborted
        submit and evaluation record of the trajectory.
        """
        from avo.cli.colony import colony_ref
        from avo.engine import open_run
        from avo.prompts import LOG_ROWS, lineage_table
        from avo.state import read_trajectory

        with user_errors(json_out):
            colony = colony_ref(run, runs_dir)
            if colony is not None:
                from avo.colony_view import colony_summary, log_lines

                if json_out:
                    print_json(colony_summary(colony))
                else:
                    _print_lines(log_lines(colony) or ["no steps yet"])
                return
            r = open_run(run, runs_root(runs_dir))
            from avo.record_check import describe_flags

            for flag in describe_flags(r.paths):  # lines `avo recover` found broken: named, not shown
                say(f"note: {flag}", err=True)
            if json_out:
                data: Any = [v.model_dump() for v in r.state.versions]
                if attempts:
                    kinds = ("submit", "revert", "aborted", "eval")
                    data = [x for x in read_trajectory(r.paths) if x.get("kind") in kinds]
                print_json(data)
                return
            if attempts:
                from avo.numbers import display_digits
                from avo.summaries import attempt_lines

                lines = attempt_lines(read_trajectory(r.paths), display_digits(r.state))
                _print_lines(lines or ["no attempts yet"])
                return
            say(lineage_table(r.state, rows=10**9 if every else LOG_ROWS))

    @app.command()
    def runs(
        runs_dir: RunsDir = None,
        json_out: JsonFlag = False,
        clean: Annotated[bool, typer.Option(
            "--clean", help="Remove the unfinished folders of failed or interrupted starts.")] = False,
    ) -> None:
        """Every run in the runs directory, oldest first, and any unfinished start."""
        from avo.engine import all_runs
        from avo.partials import list_partials, remove_stale

        with user_errors(json_out):
            root = runs_root(runs_dir)
            removed = remove_stale(root) if clean else []
            states = all_runs(root)
            partials = list_partials(root)
            from avo.colony import is_colony, load_colony
            from avo.errors import AvoError

            colonies = []
            for folder in sorted(root.iterdir()) if root.is_dir() else []:
                if is_colony(folder):
                    try:
                        colonies.append(load_colony(folder))
                    except AvoError as exc:  # any island's agent can write it: the other runs are still listed
                        say(f"note: {exc}", err=True)
            if json_out:
                print_json([{"run": s.id, "target": s.target.name, "versions": len(s.versions), "steps": s.steps,
                             "best": s.best_version.scalar, "created": s.created} for s in states]
                           + [{"colony": c.id, "target": c.target, "islands": c.names(), "created": c.created}
                              for c in colonies]
                           + [{"run": p.run_id, "path": str(p.path), "unfinished": True, "starting": p.alive}
                              for p in partials])
                return
            for p in removed:
                say(f"removed {p.path}")
            for c in colonies:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(c.created))
                say(f"{c.id:<40} {c.target:<16} {when}  colony of {len(c.islands)} islands "
                    f"(`avo status --run {c.id}`)")
            if not states and not partials and not colonies:
                say(f"no runs under {root.resolve()}")
            for s in states:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.created))
                say(f"{s.id:<40} {s.target.name:<16} {when}  steps {s.steps:>3}  "
                    f"v{s.best_version.n} = {_fmt(s.best_version.scalar)}")
            for p in partials:
                what = "still starting" if p.alive else "unfinished start (failed or interrupted)"
                log = f"; log {p.logs[-1]}" if p.logs else ""
                say(f"{p.path.name:<40} {what}{log}")
            if any(not p.alive for p in partials):
                say("`avo runs --clean` removes the unfinished ones (the next `avo start` does too)")


def read_text_arg(text: str | None, file: Path | None) -> str:
    """Text from an argument, a file, or ``-`` for stdin."""
    import sys

    if file is not None:
        return sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    if text == "-":
        return sys.stdin.read()
    return text or ""

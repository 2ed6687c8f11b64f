"""Session-mode commands: start, prompt, eval, submit, revert, status, log, runs."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from avo.cli.common import JsonFlag, RunRef, RunsDir, err, out, print_json, runs_root, user_errors

if TYPE_CHECKING:
    from avo.engine import EvalReport, Run, SubmitOutcome
    from avo.state import RunState


def _fmt(x: float | None) -> str:
    from avo.prompts import fmt_number

    return fmt_number(x)


def _metric_lines(metrics: dict[str, float], reference: dict[str, float], direction: str) -> list[str]:
    from avo.contract import gain

    lines = []
    for key, value in metrics.items():
        ref = reference.get(key)
        delta = f"  ({gain(value, ref, direction):+.1%})" if ref else ""  # type: ignore[arg-type]
        lines.append(f"  {key:<24} {_fmt(value):>12}{delta}")
    return lines


def _print_eval(report: EvalReport, run: Run) -> None:
    ev, best = report.evaluation, report.compared_to
    rel = ev.log_path.relative_to(run.paths.root) if ev.log_path.is_relative_to(run.paths.root) else ev.log_path
    if ev.scalar is None:
        out.print(f"FAIL  {ev.result.error}")
    else:
        out.print(f"PASS  scalar {_fmt(ev.scalar)}  ({report.gain:+.2%} vs best v{best.n} = {_fmt(best.scalar)})")
        for line in _metric_lines(ev.result.metrics, best.metrics, run.state.target.direction):
            out.print(line)
    if ev.result.notes:
        out.print(f"notes: {ev.result.notes.strip()}")
    out.print(f"log: {rel} ({ev.wall_s:.1f} s)")


def _print_submit(res: SubmitOutcome, run: Run) -> None:
    state = run.state
    for note in res.notes:
        out.print(f"note: {note}")
    if res.outcome == "accepted" and res.version is not None:
        kind = "new best" if res.version.new_best else "match"
        out.print(f"ACCEPTED as v{res.version.n} ({kind}): scalar {_fmt(res.version.scalar)} — {res.reason}")
    elif res.outcome == "failed":
        out.print(f"FAILED the gate; work/ reset to v{res.best.n}. Diff archived: "
                  f"{res.diff_path.relative_to(run.paths.root) if res.diff_path else '-'}")
        out.print(f"error: {res.evaluation.result.error}")
    else:
        out.print(f"REJECTED: scalar {_fmt(res.evaluation.scalar)} — {res.reason}; work/ reset to v{res.best.n}. "
                  f"Diff archived: {res.diff_path.relative_to(run.paths.root) if res.diff_path else '-'}")
    if res.evaluation.result.metrics:
        prev = res.best.metrics if res.outcome != "accepted" else state.versions[max(0, res.best.n - 1)].metrics
        for line in _metric_lines(res.evaluation.result.metrics, prev, state.target.direction):
            out.print(line)
    if res.evaluation.result.notes:
        out.print(f"notes: {res.evaluation.result.notes.strip()}")
    left = state.steps_left()
    out.print(f"best: v{res.best.n} = {_fmt(res.best.scalar)}; step {res.step}"
              + (f" of {state.options.max_steps} ({left} left)" if left is not None else ""))
    if res.supervisor_due:
        out.print(f"SUPERVISOR DUE: {res.supervisor_reason}. Next: `avo supervisor brief`, answer it, "
                  "then `avo supervisor record -f answer.md`.")
    else:
        out.print("next: `avo prompt` for the next step")


def status_dict(run: Run, dirty: bool | None) -> dict[str, Any]:
    from avo.contract import gain

    s: RunState = run.state
    best, seed = s.best_version, s.seed_version
    return {
        "run": s.id,
        "path": str(run.paths.root),
        "target": s.target.name,
        "direction": s.target.direction,
        "steps": s.steps,
        "max_steps": s.options.max_steps,
        "steps_left": s.steps_left(),
        "versions": len(s.versions),
        "best": {"version": f"v{best.n}", "scalar": best.scalar, "metrics": best.metrics,
                 "gain_over_seed": gain(best.scalar, seed.scalar, s.target.direction), "message": best.message},
        "seed": {"scalar": seed.scalar},
        "baselines": {b.name: b.scalar for b in s.baselines},
        "steps_since_best": s.steps_since_best,
        "failures_in_row": s.failures_in_row,
        "evaluations": s.evaluations,
        "supervisor": {"due": s.supervisor.due, "reason": s.supervisor.reason,
                       "redirect_pending": s.supervisor.pending_redirect is not None},
        "work_dirty": dirty,
        "quick": s.options.quick,
        "origin": s.origin,
        "usage": s.usage,
    }


def register(app: typer.Typer) -> None:  # noqa: C901 - one function per command below
    @app.command()
    def start(
        target: Annotated[str | None, typer.Option("--target", "-t", help="Target name or folder with target.yaml.")] = None,
        max_steps: Annotated[int | None, typer.Option("--max-steps", help="Step budget of this session.")] = None,
        quick: Annotated[bool, typer.Option("--quick", help="Use the target's cheap smoke evaluation.")] = False,
        stall_limit: Annotated[int | None, typer.Option("--stall-limit", help="Steps without a new best before the supervisor (default: the target's, 3).")] = None,
        from_run: Annotated[str | None, typer.Option("--from", help="Seed from another run's version: RUN[:vN].")] = None,
        no_prompt: Annotated[bool, typer.Option("--no-prompt", help="Do not print the first prompt.")] = False,
        runs_dir: RunsDir = None,
    ) -> None:
        """Start a run: seed x_0, copy K, evaluate the seed, measure baselines, tag v0."""
        from avo.engine import start_run
        from avo.prompts import variation_prompt

        with user_errors():
            run = start_run(target, runs_root(runs_dir), max_steps=max_steps, quick=quick,
                            stall_limit=stall_limit, from_ref=from_run, progress=lambda m: err.print(m))
            v0 = run.state.versions[0]
            err.print(f"started {run.state.id}: x_0 = {_fmt(v0.scalar)} at {run.paths.root}")
            if not no_prompt:
                out.print(variation_prompt(run), markup=False)

    @app.command()
    def prompt(run: RunRef = None, runs_dir: RunsDir = None) -> None:
        """Print the variation prompt for the next step (blocked while the supervisor is due)."""
        from avo.engine import _check_can_step, open_run
        from avo.prompts import variation_prompt

        with user_errors():
            r = open_run(run, runs_root(runs_dir))
            _check_can_step(r.state)
            out.print(variation_prompt(r), markup=False)

    @app.command("eval")
    def eval_(run: RunRef = None, runs_dir: RunsDir = None, json_out: JsonFlag = False) -> None:
        """Evaluate the current work tree (no lineage change). The run's avo-eval calls this."""
        from avo.engine import evaluate_work, open_run

        with user_errors():
            r = open_run(run, runs_root(runs_dir))
            report = evaluate_work(r)
            if json_out:
                ev = report.evaluation
                print_json({"correct": ev.scalar is not None, "scalar": ev.scalar, "metrics": ev.result.metrics,
                            "error": ev.result.error, "notes": ev.result.notes, "gain_vs_best": report.gain,
                            "best": f"v{report.compared_to.n}", "log": str(ev.log_path)})
            else:
                _print_eval(report, r)

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

        with user_errors():
            r = open_run(run, runs_root(runs_dir))
            res = do_submit(r, message)
            if json_out:
                print_json({"step": res.step, "outcome": res.outcome, "reason": res.reason,
                            "version": f"v{res.version.n}" if res.version else None,
                            "scalar": res.evaluation.scalar, "metrics": res.evaluation.result.metrics,
                            "error": res.evaluation.result.error, "best": f"v{res.best.n}",
                            "best_scalar": res.best.scalar, "supervisor_due": res.supervisor_due,
                            "supervisor_reason": res.supervisor_reason, "notes": res.notes})
            else:
                _print_submit(res, r)

    @app.command()
    def revert(run: RunRef = None, runs_dir: RunsDir = None) -> None:
        """Discard the uncommitted experiment in work/ (its diff is archived in rejected/)."""
        from avo.engine import open_run
        from avo.engine import revert as do_revert

        with user_errors():
            r = open_run(run, runs_root(runs_dir))
            path = do_revert(r)
            best = r.state.best_version
            if path is None:
                out.print(f"nothing to revert; work/ is v{best.n}")
            else:
                out.print(f"reverted work/ to v{best.n}; the discarded diff is {path.relative_to(r.paths.root)}")

    @app.command()
    def status(run: RunRef = None, runs_dir: RunsDir = None, json_out: JsonFlag = False) -> None:
        """Where the run stands: best, steps, supervisor, budget."""
        from avo.engine import open_run

        with user_errors():
            r = open_run(run, runs_root(runs_dir))
            try:
                dirty: bool | None = r.lineage.is_dirty(r.state.best_version.sha)
            except Exception:
                dirty = None
            data = status_dict(r, dirty)
            if json_out:
                print_json(data)
                return
            b = data["best"]
            out.print(f"run {data['run']}  target {data['target']} ({data['direction']})")
            out.print(f"  best {b['version']} = {_fmt(b['scalar'])} ({b['gain_over_seed']:+.1%} over x_0 = "
                      f"{_fmt(data['seed']['scalar'])}) — {b['message']}")
            budget = f"/{data['max_steps']}" if data["max_steps"] else ""
            out.print(f"  steps {data['steps']}{budget}, {data['versions']} versions, "
                      f"{data['steps_since_best']} since the last new best, {data['evaluations']} evaluations")
            if data["baselines"]:
                out.print("  baselines: " + ", ".join(f"{k} {_fmt(v)}" for k, v in data["baselines"].items()))
            sup = data["supervisor"]
            if sup["due"]:
                out.print(f"  SUPERVISOR DUE: {sup['reason']}")
            elif sup["redirect_pending"]:
                out.print("  a supervisor redirect is pending for the next step")
            if dirty:
                out.print("  work/ has uncommitted changes (submit or revert them)")

    @app.command()
    def log(
        run: RunRef = None,
        runs_dir: RunsDir = None,
        attempts: Annotated[bool, typer.Option("--attempts", help="Every step, not only accepted versions.")] = False,
        json_out: JsonFlag = False,
    ) -> None:
        """The lineage: accepted versions with scores (and every attempt with --attempts)."""
        from avo.engine import open_run
        from avo.prompts import lineage_table
        from avo.state import read_trajectory

        with user_errors():
            r = open_run(run, runs_root(runs_dir))
            if json_out:
                data: Any = [v.model_dump() for v in r.state.versions]
                if attempts:
                    data = [x for x in read_trajectory(r.paths) if x.get("kind") in ("submit", "eval")]
                print_json(data)
                return
            if attempts:
                for x in read_trajectory(r.paths):
                    if x.get("kind") == "submit":
                        tag = f" v{x['version']}" if x.get("version") is not None else ""
                        what = _fmt(x.get("scalar")) if x.get("scalar") is not None else (x.get("error") or "")[:80]
                        out.print(f"step {x['step']:>3} {x['outcome']:<8}{tag:<5} {what:<12} {x.get('message', '')}")
                return
            out.print(lineage_table(r.state, rows=10**9), markup=False)

    @app.command()
    def runs(runs_dir: RunsDir = None, json_out: JsonFlag = False) -> None:
        """Every run in the runs directory, oldest first."""
        from avo.engine import all_runs

        with user_errors():
            states = all_runs(runs_root(runs_dir))
            if json_out:
                print_json([{"run": s.id, "target": s.target.name, "versions": len(s.versions), "steps": s.steps,
                             "best": s.best_version.scalar, "created": s.created} for s in states])
                return
            if not states:
                out.print(f"no runs under {runs_root(runs_dir).resolve()}")
            for s in states:
                when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.created))
                out.print(f"{s.id:<40} {s.target.name:<16} {when}  steps {s.steps:>3}  "
                          f"v{s.best_version.n} = {_fmt(s.best_version.scalar)}")


def read_text_arg(text: str | None, file: Path | None) -> str:
    """Text from an argument, a file, or ``-`` for stdin."""
    import sys

    if file is not None:
        return sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    if text == "-":
        return sys.stdin.read()
    return text or ""

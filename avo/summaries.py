"""Compact text summaries of what the engine did, shared by the CLI and the MCP server.

Both drivers show an agent the same lines for an evaluation, a submit, a revert and the
run's status, so the two ways of driving a run cannot drift apart. Only the "what to do
next" hints differ: the CLI names commands, the MCP server names tools.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from avo.contract import gain
from avo.errors import AvoError
from avo.numbers import display_digits, fmt_number, fmt_pct

if TYPE_CHECKING:
    from avo.engine import EvalReport, Run, SubmitOutcome

Via = Literal["cli", "mcp"]

_NEXT_STEP: dict[Via, str] = {
    "cli": "next: `avo prompt` for the next step",
    "mcp": "next: call avo_next_step for the next step",
}
_BUDGET_SPENT: dict[Via, str] = {
    "cli": "The step budget is spent: this run is done. To go on, `avo start --from {run}` continues from its best.",
    "mcp": "The step budget is spent: this run is done. To go on, call avo_start_run(from_run='{run}').",
}
_SUPERVISOR: dict[Via, str] = {
    "cli": "Next: `avo supervisor brief`, answer it, then `avo supervisor record -f answer.md`.",
    "mcp": "Next: call avo_supervisor_brief, answer it, then avo_record_supervisor with your answer.",
}


def _rel(path: Path, run: Run) -> Path:
    return path.relative_to(run.paths.root) if path.is_relative_to(run.paths.root) else path


def metric_lines(
    metrics: dict[str, float], reference: dict[str, float], direction: str, digits: int | None = None
) -> list[str]:
    """One line per config: its value and its change against ``reference``."""
    lines = []
    for key, value in metrics.items():
        ref = reference.get(key)
        delta = f"  ({fmt_pct(gain(value, ref, direction))})" if ref else ""  # type: ignore[arg-type]
        lines.append(f"  {key:<24} {fmt_number(value, digits):>12}{delta}")
    return lines


def eval_lines(report: EvalReport, run: Run) -> list[str]:
    """What one evaluation of the work tree measured, against the best version."""
    ev, best = report.evaluation, report.compared_to
    d = display_digits(run.state)
    lines = []
    if ev.scalar is None:
        lines.append(f"FAIL  {ev.result.error}")
    elif report.screening or report.gain is None:
        cheap = ("the target's cheap mode" if run.state.target.has_quick
                 else "this target declares no quick mode, so this was a full evaluation run as a screening")
        lines.append(f"PASS  scalar {fmt_number(ev.scalar, d)}  (quick screening: {cheap}, "
                     "not comparable with the lineage's full scores)")
        lines.extend(metric_lines(ev.result.metrics, {}, run.state.target.direction, d))
    else:
        from avo.policy import is_tie

        tie = " — a tie: submitting it would be a match, not a new best" if is_tie(
            ev.scalar, best.scalar, run.state.target.tie_tolerance) else ""
        lines.append(f"PASS  scalar {fmt_number(ev.scalar, d)}  ({fmt_pct(report.gain, 2)} vs best v{best.n} = "
                     f"{fmt_number(best.scalar, d)}){tie}")
        lines.extend(metric_lines(ev.result.metrics, best.metrics, run.state.target.direction, d))
    if ev.result.notes:
        lines.append(f"notes: {ev.result.notes.strip()}")
    if report.warning:
        lines.append(f"WARNING: {report.warning}")
    lines.append(f"log: {_rel(ev.log_path, run)} ({ev.wall_s:.1f} s)")
    return lines


def finish_lines(run_id: str, via: Via = "cli") -> list[str]:
    """Where to look once a run (or a session's last step) is over."""
    if via == "mcp":
        return [f"see the result: call avo_plot(run='{run_id}') for the trajectory figure; "
                f"`avo report {run_id}` writes an HTML page"]
    return [f"see the result: `avo plot {run_id}` (the trajectory figure) and `avo report {run_id}` (an HTML page)"]


def submit_lines(res: SubmitOutcome, run: Run, via: Via = "cli") -> list[str]:
    """What a submit decided, the score vector, the budget, and what to do next."""
    state = run.state
    d = display_digits(state)
    lines = [f"note: {note}" for note in res.notes]
    diff = _rel(res.diff_path, run) if res.diff_path else "-"
    if res.outcome == "accepted" and res.version is not None:
        kind = "new best" if res.version.new_best else "match, not a new best"
        lines.append(f"ACCEPTED as v{res.version.n} ({kind}): scalar {fmt_number(res.version.scalar, d)} "
                     f"— {res.reason}")
    elif res.outcome == "failed":
        # the error says why: the gate, or an evaluator that refused to time or score the candidate
        lines.append(f"FAILED (not scored); work/ reset to v{res.best.n}. Diff archived: {diff}")
        lines.append(f"error: {res.evaluation.result.error}")
    else:
        lines.append(f"REJECTED: scalar {fmt_number(res.evaluation.scalar, d)} — {res.reason}; work/ reset to "
                     f"v{res.best.n}. Diff archived: {diff}")
    if res.evaluation.result.metrics:
        ref = res.best if res.outcome != "accepted" else state.versions[max(0, res.best.n - 1)]
        m = res.medians
        if m is not None and m.candidate and m.best:
            # The figures the decision above stood on: both sides at the medians of their
            # interleaved draws (the first draw alone can sit on either side of the band).
            lines.append(f"per config, the median of {m.candidate_draws} draws of this candidate vs the median "
                         f"of {m.best_draws} draws of v{ref.n}, interleaved:")
            lines.extend(metric_lines(m.candidate, m.best, state.target.direction, d))
        else:
            lines.append(f"per config, this evaluation vs v{ref.n} as recorded:")
            lines.extend(metric_lines(res.evaluation.result.metrics, ref.metrics, state.target.direction, d))
    if res.evaluation.result.notes:
        lines.append(f"notes: {res.evaluation.result.notes.strip()}")
    if res.outcome != "accepted":  # where to look before trying again
        lines.append(f"log: {_rel(res.evaluation.log_path, run)}")
    left = state.steps_left()
    lines.append(f"best: v{res.best.n} = {fmt_number(res.best.scalar, d)}; step {res.step}"
                 + (f" of {state.options.max_steps} ({left} left)" if left is not None else ""))
    if left == 0:  # `avo prompt` would only say "blocked"
        lines.append(_BUDGET_SPENT[via].format(run=state.id))
        lines.extend(finish_lines(state.id, via))
    elif res.supervisor_due:
        lines.append(f"SUPERVISOR DUE: {res.supervisor_reason}. {_SUPERVISOR[via]}")
    else:
        lines.append(_NEXT_STEP[via])
    return lines


def interrupted_submit_line(run: Run, steps_before: int) -> str:
    """What a submit interrupted (ctrl-c, a tool's timeout) had done by then: nothing, a decision
    its journal holds (the next command finishes recording it), or the whole step."""
    from avo.run_key import read_verified
    from avo.state import load_state, read_trajectory

    step = steps_before + 1
    try:
        journal = read_verified(run.paths, run.paths.journal) if run.paths.journal.exists() else None
        record = journal.get("record") if journal is not None else None
        if not isinstance(record, dict) or record.get("step") != step:
            if load_state(run.paths, validate=False).steps < step:
                draws = journal.get("draws") if journal is not None and journal.get("step") == step else None
                had = f"the {len(draws)} draw(s) it had" if isinstance(draws, list) else "what it had measured"
                return (f"interrupted before step {step}'s decision: the next avo command records step {step} as "
                        f"interrupted, with {had} (a submit that began its evaluation uses its step however "
                        "it ends); work/ keeps the candidate")
            record = next((r for r in reversed(read_trajectory(run.paths))
                           if r.get("kind") == "submit" and r.get("step") == step), None)
            done = "was recorded"
        else:
            done = "was decided; the next avo command finishes recording it"
    except (OSError, AvoError):
        return "interrupted; `avo status` shows where the run stands"
    if not isinstance(record, dict):
        return f"interrupted after step {step} was recorded; `avo status` shows it"
    outcome = record.get("outcome")
    if outcome == "accepted":
        what = f"accepted as v{record.get('version')}"
    else:
        where = f", the candidate's diff is in {record['diff']}" if isinstance(record.get("diff"), str) else ""
        what = f"{outcome}: work/ is reset to v{record.get('best_before')}{where}"
    return f"interrupted after its decision: step {step} {what}; it {done}"


def revert_line(path: Path | None, run: Run) -> str:
    """What a revert did."""
    best = run.state.best_version
    if path is None:
        return f"nothing to revert; work/ is v{best.n}"
    from avo.step_record import kept_files_folder

    kept = kept_files_folder(path)
    also = (f"; files only its own .gitignore ignored (untracked under v{best.n}'s) were moved to {_rel(kept, run)}"
            if kept.is_dir() else "")
    return (f"reverted work/ to v{best.n}; the discarded diff is {_rel(path, run)} "
            f"(recorded as an attempt: `avo log --attempts`){also}")


def work_dirty(run: Run) -> bool | None:
    """Whether work/ differs from the best version (``None`` when git cannot tell)."""
    try:
        return run.lineage.is_dirty(run.state.best_version.sha)
    except Exception:
        return None


def _killed_step(run: Run) -> int | None:
    """The step of a submit killed during its evaluation, which the next command records (or ``None``)."""
    from avo.run_key import read_verified

    journal = read_verified(run.paths, run.paths.journal) if run.paths.journal.exists() else None
    if journal is None or journal.get("kind") != "started" or journal.get("step") != run.state.steps + 1:
        return None
    return run.state.steps + 1


def status_dict(run: Run, dirty: bool | None) -> dict[str, Any]:
    """Where the run stands, as data (``avo status --json``)."""
    from avo.chain import RECOVERED
    from avo.record_check import record_repairs
    from avo.state import read_trajectory, run_busy

    s = run.state
    busy = run_busy(run.paths)
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
        "busy": busy,
        "killed_step": None if busy else _killed_step(run),
        "quick": s.options.quick,
        "origin": s.origin,
        "usage": s.usage,
        "digits": display_digits(s),
        "matches": sum(1 for v in s.versions[1:] if not v.new_best),
        "repairs": record_repairs(read_trajectory(run.paths, mentioning=f'"{RECOVERED}"'.encode(), data=run.viewed)),
    }


# Notes of `avo recover` that changed what the policy compares with or what the run holds.
_CHANGES = ("re-measurements ", "best v", "dropped ", "not adopted", "the supervisor is due", "step ")


def _subject(message: str, width: int = 100) -> str:
    """A message's first line, cut to ``width`` (the whole message is in `avo log` and --json)."""
    first = message.strip().partition("\n")[0]
    return first if len(first) <= width else first[:width - 1] + "…"


def status_lines(data: dict[str, Any]) -> list[str]:
    """Where the run stands, as the few lines a person or an agent reads."""
    b = data["best"]
    d = data.get("digits")
    lines = [
        f"run {data['run']}  target {data['target']} ({data['direction']})",
        f"  best {b['version']} = {fmt_number(b['scalar'], d)} ({fmt_pct(b['gain_over_seed'])} over x_0 = "
        f"{fmt_number(data['seed']['scalar'], d)}) — {_subject(b['message'])}",
    ]
    budget = f"/{data['max_steps']}" if data["max_steps"] else ""
    matches = f" ({data['matches']} of them matches, not new bests)" if data.get("matches") else ""
    lines.append(f"  steps {data['steps']}{budget}, {data['versions']} versions{matches}, "
                 f"{data['steps_since_best']} since the last new best, {data['evaluations']} evaluations")
    if data["baselines"]:
        lines.append("  baselines: " + ", ".join(f"{k} {fmt_number(v, d)}" for k, v in data["baselines"].items()))
    sup = data["supervisor"]
    if sup["due"]:
        lines.append(f"  SUPERVISOR DUE: {sup['reason']}")
    elif sup["redirect_pending"]:
        lines.append("  a supervisor redirect is pending for the next step")
    if data.get("repairs"):
        reps = data["repairs"]
        aside, gaps = sum(r["set_aside"] for r in reps), sum(r.get("gaps", 0) for r in reps)
        lines.append(f"  RECORD REPAIRED: `avo recover` ran {len(reps)} time(s) (the last after step "
                     f"{reps[-1]['step']}): {aside} trajectory line(s) edited, inserted or copied by hand set aside, "
                     f"{gaps} place(s) where lines were deleted; what each repair changed is in `avo log` and the "
                     "report")
        # (an earlier repair's notes, kept by the next one after its record was edited: "(line N, ...) ")
        changed = [n for r in reps for n in r["notes"] if n.rpartition(":) ")[2].startswith(_CHANGES)]
        lines += [f"    {n}" for n in changed[-3:]]
    if data.get("killed_step"):
        lines.append(f"  the submit of step {data['killed_step']} was killed during its evaluation: the next avo "
                     "command records it as interrupted (its step is used)")
    if data.get("busy"):
        # A submit's confirmation takes minutes; "submit or revert them" would be wrong advice then.
        lines.append("  an avo command is working on this run now (a submit and its re-measurements, or a revert); "
                     "work/ is its candidate: wait for it to end")
    elif data["work_dirty"]:
        lines.append("  work/ has uncommitted changes (submit or revert them)")
    return lines


def attempt_lines(records: list[dict[str, Any]], digits: int | None = None) -> list[str]:
    """Every attempt from the trajectory, one line each (``avo log --attempts``).

    Columns: step, outcome (accepted, match, rejected, failed or interrupted), the version it
    became, its scalar (or the error), and the message. A revert used no step (nor did a submit
    aborted before 2026-12-06): their lines say which step they came after (``after step 0:
    reverted, no step used — ...``).
    """
    from avo.attempts import after_step

    lines = []
    for x in records:
        if x.get("kind") == "submit":
            outcome = "match" if x["outcome"] == "accepted" and x.get("new_best") is False else x["outcome"]
            tag = f" v{x['version']}" if x.get("version") is not None else ""
            what = fmt_number(x.get("scalar"), digits) if x.get("scalar") is not None else (x.get("error") or "")[:80]
            lines.append(f"step {x['step']:>3} {outcome:<8}{tag:<5} {what:<12} {x.get('message', '')}")
        elif x.get("kind") == "revert" and x.get("diff"):
            lines.append(f"{after_step(x)}: reverted, no step used — {x.get('message') or '(no message)'}"
                         f"  [{x['diff']}]")
        elif x.get("kind") == "aborted":
            where = f"  [{x['diff']}]" if x.get("diff") else ""
            lines.append(f"{after_step(x)}: submit aborted, no step used — {x.get('message') or '(no message)'}: "
                         f"{str(x.get('error') or '')[:80]}{where}")
    return lines

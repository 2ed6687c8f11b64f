"""What a step writes to the record, however it ends: its counters, its journal, its start.

A submit (``avo.engine.submit``) and the recovery of one that was killed (``avo.recovery``)
both end a step through these: the same counters moved, the same trajectory lines, the same
diffs in ``rejected/``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avo.errors import AvoError
from avo.evaluation import Evaluation
from avo.lineage import diff_fingerprint
from avo.regular_files import write_json_atomic
from avo.state import RunPaths, RunState, append_trajectory, save_state

if TYPE_CHECKING:
    from avo.engine import Run

STARTED = "submit_started"  # the trajectory's kind for a submit whose evaluation has begun
NOT_RUN = "submit_not_run"  # ... and for one whose first job was refused before it ran anything
# A git argument taken from a record is only ever an object id (never an option such as --output=FILE).
OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
BEST_DRAW = re.compile(r"confirm\d+-best")  # the label engine._confirm_runs gives a re-measurement of the best
BEST_DRAWN = "best_drawn"  # the trajectory's kind for a draw of the best a submit finished


def write_journal(paths: RunPaths, body: dict[str, Any], *, synced: bool = True) -> None:
    """What a submit still has to write if it is killed from here, signed with the run's key.

    ``synced=False``: not forced to disk (a started submit's: its trajectory line, synced, is what
    stands for it after a power cut; only the draws it had would be lost)."""
    from avo.run_key import signed

    write_json_atomic(paths.journal, signed(paths, body), sync="all" if synced else "none")


def unused_name(path: Path) -> Path:
    """``path``, or ``NAME-2.diff``, ``NAME-3.diff`` ...: the first not taken (a dangling link takes
    one too), so two archives made in one second both stay."""
    n, free = 1, path
    while os.path.lexists(free):
        n += 1
        free = path.with_name(f"{path.stem}-{n}{path.suffix}")
    return free


class Started:
    """A submit whose evaluation has begun: from here it ends as a step, whatever ends it.

    Its start is a signed trajectory line (kind :data:`STARTED`) and its journal (kind
    ``started``) is rewritten, signed, after each draw, so a submit killed before its decision
    (to draw again, hoping for luck) is recorded by the next command as a step, interrupted,
    with the draws it had. Until 2026-12-06 it left nothing but its logs, and an unchanged
    candidate was accepted at +19.85 % after 40 kills (docs/SECURITY.md, round eight).
    """

    def __init__(self, run: Run, body: dict[str, Any]) -> None:
        self.run, self.body = run, body
        self.draws: list[dict[str, Any]] = []
        # Its usage is counted once, by the record that ends the step (spend adds up every "usage").
        line = {key: value for key, value in body.items() if key != "usage"}
        append_trajectory(run.paths, {"kind": STARTED, "id": f"started{body['step']}", **line})
        self._save()

    def cancel(self, why: str) -> None:
        """Settle a start whose first job was refused before it ran anything (its sandbox cannot
        start on that machine, its evaluator differs from the record): no step, nothing measured."""
        append_trajectory(self.run.paths, {"kind": NOT_RUN, "id": f"not-run{self.body['step']}",
                                           "step": self.body["step"], "error": why})
        self.run.paths.journal.unlink(missing_ok=True)

    def draw(self, ev: Evaluation) -> None:
        """Keep ``ev`` in the journal (the draws a killed submit had are its record's); a draw of
        the best also on the chain, as a signed line: the journal can be deleted or an older copy
        of it put back after a kill (its finished draws of the best then counted nowhere: red
        team, round ten), a line of the chain cannot go without a trace."""
        from avo.draws import draw_record

        drawn = draw_record(ev)
        self.draws.append(drawn)
        self._save()
        if ev.label and BEST_DRAW.fullmatch(ev.label) and ev.scalar is not None:
            step = self.body["step"]
            append_trajectory(self.run.paths, {"kind": BEST_DRAWN, "id": f"step{step}-{ev.label}", "step": step,
                                               "best_before": self.body.get("best_before"), "draw": drawn})

    def _save(self) -> None:
        write_journal(self.run.paths, {"kind": "started", **self.body, "draws": self.draws}, synced=False)


def count_step(state: RunState, step: int, usage: dict[str, Any] | None) -> None:
    """What every step moves, whatever its outcome."""
    state.steps = step
    state.evaluations += 1
    _usage_add(state, usage)
    if state.supervisor.redirect_step is not None and state.supervisor.redirect_step <= step:
        state.supervisor.pending_redirect = None
        state.supervisor.redirect_step = None


def count_not_accepted(state: RunState, step: int, outcome: str, fingerprint: str) -> None:
    """What a rejected or failed step moves (the counters the supervisor watches)."""
    state.failures_in_row = state.failures_in_row + 1 if outcome == "failed" else 0
    state.steps_since_best += 1
    update_supervisor(state, fingerprint, outcome)
    state.rejected_fingerprints.setdefault(fingerprint, step)


def update_supervisor(state: RunState, fingerprint: str | None, outcome: str) -> None:
    sup = state.supervisor
    if sup.due:
        return
    if fingerprint and outcome != "accepted" and fingerprint in state.rejected_fingerprints:
        sup.due, sup.reason = True, (
            f"unproductive cycle: this candidate repeats the diff of rejected step "
            f"{state.rejected_fingerprints[fingerprint]}")
    elif state.failures_in_row >= state.options.failure_limit:
        sup.due, sup.reason = True, f"unproductive cycle: {state.failures_in_row} failed evaluations in a row"
    elif min(state.steps_since_best, state.steps - sup.stall_since) >= state.options.stall_limit:
        stalled = min(state.steps_since_best, state.steps - sup.stall_since)
        since = " since the last redirect" if stalled < state.steps_since_best else ""
        sup.due, sup.reason = True, f"stalled: {stalled} steps without a new best{since}"


def _usage_add(state: RunState, usage: dict[str, Any] | None) -> None:
    for key in ("input_tokens", "output_tokens", "cost_usd", "wall_s"):
        if usage and isinstance(usage.get(key), (int, float)):
            state.usage[key] = state.usage.get(key, 0) + float(usage[key])


# -- opening and recovery ------------------------------------------------------------------


def record_interrupted(run: Run, body: dict[str, Any], draws: list[dict[str, Any]], why: str,
                       *, counted: bool = False) -> str:
    """Record a submit that ended before its decision as step ``body["step"]``, interrupted.

    It used a step (its draws were seen: a kill must cost what a rejection costs) and counts
    for nothing else but the best's re-measurements it finished: no decision, no failure. Its
    diff goes to rejected/; work/ keeps the candidate (a reset would destroy edits made since).
    Returns the sentence that says so, for the caller's message. ``counted``: run.json already
    counts the step (a command recording it was killed before its record): only the record is
    written.
    """
    paths, state, lineage = run.paths, run.state, run.lineage
    step = body["step"]
    best_before = body.get("best_before")
    base = state.versions[best_before].sha if isinstance(best_before, int) and 0 <= best_before < len(
        state.versions) else state.best_version.sha
    header = f"# step {step} interrupted before its decision: {body.get('message')}\n# {' '.join(why.split())}\n"
    measured = body.get("measured")
    try:
        if not (isinstance(measured, str) and OBJECT_ID.fullmatch(measured)):
            raise AvoError("no tree")  # a git argument, never anything but an object id
        diff = lineage.diff(base, measured)
    except AvoError:  # its snapshot is gone from work/.git (pruned): work/ still holds the candidate
        diff = ""
        header += "# the measured tree is gone from work/.git; work/ keeps the candidate\n"
    path = unused_name(paths.rejected / f"step{step:04d}-interrupted.diff")
    write_json_atomic(path, header + diff, sync="file", own=1)
    record: dict[str, Any] = {
        "kind": "submit", "id": f"step{step}", "step": step, "outcome": "interrupted",
        "message": body.get("message"), "tree": body.get("tree"), "scalar": None, "metrics": {},
        "error": why, "notes": None, "best_before": best_before, "reason": why,
        "wall_s": round(sum(d.get("wall_s") or 0.0 for d in draws), 3),
        "log": draws[0].get("log") if draws else None, "draws": draws,
        "fingerprint": diff_fingerprint(diff) if diff else None, "sandbox": state.sandbox, "new_best": False,
        "diff": str(path.relative_to(paths.root))}
    for key in ("migrant", "usage"):
        if body.get(key):
            record[key] = body[key]
    # The best's finished re-measurements count however the submit ended: left out, an agent
    # could kill each confirmation whose draws of the best came out high and let the low ones
    # count, lowering the reference every first look compares with (red team, round ten).
    best_draws = _best_draws(run.paths, step, draws)
    draws = draws + [d for d in best_draws if d not in draws]
    record["draws"] = draws
    if best_draws and isinstance(best_before, int):
        record["confirm"] = {"best": [d["scalar"] for d in best_draws], "best_draws": best_draws}
        if not counted:
            state.remeasured.setdefault(best_before, []).extend(d["scalar"] for d in best_draws)
    since = body.get("time")
    if isinstance(since, (int, float)) and paths.logs.is_dir():
        # A draw that finished as the submit was killed is in its log before the journal has it:
        # name every log written since the start (the agent's to edit, so for reading only).
        record["logs"] = sorted(p.name for p in paths.logs.iterdir()
                                if p.is_file() and not p.is_symlink() and p.stat().st_mtime >= since - 1)[:50]
    was_due = state.supervisor.due
    if not counted:
        count_step(state, step, body.get("usage") if isinstance(body.get("usage"), dict) else None)
        state.steps_since_best += 1  # no failure (failures_in_row stays), no rejected diff to repeat
        update_supervisor(state, None, "interrupted")
        save_state(paths, state)
    append_trajectory(paths, record)
    paths.journal.unlink(missing_ok=True)
    if state.supervisor.due and not was_due:
        append_trajectory(paths, {"kind": "supervisor_due", "step": step, "reason": state.supervisor.reason})
    kept = (f"; the {len(best_draws)} re-measurement(s) of v{best_before} it finished count"
            if "confirm" in record else "")
    return (f"step {step} is recorded as interrupted, with the {len(draws)} draw(s) it had and its diff "
            f"({record['diff']}; `avo log --attempts`): a submit that began its evaluation uses its step "
            f"however it ends; work/ keeps the candidate{kept}")


def _best_draws(paths: RunPaths, step: int, draws: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The draws of the best that step ``step`` finished: in ``draws`` (its journal's) and on the
    chain (:data:`BEST_DRAWN` lines avo signed), each label once."""
    from avo.chain import parse
    from avo.run_key import trajectory_signatures
    from avo.state import trajectory_bytes

    def usable(d: Any) -> bool:
        if not isinstance(d, dict):
            return False
        scalar = d.get("scalar")
        return (BEST_DRAW.fullmatch(str(d.get("label"))) is not None and isinstance(scalar, (int, float))
                and not isinstance(scalar, bool))

    out = {d["label"]: d for d in draws if usable(d)}
    data = trajectory_bytes(paths) if paths.trajectory.exists() else b""
    if BEST_DRAWN.encode() in data:
        signatures = trajectory_signatures(paths, data)
        for line in data.split(b"\n"):
            if BEST_DRAWN.encode() not in line:
                continue
            r = parse(line)
            if (r is not None and r.get("kind") == BEST_DRAWN and r.get("step") == step and usable(r.get("draw"))
                    and signatures.counts(line)):
                out.setdefault(r["draw"]["label"], r["draw"])
    return list(out.values())


def kept_files_folder(diff_path: Path) -> Path:
    """Where a discarded candidate's files go that only its own ``.gitignore`` ignored (beside its diff)."""
    return diff_path.with_name(diff_path.stem + "-ignored-files")


def archive_late_edits(run: Run, step: int, measured: str, notes: list[str], since: str | None = None,
                        *, after_kill: bool = False) -> bool:
    """Archive in rejected/ how work/ differs from ``measured`` (edits made while a candidate was
    evaluated), before a reset replaces work/; whether nothing was written since ``since``.

    ``since``: work/'s :meth:`~avo.lineage.Lineage.work_signature` from before ``measured`` was
    snapshotted; unchanged, nothing was written since, and the second snapshot is skipped.
    ``after_kill``: the submit was killed before its reset (the edits may be from after the kill).
    """
    lineage, paths = run.lineage, run.paths
    if since is not None and lineage.work_signature() == since:
        return True
    measured = lineage.tree_of(measured)
    late_tree = lineage.snapshot_tree()
    late = lineage.diff(measured, late_tree) if late_tree != measured else ""
    if late.strip():
        when, what = (("since-measured", "since the candidate was measured (its submit was killed before "
                       "work/ was reset)") if after_kill else ("during-evaluation", "during the evaluation"))
        late_path = paths.rejected / f"step{step:04d}-edited-{when}.diff"
        write_json_atomic(late_path, f"# step {step}: edits made to work/ {what}, not part of the candidate\n" + late,
                          sync="file", own=1)
        notes.append(f"work/ was edited {what}; those edits are in {late_path.relative_to(paths.root)}")
    return False


def version_tags(state: RunState) -> dict[str, str]:
    return {f"v{v.n}": v.sha for v in state.versions}

"""Bring a run back to a consistent state: after a kill, after hands in its folder.

:func:`recover` runs under the lock at the start of every command that changes a run: it
finishes or records a submit that was killed half-way (its journal, or its start line on the
trajectory), sets a torn trajectory line aside, and restores what avo owns (work/.git, the run's
folders, the tags). :func:`restore_record` is ``avo recover``: it rebuilds run.json from avo's
private backup when the record check refuses it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avo.errors import AvoError
from avo.lineage import foreign_git_dir
from avo.prompts import fmt_number
from avo.record_check import check_record
from avo.regular_files import regain_folder
from avo.state import (
    RunPaths,
    RunState,
    append_trajectory,
    heal_trajectory,
    load_state,
    read_trajectory,
    run_lock,
    save_state,
    trajectory_bytes,
)
from avo.step_record import (
    NOT_RUN,
    OBJECT_ID,
    STARTED,
    archive_late_edits,
    count_not_accepted,
    count_step,
    record_interrupted,
    version_tags,
)

if TYPE_CHECKING:
    from avo.engine import Run

KILLED = "the submit was killed before its decision"


def _kill_orphan_evaluator(paths: RunPaths) -> None:
    from avo.runner import process_start_time

    pid_file = paths.private / "child.pid"
    if not pid_file.exists():
        return
    try:
        pid, _, started = pid_file.read_text().strip().partition(" ")
        now = process_start_time(int(pid))
        # A live process with that number but another start time is not our evaluator: the
        # number was handed out again after the evaluator ended. Never kill that group.
        if not (started and now is not None and now != started):
            os.killpg(int(pid), signal.SIGKILL)
    except (ValueError, ProcessLookupError, PermissionError):
        pass
    pid_file.unlink(missing_ok=True)


def _clean_scratch(paths: RunPaths) -> None:
    """Under the lock no other command is running: its evaluator and temporary indexes are stale."""
    _kill_orphan_evaluator(paths)
    shutil.rmtree(paths.private / "eval", ignore_errors=True)
    for stale in paths.private.glob("index-*"):
        stale.unlink(missing_ok=True)


def _regain_run_folders(paths: RunPaths, notes: list[str]) -> None:
    """The run's folders avo writes into are real folders of the run: one the agent replaced by
    a link (to .avo/, or anywhere) is renamed aside, not followed, and made again."""
    root = os.open(paths.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for folder in (paths.rejected, paths.logs, paths.supervisor):
            note = regain_folder(root, folder.name)
            if note:
                notes.append(note)
    finally:
        os.close(root)


def _refuse_linked_trajectory(paths: RunPaths) -> None:
    """Refuse, before anything is evaluated, a trajectory avo would append to through a link:
    one that is a symlink or has a second name (a hard link elsewhere, in work/.git say)."""
    try:
        st = paths.trajectory.lstat()
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode) or st.st_nlink > 1:
        what = "a symlink" if stat.S_ISLNK(st.st_mode) else f"a file with {st.st_nlink} names (hard links)"
        raise AvoError(f"{paths.trajectory} is {what}; avo appends the record only to its own file. Remove the "
                       "other name (or put the run's own file back) and try again; nothing was changed")


def _regain_git_dir(run: Run, notes: list[str]) -> bool:
    """Make work/.git avo's own repository again; True when it had to be re-created."""
    paths, state, lineage = run.paths, run.state, run.lineage
    foreign = foreign_git_dir(paths.work)
    if foreign:
        aside = lineage.displace_git_dir(paths.private / "displaced")
        notes.append(f"{foreign}: avo never writes through it. Moved it aside, untouched, to "
                     f"{aside.relative_to(paths.root)} and restored v0..v{len(state.versions) - 1} from avo's "
                     "private backup (the files in work/ are kept as the candidate)")
    if os.path.lexists(paths.work / ".git"):
        if lineage.repair_head():
            notes.append("work/.git/HEAD was not a file (a pipe?); it names the branch main again")
        return False
    if not lineage.restore_from(paths.backup):
        raise AvoError(
            f"{paths.work}/.git is gone: the lineage repository was deleted. The record in "
            f"{paths.run_json.name} still lists v0..v{len(state.versions) - 1}, but their files lived "
            "there; restore work/.git from a backup, or start a new run (agents must not touch .git)."
        )
    if not foreign:
        notes.append(f"work/.git was deleted; restored v0..v{len(state.versions) - 1} from avo's private "
                     "backup (the files in work/ are kept as the candidate)")
    return True


def _journal_problem(paths: RunPaths, state: RunState, journal: dict[str, Any] | None) -> str | None:
    """Why a journal was not written by avo for the submit in flight (``None``: it was)."""
    if journal is None:
        return "it is not signed with the run's key"
    step, record, diff_path = journal.get("step"), journal.get("record"), journal.get("diff_path")
    if journal.get("kind") == "started":
        if not isinstance(step, int) or step > state.steps + 1 or not isinstance(journal.get("draws"), list):
            return f"it is not step {state.steps + 1}'s started submit"
        return None
    if journal.get("kind") not in ("accept", "reject") or not isinstance(step, int) or not isinstance(record, dict):
        return "it is not a submit's journal"
    if record.get("kind") != "submit" or record.get("step") != step or step not in (state.steps, state.steps + 1):
        return f"its record is not step {state.steps + 1}'s submit"
    if diff_path is not None and (paths.rejected.is_symlink()
                                  or Path(str(diff_path)).resolve().parent != paths.rejected.resolve()):
        return "its diff is not in rejected/"  # a rejected/ re-pointed since would lead elsewhere
    return None


def _finish_journal(run: Run, notes: list[str]) -> None:
    """Finish a submit that was killed half-way (its journal says how far it got): a step, always.

    Killed during its evaluation, it is recorded as interrupted with the draws its journal
    kept; killed after its decision, the decision is recorded, except an acceptance killed
    before its commit point (run.json), recorded as interrupted (its commit is let go).
    """
    from avo.run_key import read_verified

    paths, state, lineage = run.paths, run.state, run.lineage
    journal = read_verified(paths, paths.journal)
    problem = _journal_problem(paths, state, journal)
    if problem is not None or journal is None:
        # A journal avo did not write would have its record appended to the trajectory as
        # avo's own (re-measurements that move the policy's reference, a supervisor answer)
        # and its diff path deleted: nothing in it is applied, and it is kept for reading.
        aside = paths.private / f"ignored-journal-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}.json"
        paths.journal.replace(aside)
        notes.append(f"ignored {paths.journal.relative_to(paths.root)}: {problem}, so it was not written by avo "
                     f"for this run; nothing in it was applied (kept as {aside.relative_to(paths.root)})")
        return
    step = journal["step"]
    if journal["kind"] == "started":
        if step == state.steps + 1:  # else a copy put back after its step was recorded
            notes.append(record_interrupted(run, journal, journal["draws"], f"{KILLED} (during its evaluation)"))
        paths.journal.unlink(missing_ok=True)
        return
    record = journal["record"]
    sha, n = journal.get("sha"), record.get("version")
    reached = isinstance(sha, str) and n == state.best and state.best_version.sha == sha
    if journal["kind"] == "accept" and not reached:
        # Killed before its commit point (run.json): its commit is let go. Also when the step is
        # already counted: a command that recorded it so was killed before its record, and the
        # journal's own "accepted" record must not be appended for a version run.json never held
        # (`avo recover` then adopted a commit pushed under it: red team, round ten).
        counted = state.steps >= step
        if counted and _recorded(paths, step):
            paths.journal.unlink(missing_ok=True)  # a copy put back after its step was recorded
            return
        lineage.move_branch(state.best_version.sha)  # the work tree keeps the candidate
        body = {key: record.get(key) for key in ("step", "message", "tree", "best_before", "migrant", "usage")}
        confirmed = record.get("confirm") or {}
        draws = [d for key in ("candidate_draws", "best_draws") if isinstance(confirmed.get(key), list)
                 for d in confirmed[key]]
        why = (f"the submit was accepted at {fmt_number(record.get('scalar'))} but killed before its version "
               "was written to run.json; submit it again")
        notes.append(record_interrupted(run, {**body, "measured": journal.get("measured", record.get("tree"))},
                                         draws, why, counted=counted))
        return
    newly_due = False  # the supervisor made due by this step: its line follows the record
    if state.steps < step:  # a rejection killed before its commit point: it was decided, so it is recorded
        was_due = state.supervisor.due
        count_step(state, step, record.get("usage") if isinstance(record.get("usage"), dict) else None)
        count_not_accepted(state, step, str(record.get("outcome")), str(record.get("fingerprint")))
        # Its confirmation's draws of the best are in its record: run.json counts them as submit does.
        best_runs = (record.get("confirm") or {}).get("best")
        if isinstance(best_runs, list) and best_runs and isinstance(record.get("best_before"), int):
            state.remeasured.setdefault(record["best_before"], []).extend(best_runs)
        save_state(paths, state)
        newly_due = state.supervisor.due and not was_due
    # Its record in the trajectory: the submit was finished (the reset came before the
    # record), and this journal is one put back since (a copy of a genuine one, signed):
    # resetting again would delete what the agent wrote in work/ after it.
    recorded = _recorded(paths, step)
    if journal["kind"] == "accept":
        _finish_accepted(run, journal, notes)
    elif not recorded:
        # Edits made after the kill (the agent went on working) are in no diff: archive them.
        # The snapshot measured (its record names the code only, without .avo/); older journals: the record's.
        measured = journal.get("measured", record.get("tree"))
        if isinstance(measured, str) and lineage.is_dirty(state.best_version.sha):
            try:
                archive_late_edits(run, step, measured, notes, after_kill=True)
            except AvoError:  # the candidate's tree is gone from work/.git: all of work/ against the best
                archive_late_edits(run, step, state.best_version.sha, notes, after_kill=True)
        lineage.reset_hard(state.best_version.sha)
    if not recorded:
        append_trajectory(paths, record)
        if newly_due:
            append_trajectory(paths, {"kind": "supervisor_due", "step": step, "reason": state.supervisor.reason})
    notes.append(f"finished recording step {step} interrupted after its decision")
    paths.journal.unlink(missing_ok=True)


def _open_start(data: bytes, key: bytes | None, steps: int) -> dict[str, Any] | None:
    """The start line in ``data`` (a trajectory) of step ``steps + 1``, if nothing of avo's settled
    it: a ``submit`` or :data:`NOT_RUN` line of that step signed with the run's ``key``.

    Read back from the end through lines of anyone's: a line appended by hand after the start
    (unsigned, adopted as past the head) must not hide it, nor one signed with a key put in the
    run's key's place for one command. It stops at avo's record of an earlier step (a start
    of step ``steps + 1`` comes after it), so a run's whole trajectory is never read. A start
    line is taken whoever wrote it: one written by hand only costs the run a step (its fields
    are checked before use).
    """
    from avo.chain import follows, parse
    from avo.run_key import line_signed

    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end - 1) + 1
        line = data[start:end].rstrip(b"\n")
        end = start
        if not any(k in line for k in (b'"submit"', STARTED.encode(), NOT_RUN.encode())):
            continue
        record = parse(line)
        if record is None:
            continue
        kind, step = record.get("kind"), record.get("step")
        if kind == STARTED and step == steps + 1:
            return record
        # This step settled, or an earlier one recorded (no start of this step before it): a line
        # avo signed, where avo wrote it (one of an earlier step copied to the end chains to its
        # old neighbour, not to the line before it here).
        settles = kind in ("submit", NOT_RUN) and isinstance(step, int) and step <= steps + 1
        before = data[data.rfind(b"\n", 0, start - 1) + 1:start] if start else None
        if settles and before is not None and line_signed(key, line) and follows(record, before):
            return None
    return None


def _recorded(paths: RunPaths, step: int) -> bool:
    """Whether the trajectory holds a ``submit`` record of ``step``."""
    return any(r.get("kind") == "submit" and r.get("step") == step for r in read_trajectory(paths))


def _start_set_aside(paths: RunPaths, steps: int) -> dict[str, Any] | None:
    """The start line of step ``steps + 1`` (signed by avo) that a repair set aside, when no line
    of avo's settles that step: a submit began there."""
    from avo.chain import RECOVERED, acknowledged, line_hash, parse, split_lines
    from avo.run_key import trajectory_signatures

    data = trajectory_bytes(paths)
    lines = split_lines(data)[0]
    signatures = trajectory_signatures(paths, data)
    records = [parse(line) if STARTED.encode() in line or b'"submit' in line or RECOVERED.encode() in line else None
               for line in lines]
    if any(r is not None and r.get("kind") in ("submit", NOT_RUN) and r.get("step") == steps + 1
           and signatures.counts(line) for r, line in zip(records, lines, strict=True)):
        return None
    for n, sha in acknowledged(records, lines, signatures.counts).items():
        r = records[n - 1] if 0 < n <= len(lines) else None
        if (r is not None and r.get("kind") == STARTED and r.get("step") == steps + 1
                and line_hash(lines[n - 1]) == sha and signatures.counts(lines[n - 1])):
            return r
    return None


def _tail_damage(paths: RunPaths, state: RunState) -> str | None:
    """What ``avo recover`` would drop after the newest line of avo's that settles a step (where a
    killed submit's start line would be): lines cut from the end, a torn last line, a line broken
    or edited there. ``None``: nothing there is lost."""
    from avo.chain import split_lines, verify
    from avo.run_key import line_signed, run_key, trajectory_signatures

    data = trajectory_bytes(paths)
    lines, torn = split_lines(data)
    report = verify(data, state.chain, trajectory_signatures(paths, data).counts)
    if report.head_problem and state.chain is not None and state.chain.count > len(lines):
        return report.head_problem
    key = run_key(paths, create=False)
    settled = 0  # the line number of the newest signed submit or not-run line
    for n in range(len(lines), 0, -1):
        line = lines[n - 1]
        if (b'"submit"' in line or NOT_RUN.encode() in line) and line_signed(key, line) and n not in report.problems:
            settled = n
            break
    named = {**report.problems, **report.gaps}
    broken = sorted(n for n in named if n > settled)
    if broken:
        return f"line {broken[0]} {named[broken[0]]}"
    if torn.strip():
        return "its last line was cut off"
    return None


def _finish_started_line(run: Run, notes: list[str]) -> bool:
    """Record as interrupted a submit whose start is on the trajectory and nothing settled, with no
    journal (deleted by hand, to leave no trace of a killed submit); whether it did."""
    from avo.run_key import line_signed, run_key

    data = run.checked if run.checked is not None else trajectory_bytes(run.paths)
    key = run_key(run.paths, create=False)
    if key is not None and line_signed(key, data.partition(b"\n")[0]) is False:
        key = None  # not the key the run's first line was signed with: put there since, it vouches for nothing
    line = _open_start(data, key, run.state.steps)
    if line is None:
        return False
    # Only what can be checked is kept (the line may be anyone's): object ids, a message, a version.
    body: dict[str, Any] = {"step": line["step"], "message": str(line.get("message"))[:2000],
                            "time": line.get("time") if isinstance(line.get("time"), (int, float)) else None}
    for name in ("tree", "measured"):
        body[name] = line[name] if isinstance(line.get(name), str) and OBJECT_ID.fullmatch(line[name]) else None
    best_before = line.get("best_before")
    body["best_before"] = best_before if isinstance(best_before, int) and 0 <= best_before < len(
        run.state.versions) else run.state.best
    notes.append(record_interrupted(run, body, [], f"{KILLED}, and its journal ({run.paths.journal.name}) was "
                                                    "deleted: the draws it had are not known (logs/ may hold them)"))
    return True


def _finish_accepted(run: Run, journal: dict[str, Any], notes: list[str]) -> None:
    """The backup copy of an accepted submit killed after its commit point: only the commit the
    signed journal names, and only when run.json's best is that commit. run.json is not checked
    yet here, and the backup is what the record is checked against and rebuilt from: a commit
    of the agent's written into run.json by hand must never be copied into it by avo."""
    state, lineage = run.state, run.lineage
    sha, n = journal.get("sha"), journal["record"].get("version")
    if isinstance(sha, str) and n == state.best and state.best_version.sha == sha:
        lineage.move_branch(sha)
        lineage.backup(run.paths.backup, sha)
        return
    vouched = f"commit {sha[:12]}" if isinstance(sha, str) else "no commit (an older avo wrote it)"
    notes.append(f"the interrupted submit's journal names {vouched} for v{n}, but run.json's best is "
                 f"v{state.best} ({state.best_version.sha[:12]}): nothing was copied into avo's private backup")


def _restore_commits(run: Run, notes: list[str]) -> None:
    paths, state, lineage = run.paths, run.state, run.lineage
    gone = set(lineage.missing_commits([v.sha for v in state.versions]))
    if gone and lineage.restore_from(paths.backup):
        gone = set(lineage.missing_commits([v.sha for v in state.versions]))
        if not gone:
            notes.append("restored accepted commits deleted from work/.git from avo's private backup")
    missing = [f"v{v.n}" for v in state.versions if v.sha in gone]
    if missing:
        raise AvoError(
            f"the lineage in {paths.work} lost accepted commits {missing} (objects deleted). "
            "The record in run.json still lists them; restore work/.git from a backup."
        )


def _check_locked(run: Run) -> None:
    """The record check under the lock, on the trajectory read once and kept as ``run.checked``."""
    run.checked = trajectory_bytes(run.paths)
    check_record(run.paths, run.state, locked=True, data=run.checked)


def recover(run: Run) -> list[str]:
    """Bring the run to a consistent state after a kill; restore tags an agent moved.

    Called under the lock at the start of every mutating command. Refuses (RecordError) a
    record that disagrees with the lineage. Returns what it did.
    """
    notes: list[str] = []
    paths, state = run.paths, run.state
    _clean_scratch(paths)
    _regain_run_folders(paths, notes)
    _refuse_linked_trajectory(paths)
    if not (paths.backup / "HEAD").exists():
        # Nothing can be restored or checked without it: the check says so, before work/.git is looked at.
        _check_locked(run)
    recreated = _regain_git_dir(run, notes)
    notes += heal_trajectory(paths, state)
    interrupted = paths.journal.exists()
    if not interrupted:  # a record checked before avo acts on it (with a journal: after)
        _check_locked(run)
    if recreated:
        run.lineage.move_branch(state.best_version.sha)  # the files in work/ stay: they are the candidate
    if interrupted:
        _finish_journal(run, notes)
    _restore_commits(run, notes)
    if interrupted:
        _check_locked(run)
    if _finish_started_line(run, notes):
        _check_locked(run)
    repaired = run.lineage.set_tags(version_tags(state))
    if repaired:
        notes.append(f"restored tags from the record: {', '.join(repaired)}")
    return notes


def restore_record(run: Run) -> list[str]:
    """``avo recover``: rebuild run.json's versions and best from avo's private backup.

    The backup holds what was committed, so it wins over run.json and work/.git. Trajectory
    lines that are broken or disagree are named in an appended ``recovered`` record (never
    deleted). Also does what every command's :func:`recover` does. Returns what it did.
    """
    from avo.record_rebuild import rebuild_record

    with run_lock(run.paths):
        run.state = state = load_state(run.paths, validate=False)
        if not state.versions:
            raise AvoError(f"{run.paths.run_json} lists no versions; there is no run to recover")
        state.best = len(state.versions) - 1 if not 0 <= state.best < len(state.versions) else state.best
        notes: list[str] = []
        _clean_scratch(run.paths)
        _regain_run_folders(run.paths, notes)
        recreated = _regain_git_dir(run, notes)
        steps, damage = state.steps, _tail_damage(run.paths, state)  # before the heal sets a torn tail aside
        notes += heal_trajectory(run.paths, state)
        if run.paths.journal.exists():
            _finish_journal(run, notes)
        run.checked = None  # the trajectory as it is now (what an earlier check read may predate the journal's record)
        _finish_started_line(run, notes)
        if not (run.paths.backup / "HEAD").exists():
            run.lineage.backup(run.paths.backup, state.versions[-1].sha)
            notes.append("avo's private backup was missing; re-created it from work/.git, which the agent "
                         "can write: check `git log` there before trusting this run")
        changed = rebuild_record(run.paths, state)  # its `recovered` record names the damage first
        run.state = state = load_state(run.paths)
        if damage is not None and state.steps == steps:
            # What this repair dropped could be the start of a submit whose draws were seen (a kill,
            # then its start line cut or broken): it costs the step the kill would have.
            body = {"step": steps + 1, "message": "(unknown: the trajectory's end was damaged)", "tree": None,
                    "measured": None, "best_before": state.best}
            notes.append(record_interrupted(run, body, [], f"the trajectory's end was damaged after step {steps} "
                                                            f"({damage}): a submit may have begun there"))
        elif (start := _start_set_aside(run.paths, state.steps)) is not None:
            # Its start line moved or edited, then set aside: the kill it stood for still costs its
            # step (an earlier step's lines moved after it did that for free: red team, round ten).
            body = {"step": state.steps + 1, "message": start.get("message"), "tree": start.get("tree"),
                    "measured": start.get("measured"),
                    "best_before": start["best_before"] if isinstance(start.get("best_before"), int) else state.best}
            notes.append(record_interrupted(run, body, [], f"{KILLED}; its start line was set aside by `avo recover`"))
        _restore_commits(run, notes)
        if recreated or run.lineage.head() != state.best_version.sha:
            run.lineage.move_branch(state.best_version.sha)  # the files in work/ stay: the candidate
        repaired = run.lineage.set_tags(version_tags(state))
        if repaired:
            notes.append(f"restored tags from the record: {', '.join(repaired)}")
        check_record(run.paths, state, locked=True)
        if not changed:
            notes.append("the record agrees with avo's private backup; run.json's versions were kept")
        return notes + changed


# -- start -----------------------------------------------------------------------------------

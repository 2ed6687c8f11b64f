"""A submit killed before its decision uses its step (red team, round eight).

Until 2026-12-06 a submit SIGKILLed before its decision was journalled recorded no step and no
attempt, and each draw's result was in logs/ before the decision: an agent could kill every
submit whose first draw disappointed and submit the same tree again, and an unchanged candidate
was accepted at +19.85 % after 40 kills on a noisy target. Now the start of a submit's
evaluation is a signed trajectory line and a signed journal that keeps every draw as it
finishes; whatever ends the submit, its step is used and recorded with the draws it had.

Every kill here is a real SIGKILL of a real `avo submit` process, at a chosen point of avo's
own code (a wrapper that kills its own process when that function is called the n-th time).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from avo.engine import Run, open_run, start_run, submit
from avo.errors import AvoError
from avo.state import load_state, read_trajectory
from avo.step_record import STARTED
from tests.conftest import set_constants
from tests.test_noise import banks_target, set_model

KILL = """
import os, signal, sys
import avo.engine as engine

name, nth, message, run = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
original = getattr(engine, name)
calls = 0

def wrapper(*args, **kwargs):
    global calls
    calls += 1
    if calls == nth:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args, **kwargs)

setattr(engine, name, wrapper)
from avo.cli import main
sys.argv = ["avo", "submit", "-m", message, "--run", run]
main()
"""


def killed_submit(run_root: Path, at: str, nth: int, message: str = "same tree, again") -> None:
    """Run `avo submit` in a child process that SIGKILLs itself at the ``nth`` call of ``engine.<at>``."""
    proc = subprocess.run([sys.executable, "-c", KILL, at, str(nth), message, str(run_root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr


def journal_of(run: Run) -> dict[str, Any]:
    """The body of the run's journal, checked to be signed by avo."""
    from avo.run_key import read_verified

    body = read_verified(run.paths, run.paths.journal)
    assert body is not None, "the journal is missing or not signed with the run's key"
    return body


def submits(run: Run) -> list[dict[str, Any]]:
    return [r for r in read_trajectory(run.paths) if r.get("kind") == "submit"]


@pytest.fixture
def noisy_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs_root: Path, core_plugins: None) -> Run:
    run = start_run(str(banks_target(tmp_path, monkeypatch, 3)), runs_root)
    set_model(run.paths.work, 1.02)  # inside the band: a first draw, then confirmation pairs
    return run


def test_killing_a_submit_after_its_first_draw_costs_the_step_and_keeps_the_draw(
        noisy_run: Run, runs_root: Path) -> None:
    run = noisy_run
    for attempt in (1, 2):  # the re-roll: kill when the first draw is in, submit the same tree again
        killed_submit(run.paths.root, "_finish", 2)  # the 2nd draw's result arrives: the 1st is journalled
        journal = journal_of(run)
        assert journal["kind"] == "started" and journal["step"] == attempt
        assert [d["label"] for d in journal["draws"]] == [f"step{attempt}"]
    # The second kill's command recorded the first: step 1 used, its draw kept.
    state = load_state(run.paths)
    assert state.steps == 1
    after = submit(open_run(run.paths.root, runs_root), "same tree, third time")
    assert any("step 2 is recorded as interrupted, with the 1 draw(s) it had" in n for n in after.notes), after.notes
    assert after.step == 3
    records = submits(run)
    assert [(r["step"], r["outcome"]) for r in records][:2] == [(1, "interrupted"), (2, "interrupted")]
    for r in records[:2]:
        assert r["scalar"] is None and len(r["draws"]) == 1 and r["draws"][0]["scalar"] is not None
        assert r["error"] == r["reason"] == "the submit was killed before its decision (during its evaluation)"
        assert "QUALITY = 1.02" in (run.paths.root / r["diff"]).read_text()
    # The starts are on the record too, each signed like every line avo appends.
    started = [r for r in read_trajectory(run.paths) if r.get("kind") == STARTED]
    assert [r["step"] for r in started] == [1, 2, 3]
    assert load_state(run.paths).steps == 3
    assert not run.paths.journal.exists()


def test_a_killed_submit_whose_journal_was_deleted_is_still_recorded(noisy_run: Run, runs_root: Path) -> None:
    # `rm .avo/pending.json` after the kill: the signed start line at the trajectory's end says
    # a submit began; deleting it too breaks the chain run.json holds.
    run = noisy_run
    killed_submit(run.paths.root, "_finish", 2)
    run.paths.journal.unlink()
    out = submit(open_run(run.paths.root, runs_root), "same tree, again")
    assert out.step == 2
    first = submits(run)[0]
    assert first["step"] == 1 and first["outcome"] == "interrupted" and first["draws"] == []
    assert "its journal (pending.json) was deleted" in first["reason"]


def _killed_before_commit_point(toy: Path, runs_root: Path, x: float, kind: str) -> Run:
    """A toy run whose first submit (X = ``x``) was killed after its decision's journal (``kind``)."""
    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=x)
    killed_submit(run.paths.root, "save_state", 1)
    assert journal_of(run)["kind"] == kind
    return run


def test_a_rejection_killed_before_its_commit_point_is_recorded_as_the_rejection(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Killed between its decision's journal and run.json (where an agent watching the journal
    # would kill a rejection): it was decided, so it is recorded as decided, work/ reset.
    run = _killed_before_commit_point(toy, runs_root, 0, "reject")
    set_constants(run.paths.work, x=6)  # the agent goes on working after the kill
    with pytest.raises(AvoError, match="nothing to submit"):  # work/ was reset to v0 first
        submit(open_run(run.paths.root, runs_root), "X=6")
    [first] = submits(run)
    assert (first["step"], first["outcome"]) == (1, "rejected")
    assert "X = 0" in (run.paths.rejected / "step0001-rejected.diff").read_text()
    assert "X = 6" in (run.paths.rejected / "step0001-edited-since-measured.diff").read_text()
    state = load_state(run.paths)
    assert state.steps == 1 and first["fingerprint"] in state.rejected_fingerprints
    assert not run.paths.journal.exists()


def test_an_acceptance_killed_before_its_commit_point_uses_its_step_and_keeps_the_candidate(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = _killed_before_commit_point(toy, runs_root, 5, "accept")
    reopened = open_run(run.paths.root, runs_root)
    out = submit(reopened, "X=5 again")
    assert any("step 1 is recorded as interrupted" in n for n in out.notes), out.notes
    first = submits(run)[0]
    assert (first["step"], first["outcome"]) == (1, "interrupted")
    assert "was accepted at" in first["reason"] and "submit it again" in first["reason"]
    assert out.step == 2 and out.outcome == "accepted" and out.version is not None and out.version.n == 1
    assert [v.step for v in load_state(run.paths).versions] == [0, 2]


def test_a_started_journal_put_back_after_its_step_was_recorded_takes_no_second_step(
        noisy_run: Run, runs_root: Path) -> None:
    run = noisy_run
    killed_submit(run.paths.root, "_finish", 2)
    copy = run.paths.journal.read_bytes()
    submit(open_run(run.paths.root, runs_root), "again")  # step 1 interrupted, step 2 decided
    steps = load_state(run.paths).steps
    run.paths.journal.write_bytes(copy)
    set_model(run.paths.work, 1.5)
    out = submit(open_run(run.paths.root, runs_root), "50 % better")
    assert out.step == steps + 1 and load_state(run.paths).steps == steps + 1
    assert [r["step"] for r in submits(run) if r["outcome"] == "interrupted"] == [1]


def test_a_killed_submit_says_what_the_next_command_will_record(noisy_run: Run, runs_root: Path) -> None:
    from avo.summaries import interrupted_submit_line

    run = noisy_run
    killed_submit(run.paths.root, "_finish", 2)
    assert interrupted_submit_line(open_run(run.paths.root, runs_root), 0) == (
        "interrupted before step 1's decision: the next avo command records step 1 as interrupted, with the "
        "1 draw(s) it had (a submit that began its evaluation uses its step however it ends); work/ keeps "
        "the candidate")
    # A read-only command between the kill and the next mutating one sees a consistent record.
    proc = subprocess.run([sys.executable, "-m", "avo", "status", "--run", str(run.paths.root)],
                          capture_output=True, text=True, timeout=120, env={**os.environ})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "steps 0," in proc.stdout, proc.stdout
    assert "the submit of step 1 was killed during its evaluation: the next avo command records it as " \
           "interrupted (its step is used)" in proc.stdout, proc.stdout


def _append_by_hand(run: Run, record: dict[str, Any]) -> None:
    """Chain ``record`` onto the trajectory as an agent can (no key: unsigned), run.json untouched."""
    from avo.chain import line_hash

    last = run.paths.trajectory.read_bytes().rstrip(b"\n").rpartition(b"\n")[2]
    line = json.dumps({"time": 0, **record, "seq": json.loads(last)["seq"] + 1, "prev": line_hash(last)}).encode()
    with open(run.paths.trajectory, "ab") as fh:
        fh.write(line + b"\n")


def test_a_line_appended_by_hand_after_the_start_does_not_hide_it(noisy_run: Run, runs_root: Path) -> None:
    # Red team, round eight: after the kill, `rm pending.json` and one unsigned line chained after
    # the start (a "revert"; avo adopts lines past the head): only the last line was looked at.
    run = noisy_run
    killed_submit(run.paths.root, "_finish", 2)
    run.paths.journal.unlink()
    _append_by_hand(run, {"kind": "revert", "step": 1, "message": None, "diff": None})
    out = submit(open_run(run.paths.root, runs_root), "same tree, again")
    assert out.step == 2
    assert [(r["step"], r["outcome"]) for r in submits(run) if "mac" in r] == [(1, "interrupted"), (2, out.outcome)]


@pytest.mark.parametrize("replaced", [False, True])
def test_a_start_is_not_hidden_by_moving_the_key_aside(noisy_run: Run, runs_root: Path, replaced: bool) -> None:
    # Red team, round eight: the key renamed aside for one command (its bytes never read), so
    # the signed start line could not be told from a hand-written one and was passed over; or
    # a key of the agent's put in its place, under which the agent signs a settling line.
    import hashlib
    import hmac

    from avo.run_key import key_path

    run = noisy_run
    killed_submit(run.paths.root, "_finish", 2)
    run.paths.journal.unlink()
    key = key_path(run.paths)
    aside = run.paths.root.parent / "key.aside"
    key.rename(aside)
    if replaced:
        mine = b"k" * 32
        key.write_bytes(mine)
        last = run.paths.trajectory.read_bytes().rstrip(b"\n").rpartition(b"\n")[2]
        from avo.chain import line_hash

        body = json.dumps({"time": 0, "kind": "submit_not_run", "step": 1, "error": "x",
                           "seq": json.loads(last)["seq"] + 1, "prev": line_hash(last)}).encode()
        line = body[:-1] + b', "mac": "' + hmac.new(mine, body, hashlib.sha256).hexdigest().encode() + b'"}'
        with open(run.paths.trajectory, "ab") as fh:
            fh.write(line + b"\n")
    proc = subprocess.run([sys.executable, "-m", "avo", "eval", "--run", str(run.paths.root)],
                          capture_output=True, text=True, timeout=300)
    aside.replace(key)
    assert load_state(run.paths).steps == 1, proc.stdout + proc.stderr
    assert "step 1 is recorded as interrupted" in proc.stdout, proc.stdout  # `avo eval` says what it recorded
    assert [(r["step"], r["outcome"]) for r in submits(run)] == [(1, "interrupted")]


def test_a_start_line_written_by_hand_costs_a_step_and_reaches_git_only_as_an_object_id(
        noisy_run: Run, runs_root: Path) -> None:
    # A start line counts whoever wrote it (one written by hand only costs its run a step), so
    # what it names is checked before use: its tree goes to `git diff`, where `--output=FILE`
    # would have git write a file of the line's choosing.
    run = noisy_run
    target = run.paths.root.parent / "written-by-git"
    _append_by_hand(run, {"kind": STARTED, "step": 1, "message": "x", "tree": f"--output={target}",
                          "measured": f"--output={target}", "best_before": "v0", "migrant": "island-9"})
    out = submit(open_run(run.paths.root, runs_root), "a real submit")
    assert not target.exists()
    first = submits(run)[0]
    assert (first["step"], first["outcome"], first["tree"], first["best_before"]) == (1, "interrupted", None, 0)
    assert "migrant" not in first and out.step == 2


def test_a_killed_submit_names_the_logs_written_since_it_started(noisy_run: Run, runs_root: Path) -> None:
    # Killed as its first draw's result came back: the log holds the result, the journal not yet.
    run = noisy_run
    killed_submit(run.paths.root, "_finish", 1)
    assert journal_of(run)["draws"] == []
    out = submit(open_run(run.paths.root, runs_root), "again")
    first = submits(run)[0]
    assert first["outcome"] == "interrupted" and first["draws"] == [] and out.step == 2
    assert [name for name in first["logs"] if name.endswith("-step1.log")], first["logs"]


def test_avo_recover_records_a_killed_submit_too(noisy_run: Run, runs_root: Path) -> None:
    run = noisy_run
    killed_submit(run.paths.root, "_finish", 2)
    run.paths.journal.unlink()
    proc = subprocess.run([sys.executable, "-m", "avo", "recover", "--run", str(run.paths.root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "step 1 is recorded as interrupted" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert load_state(run.paths).steps == 1
    assert [(r["step"], r["outcome"]) for r in submits(run)] == [(1, "interrupted")]


def _recover(run: Run) -> str:
    proc = subprocess.run([sys.executable, "-m", "avo", "recover", "--run", str(run.paths.root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout + proc.stderr


def _lines(run: Run) -> list[bytes]:
    return run.paths.trajectory.read_bytes().split(b"\n")[:-1]


@pytest.mark.parametrize("how", ["cut", "broken", "torn", "copied-settle"])
def test_damaging_the_start_line_before_avo_recover_still_costs_the_step(
        noisy_run: Run, runs_root: Path, how: str) -> None:
    # Red team, round eight (second pass): after the kill and `rm pending.json`, the start line
    # cut from the end (run.json untouched: `avo recover` moved the chain's head back itself),
    # broken to non-JSON, its newline cut (a torn tail, set aside), or an earlier step's signed
    # submit line copied after it: each was a free re-roll through `avo recover`.
    run = noisy_run
    if how == "copied-settle":
        set_model(run.paths.work, 1.5)
        assert submit(run, "50 % better").step == 1
        set_model(run.paths.work, 1.52)
    killed_submit(run.paths.root, "_finish", 2)
    run.paths.journal.unlink()
    steps = load_state(run.paths).steps
    lines = _lines(run)
    assert json.loads(lines[-1])["kind"] == STARTED
    if how == "cut":
        run.paths.trajectory.write_bytes(b"\n".join(lines[:-1]) + b"\n")
    elif how == "broken":
        run.paths.trajectory.write_bytes(b"\n".join([*lines[:-1], b"#" + lines[-1][1:]]) + b"\n")
    elif how == "torn":
        run.paths.trajectory.write_bytes(b"\n".join(lines))
    else:
        old = next(x for x in lines if b'"kind": "submit"' in x)
        run.paths.trajectory.write_bytes(b"\n".join([*lines, old]) + b"\n")
    said = _recover(run)
    assert f"step {steps + 1} is recorded as interrupted" in said, said
    assert load_state(run.paths).steps == steps + 1
    assert submits(run)[-1]["outcome"] == "interrupted"


def test_a_replayed_confirmation_line_does_not_add_remeasurements_of_the_best(
        noisy_run: Run, runs_root: Path) -> None:
    # Red team, round eight (second pass), in every run since signing: a copy of a signed submit
    # line whose confirmation re-measured the best, appended at the end, then `avo recover`: each
    # round added its draws again to run.json's re-measurements, the reference the policy compares
    # candidates with (3 -> 6 -> 9 -> 12 values from 3 draws). A step's draws count once.
    run = noisy_run
    submit(run, "inside the band: confirmed")
    genuine = load_state(run.paths).remeasured
    assert sum(len(v) for v in genuine.values()) == 3
    for _ in range(3):
        copy = next(x for x in _lines(run) if b'"kind": "submit"' in x and b'"confirm"' in x)
        with open(run.paths.trajectory, "ab") as fh:
            fh.write(copy + b"\n")
        _recover(run)
        assert load_state(run.paths).remeasured == genuine
    assert open_run(run.paths.root, runs_root).state.remeasured == genuine


def _remeasured_draws(records: list[dict[str, Any]]) -> list[float]:
    return [x for r in records for x in (r.get("confirm") or {}).get("best") or []]


def test_the_bests_finished_remeasurements_count_when_the_submit_is_killed(noisy_run: Run, runs_root: Path) -> None:
    # Red team, round 15: a killed submit counted none of its re-measurements of the best, so an
    # agent could kill each confirmation whose draws of the best came out high and let the low
    # ones count, lowering the reference every first look compares with (an unchanged candidate
    # was accepted at +5.15 %). Now every draw of the best it finished counts, kill or not.
    run = noisy_run
    killed_submit(run.paths.root, "_finish", 3)  # the 3rd draw arrives: step1 and confirm0-best journalled
    drawn = journal_of(run)["draws"]
    assert [d["label"] for d in drawn] == ["step1", "confirm0-best"]
    out = _recover(run)
    assert "the 1 re-measurement(s) of v0 it finished count" in out, out
    [record] = submits(run)
    assert record["outcome"] == "interrupted" and record["confirm"]["best"] == [drawn[1]["scalar"]]
    assert load_state(run.paths).remeasured == {0: [drawn[1]["scalar"]]}
    # The record check agrees (run.json against the signed lines), and a second repair adds nothing.
    reopened = open_run(run.paths.root, runs_root)
    assert reopened.state.remeasured == {0: [drawn[1]["scalar"]]}
    _recover(run)
    assert load_state(run.paths).remeasured == {0: [drawn[1]["scalar"]]}


@pytest.mark.parametrize(("quality", "kind"), [(1.05, "accept"), (1.0, "reject")])
def test_a_confirmation_killed_before_its_commit_point_counts_its_draws_of_the_best(
        noisy_run: Run, runs_root: Path, quality: float, kind: str) -> None:
    # Killed between its decision's journal and run.json, a confirmed acceptance (recorded as
    # interrupted) left its draws of the best out (round 15); a confirmed rejection recorded them in
    # the trajectory but not in run.json, and every command then refused the run until `avo recover`.
    run = noisy_run
    set_model(run.paths.work, quality)
    killed_submit(run.paths.root, "save_state", 1)
    journal = journal_of(run)
    assert journal["kind"] == kind
    best = journal["record"]["confirm"]["best"]
    assert len(best) == 3
    from avo.recovery import recover
    from avo.state import run_lock

    reopened = open_run(run.paths.root, runs_root, check=False)
    with run_lock(reopened.paths):
        recover(reopened)
    assert load_state(run.paths).remeasured == {0: best}
    assert _remeasured_draws(submits(run)) == best
    assert open_run(run.paths.root, runs_root).state.steps == 1


def test_a_draw_of_the_best_counts_when_its_candidates_draw_is_killed(noisy_run: Run, runs_root: Path) -> None:
    # Second pass on round ten: only draws of the best with a finished pair counted, so an agent
    # that killed the candidate's evaluator whenever the best's draw before it came out high (the
    # journal names each draw as it finishes) kept only the low ones, in a submit that ended
    # normally. Here the candidate kills itself in its first confirmation draw.
    run = noisy_run
    drawn = int((run.paths.root.parent.parent / "counter").read_text())  # the submit's first draw
    set_model(run.paths.work, 1.02, extra=(
        "import os, signal\nfrom pathlib import Path\n"
        f"if int(Path(os.environ['NOISE_COUNTER']).read_text()) == {drawn + 2}:\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"))
    out = submit(run, "inside the band, its confirmation draw killed")
    assert "a confirmation run failed" in out.reason, out.reason
    record = submits(run)[-1]
    best = record["confirm"]["best_draws"]
    assert [d["label"] for d in best] == ["confirm0-best"] and record["confirm"]["best"] == [best[0]["scalar"]]
    assert load_state(run.paths).remeasured == {0: [best[0]["scalar"]]}
    assert open_run(run.paths.root, runs_root).state.steps == 1


KILL_RECORD = """
import os, signal, sys
import avo.step_record as step_record

def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

step_record.append_trajectory = killed  # after run.json counts the step, before its record
from avo.cli import main
sys.argv = ["avo", "eval", "--run", sys.argv[1]]
main()
"""


def test_a_killed_recording_of_a_killed_acceptance_never_records_it_accepted(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Second pass on round ten: the command recording an acceptance killed before its commit
    # point was itself killed between run.json (the step counted) and its record; the next
    # command then appended the journal's own "accepted" record for a v1 run.json never held,
    # and `avo recover` adopted a commit the agent pushed under that line (code never measured).
    run = _killed_before_commit_point(toy, runs_root, 5, "accept")
    proc = subprocess.run([sys.executable, "-c", KILL_RECORD, str(run.paths.root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    assert load_state(run.paths).steps == 1 and run.paths.journal.exists()
    reopened = open_run(run.paths.root, runs_root, check=False)
    from avo.recovery import recover
    from avo.state import run_lock

    with run_lock(reopened.paths):
        recover(reopened)
    assert [(r["step"], r["outcome"]) for r in submits(run)] == [(1, "interrupted")]
    state = load_state(run.paths)
    assert state.steps == 1 and state.evaluations == 2 and len(state.versions) == 1
    assert not run.paths.journal.exists()
    assert open_run(run.paths.root, runs_root).state.steps == 1


KEEP_JOURNAL = """
import os, shutil, signal, sys
import avo.engine as engine

original, calls, run = engine._finish, 0, sys.argv[1]

def wrapper(*args, **kwargs):
    global calls
    calls += 1
    if calls == 2:  # the agent's copy of the journal as it stood before the 2nd draw was in it
        shutil.copy(os.path.join(run, ".avo", "pending.json"), os.path.join(run, "older-journal.json"))
    if calls == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    return original(*args, **kwargs)

engine._finish = wrapper
from avo.cli import main
sys.argv = ["avo", "submit", "-m", "same tree", "--run", run]
main()
"""


@pytest.mark.parametrize("how", ["deleted", "older-copy-put-back"])
def test_a_draw_of_the_best_counts_whatever_becomes_of_the_journal(
        noisy_run: Run, runs_root: Path, how: str) -> None:
    # Second pass on round ten: the finished draws of the best were only in the journal, so
    # `rm pending.json` after the kill, or an older copy of it put back, left a high one out.
    # Each is a signed line of the chain as it finishes now.
    run = noisy_run
    proc = subprocess.run([sys.executable, "-c", KEEP_JOURNAL, str(run.paths.root)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGKILL, proc.stdout + proc.stderr
    drawn = journal_of(run)["draws"]
    assert [d["label"] for d in drawn] == ["step1", "confirm0-best"]
    if how == "deleted":
        run.paths.journal.unlink()
    else:
        (run.paths.root / "older-journal.json").replace(run.paths.journal)
        assert [d["label"] for d in journal_of(run)["draws"]] == ["step1"]  # avo's, signed
    out = _recover(run)
    assert "step 1 is recorded as interrupted" in out, out
    [record] = submits(run)
    assert record["confirm"]["best"] == [drawn[1]["scalar"]]
    assert load_state(run.paths).remeasured == {0: [drawn[1]["scalar"]]}
    assert open_run(run.paths.root, runs_root).state.remeasured == {0: [drawn[1]["scalar"]]}


def test_moving_an_earlier_steps_lines_after_a_killed_start_still_costs_its_step(
        noisy_run: Run, runs_root: Path) -> None:
    # Second pass on round ten: after a kill of step 2 and `rm pending.json`, step 1's signed
    # start and submit lines moved to the end made `avo recover` set the killed start line aside
    # as out of place, and step 2 was never charged (a free re-roll). A start line of avo's that a
    # repair sets aside, its step not settled, costs the step.
    run = noisy_run
    set_model(run.paths.work, 0.5)
    assert submit(run, "much worse").step == 1
    set_model(run.paths.work, 1.02)
    killed_submit(run.paths.root, "_finish", 2)
    run.paths.journal.unlink()
    lines = _lines(run)
    s = next(i for i, x in enumerate(lines) if json.loads(x)["kind"] == STARTED)
    assert json.loads(lines[s + 1])["step"] == 1 and json.loads(lines[-1])["step"] == 2
    run.paths.trajectory.write_bytes(b"\n".join([*lines[:s], *lines[s + 2:], lines[s], lines[s + 1]]) + b"\n")
    out = _recover(run)
    assert "step 2 is recorded as interrupted" in out, out
    assert load_state(run.paths).steps == 2
    assert open_run(run.paths.root, runs_root).state.steps == 2

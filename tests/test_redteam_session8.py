"""Red team of session 8's changes (the second look at a gain beyond the noise band, the signed
submit journal): each test is a hostile action by a same-user agent on a real run, and what avo
must do about it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from avo.engine import open_run, start_run, submit
from avo.recovery import recover
from avo.state import read_trajectory, run_lock
from tests.conftest import set_constants
from tests.test_record_holds import kill_submit_at
from tests.test_redteam_session6 import _avo

# ``avo ARGS`` as a process, killed (and ``None``) if it still waits after two minutes.


# -- what is at .avo/pending.json or .avo/checked.json is not a file -------------------------------


@pytest.mark.parametrize("name", ["pending.json", "checked.json"])
def test_a_pipe_at_a_signed_file_does_not_hang_a_submit(
        toy: Path, runs_root: Path, core_plugins: None, name: str) -> None:
    # The journal and the checkpoint were read with a plain read_bytes(): a FIFO there waits
    # for a writer that never comes, so `avo submit` (and every later command) hung for good.
    run = start_run(str(toy), runs_root, sandbox="none")
    set_constants(run.paths.work, x=4)
    assert submit(run, "X=4").outcome == "accepted"  # the checkpoint is written from here
    where = run.paths.private / name
    where.unlink(missing_ok=True)
    os.mkfifo(where)
    set_constants(run.paths.work, x=5)
    proc = _avo("submit", "-m", "X to 5", "--run", str(run.paths.root))
    if proc is None:
        pytest.fail(f"avo submit waited on the pipe at .avo/{name}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    state = open_run(run.paths.root, runs_root).state
    assert state.best_version.scalar > run.state.best_version.scalar


def test_a_pipe_at_the_key_does_not_hang_a_command(toy: Path, runs_root: Path, core_plugins: None) -> None:
    # .avo/check.key was read with a plain read_bytes() by every command that checks a
    # signature: a FIFO there hung them all. Now the command stops and names the file.
    run = start_run(str(toy), runs_root, sandbox="none")
    set_constants(run.paths.work, x=4)
    assert submit(run, "X=4").outcome == "accepted"
    key = run.paths.private / "check.key"
    key.unlink()
    os.mkfifo(key)
    for args in (["status"], ["submit", "-m", "X to 5"]):
        proc = _avo(*args, "--run", str(run.paths.root))
        if proc is None:
            pytest.fail(f"avo {args[0]} waited on the pipe at .avo/check.key")
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode == 1 and "check.key is not a regular file" in proc.stdout + proc.stderr


def test_a_huge_journal_is_set_aside_not_read(toy: Path, runs_root: Path, core_plugins: None) -> None:
    # A sparse 8 GiB file costs the agent nothing; read whole into memory it is a MemoryError
    # (a traceback from every command) on a machine that has less to give.
    run = start_run(str(toy), runs_root, sandbox="none")
    with open(run.paths.journal, "wb") as fh:
        fh.truncate(8 << 30)
    set_constants(run.paths.work, x=5)
    proc = _avo("submit", "-m", "X to 5", "--run", str(run.paths.root), limit=3 << 30)
    assert proc is not None, "avo submit did not finish"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ignored .avo/pending.json" in proc.stdout + proc.stderr
    assert list(run.paths.private.glob("ignored-journal-*.json"))


# -- a genuine journal put back after its submit finished ------------------------------------------


def _killed_submit(toy: Path, runs_root: Path, tmp_path: Path, x: float,  # type: ignore[no-untyped-def]
                   point: str = "after-save"):
    """A run whose v1 is X = 5 and whose next submit (of X = ``x``) was killed at ``point``
    (tests/test_record_holds.py's driver): "after-save" is after run.json recorded it."""
    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=5)
    assert submit(run, "v1").outcome == "accepted"
    set_constants(run.paths.work, x=x)
    kill_submit_at(run.paths.root, point, "killed", tmp_path)
    return run


def test_a_replayed_genuine_journal_does_not_wipe_the_agents_work(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # The agent keeps a copy of a genuine signed journal (its own submit, killed after the
    # decision was saved) and puts it back after that submit was finished. It is signed, and
    # its step is the last one: finishing it again reset work/ to the best version and
    # cleaned it, deleting every edit and new file the agent had made since.
    run = _killed_submit(toy, runs_root, tmp_path, 1)  # worse: rejected
    work = run.paths.work
    genuine = run.paths.journal.read_bytes()
    run = open_run(run.paths.root, runs_root)
    with run_lock(run.paths):
        recover(run)  # the next command finishes the killed submit
    assert not run.paths.journal.exists()
    before = [r for r in read_trajectory(run.paths) if r.get("kind") == "submit"]

    set_constants(work, x=6)  # the agent's next candidate, and a file of its own
    (work / "notes.md").write_text("an hour of the agent's work\n")
    run.paths.journal.write_bytes(genuine)
    run = open_run(run.paths.root, runs_root)
    with run_lock(run.paths):
        notes = recover(run)
    assert (work / "notes.md").exists(), notes
    assert "X = 6" in (work / "solution.py").read_text(), notes
    assert [r for r in read_trajectory(run.paths) if r.get("kind") == "submit"] == before
    out = submit(open_run(run.paths.root, runs_root), "X=6 with notes")
    assert out.outcome == "accepted", out.reason


# -- any file at pending.json made a reader allow for a submit in flight ----------------------------


def test_a_hand_written_journal_does_not_let_status_show_a_forged_best(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # A reader (`avo status`, `avo log`, `avo report`) allows for a submit committing right
    # now: its version not yet in the backup, its record not yet in the trajectory. It took
    # any file at .avo/pending.json for one, so `{}` there and a version added to run.json by
    # hand showed a best of 1e9 with exit 0; the journal is signed now, and is checked here too.
    from tests.test_record_integrity import started

    run = started(toy, runs_root)
    work = run.paths.work
    set_constants(work, x=2)
    git = ["git", "-c", "user.name=a", "-c", "user.email=a@b"]
    subprocess.run([*git, "commit", "-qam", "v2: fake\n\navo-scalar: 1000000000.0"], cwd=work, check=True)
    rev = {what: subprocess.run(["git", "rev-parse", what], cwd=work, capture_output=True, text=True,
                                check=True).stdout.strip() for what in ("HEAD", "HEAD^{tree}")}
    data = json.loads(run.paths.run_json.read_text())
    data["versions"].append(dict(data["versions"][-1], n=len(data["versions"]), sha=rev["HEAD"],
                                 tree=rev["HEAD^{tree}"], scalar=1e9, message="fake", step=data["steps"]))
    data["best"] = len(data["versions"]) - 1
    run.paths.run_json.write_text(json.dumps(data))
    run.paths.journal.write_text("{}")
    for command in ("status", "log"):
        proc = _avo(command, "--run", str(run.paths.root))
        assert proc is not None
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "run.json's v2 is commit" in proc.stdout + proc.stderr


@pytest.mark.parametrize("point", ["after-save", "before-trajectory"])
def test_a_reader_still_allows_for_a_genuine_submit_in_flight(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, point: str) -> None:
    # The other side of the test above: a submit killed (or still running) between run.json
    # and the backup leaves a signed journal for its version, and a reader allows for it.
    run = _killed_submit(toy, runs_root, tmp_path, 6, point)
    assert run.paths.journal.exists()
    shown = _avo("status", "--run", str(run.paths.root))
    assert shown is not None and shown.returncode == 0, (shown.stdout + shown.stderr) if shown else ""
    assert "best v2" in shown.stdout


def test_edits_made_after_a_killed_rejection_are_kept_when_it_is_finished(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # No forgery: `avo submit` is killed after its rejection is saved, before work/ is reset
    # (a tool call's timeout). The agent goes on editing work/, and the next command finishes
    # the submit: its reset and clean deleted those edits, kept nowhere.
    run = _killed_submit(toy, runs_root, tmp_path, 1)  # worse: rejected
    work = run.paths.work
    set_constants(work, x=6)
    (work / "notes.md").write_text("an hour of the agent's work\n")
    run = open_run(run.paths.root, runs_root)
    with run_lock(run.paths):
        notes = recover(run)
    archived = "".join(p.read_text() for p in run.paths.rejected.glob("*-edited-since-measured.diff"))
    assert "an hour of the agent's work" in archived and "X = 6" in archived, notes
    assert any("its submit was killed before work/ was reset" in n for n in notes), notes
    assert "X = 5" in (work / "solution.py").read_text()  # the rejection itself is finished

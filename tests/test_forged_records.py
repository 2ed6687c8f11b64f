"""Records avo takes as its own, written by the agent: a submit's journal, a re-chained line.

The journal (``.avo/pending.json``) tells the next command what a killed submit still has to
write: its trajectory record, which diff to delete. A hand-written one used to be applied as
avo's own. A line re-chained onto the trajectory is adopted as one a killed command left past
the head, and ``avo recover`` takes its re-measurements into run.json.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from typer.testing import CliRunner

from avo.cli.app import app
from avo.engine import open_run, submit
from avo.state import read_trajectory
from tests.conftest import set_constants
from tests.test_record_integrity import started


def forge(run, body: dict) -> None:  # type: ignore[no-untyped-def]
    run.paths.journal.write_text(json.dumps(body))


def test_a_forged_journal_cannot_poison_the_reference_a_candidate_is_compared_with(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)  # v1 at X = 4, then X = 1 rejected
    best = run.state.best_version
    # A "finished" rejected submit whose confirmation re-measured the best at -1e9: appended
    # as avo's record, `avo recover` would take the re-measurements into run.json, and the
    # policy would compare every candidate with the median of the best's measurements.
    step = run.state.steps
    forge(run, {"kind": "reject", "step": step, "record": {
        "kind": "submit", "id": "forged", "step": step, "outcome": "rejected", "message": "forged",
        "best_before": best.n, "scalar": -1e9, "confirm": {"candidate": [-1e9], "best": [-1e9, -1e9]}}})
    set_constants(run.paths.work, x=2)  # worse than the best (X = 4)
    first = submit(open_run(run.paths.root, runs_root), "X=2 after the forged journal")
    assert any("ignored .avo/pending.json" in note and "not signed" in note for note in first.notes), first.notes
    assert first.outcome == "rejected"
    assert "forged" not in [r.get("id") for r in read_trajectory(run.paths)]
    assert CliRunner().invoke(app, ["recover", "--run", str(run.paths.root)]).exit_code == 0
    set_constants(run.paths.work, x=3)
    out = submit(open_run(run.paths.root, runs_root), "X=3, still worse")
    assert out.outcome == "rejected", out.reason
    state = open_run(run.paths.root, runs_root).state
    assert state.best_version.n == best.n and not state.remeasured
    kept = list(run.paths.private.glob("ignored-journal-*.json"))
    assert len(kept) == 1 and '"forged"' in kept[0].read_text()  # nothing lost


def test_a_forged_journal_cannot_delete_a_file(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    precious = run.paths.root.parent / "precious.txt"
    precious.write_text("the user's")
    step = run.state.steps + 1  # "killed before its decision": the diff it wrote is deleted
    forge(run, {"kind": "reject", "step": step, "diff_path": str(precious),
                "record": {"kind": "submit", "id": f"step{step}", "step": step}})
    set_constants(run.paths.work, x=5)
    out = submit(open_run(run.paths.root, runs_root), "X=5")
    assert out.outcome == "accepted"
    assert precious.read_text() == "the user's"
    assert not [r for r in read_trajectory(run.paths) if r.get("kind") == "interrupted"]


def test_a_journal_signed_for_a_record_it_does_not_hold_is_ignored(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Signed with the run's key (an agent that read .avo/check.key), but not a submit's journal.
    from avo.run_key import signed

    run = started(toy, runs_root)
    step = run.state.steps
    run.paths.journal.write_text(signed(run.paths, {"kind": "reject", "step": step, "record": {
        "kind": "supervisor_record", "step": step}}))
    set_constants(run.paths.work, x=5)
    out = submit(open_run(run.paths.root, runs_root), "X=5")
    assert any("its record is not step" in note for note in out.notes), out.notes
    assert "supervisor_record" not in [r.get("kind") for r in read_trajectory(run.paths)]


def test_re_measurements_re_chained_onto_the_trajectory_do_not_move_a_deterministic_targets_bar(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    best = run.state.best_version
    last = run.paths.trajectory.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    forged = {"kind": "submit", "id": "forged", "step": run.state.steps, "outcome": "rejected", "message": "f",
              "best_before": best.n, "scalar": -1e9, "confirm": {"candidate": [-1e9], "best": [-1e9, -1e9]},
              "seq": json.loads(last)["seq"] + 1, "prev": hashlib.sha256(last).hexdigest()}
    with open(run.paths.trajectory, "ab") as fh:
        fh.write(json.dumps(forged).encode() + b"\n")
    # Adopted, refused as a difference from run.json, then taken into run.json by recover.
    assert CliRunner().invoke(app, ["recover", "--run", str(run.paths.root)]).exit_code == 0
    assert open_run(run.paths.root, runs_root).state.remeasured == {best.n: [-1e9, -1e9]}
    set_constants(run.paths.work, x=2)  # scores 10.09 against the best's 15.20
    out = submit(open_run(run.paths.root, runs_root), "X=2")
    assert out.outcome == "rejected", out.reason  # was accepted as "+100 %"
    assert open_run(run.paths.root, runs_root).state.best_version.n == best.n

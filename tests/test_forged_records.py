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

import pytest
from typer.testing import CliRunner

from avo.cli.app import app
from avo.engine import open_run, start_run, submit
from avo.state import read_trajectory
from tests.conftest import set_constants
from tests.test_noise import noisy  # noqa: F401  (a fixture)
from tests.test_record_integrity import started


def avo_cli(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.output


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


def rechain(run, record: dict) -> None:  # type: ignore[no-untyped-def]
    """Append ``record`` as the next link of the trajectory, as an agent can (``prev`` is one SHA-256)."""
    last = run.paths.trajectory.read_bytes().rstrip(b"\n").rsplit(b"\n", 1)[-1]
    record = {**record, "seq": json.loads(last)["seq"] + 1, "prev": hashlib.sha256(last).hexdigest()}
    with open(run.paths.trajectory, "ab") as fh:
        fh.write(json.dumps(record).encode() + b"\n")


def remeasured_at_minus_1e9(run) -> dict:  # type: ignore[no-untyped-def]
    best = run.state.best_version
    return {"kind": "submit", "id": "forged", "step": run.state.steps, "outcome": "rejected", "message": "f",
            "best_before": best.n, "scalar": -1e9, "confirm": {"candidate": [-1e9], "best": [-1e9, -1e9]}}


def unsign_and_rechain(run, extra: dict) -> None:  # type: ignore[no-untyped-def]
    """Rewrite the whole trajectory without its signatures, re-chained, then append ``extra``."""
    records = [json.loads(line) for line in run.paths.trajectory.read_bytes().splitlines()]
    out: list[bytes] = []
    for r in records:
        r.pop("mac", None)
        if out:
            r["prev"] = hashlib.sha256(out[-1]).hexdigest()
        out.append(json.dumps(r).encode())
    run.paths.trajectory.write_bytes(b"".join(line + b"\n" for line in out))
    rechain(run, extra)


def unsign_rechain_and_delete_key(run, extra: dict) -> None:  # type: ignore[no-untyped-def]
    """:func:`unsign_and_rechain`, and the key (with its mark "every line signed") deleted."""
    unsign_and_rechain(run, extra)
    (run.paths.private / "check.key").unlink()


@pytest.mark.parametrize("forge", ["rechain", "unsign_and_rechain", "unsign_rechain_and_delete_key"])
def test_re_measurements_re_chained_onto_the_trajectory_are_named_and_never_taken(
        toy: Path, runs_root: Path, core_plugins: None, forge: str) -> None:
    # rechain: adopted as a line a killed command left past the head, refused as a difference
    # from run.json, then taken into run.json by `avo recover`: a candidate at 10.09 against
    # the best's 15.20 was then accepted as "+100 %". unsign_and_rechain: the run counted as
    # unsigned (every line counts) when its FIRST line carried no signature, so an agent
    # stripped them all, re-chained the file, and appended its re-measurements.
    run = started(toy, runs_root)
    best = run.state.best_version
    # unsign_rechain_and_delete_key: with the key went its mark, and the run looked unsigned
    # again; the start record's terms (pinned by v0) now say that every line is signed.
    forges = {"rechain": rechain, "unsign_and_rechain": unsign_and_rechain,
              "unsign_rechain_and_delete_key": unsign_rechain_and_delete_key}
    forges[forge](run, remeasured_at_minus_1e9(run))
    code, out = avo_cli("status", "--run", str(run.paths.root))
    assert code == 1, out
    assert "records re-measurements of v1 [-1000000000.0, -1000000000.0], but avo did not sign it" in out
    code, recovered = avo_cli("recover", "--run", str(run.paths.root))
    assert code == 0, recovered
    assert open_run(run.paths.root, runs_root).state.remeasured == {}
    assert avo_cli("status", "--run", str(run.paths.root))[0] == 0  # the line is set aside, kept
    set_constants(run.paths.work, x=2)  # worse than the best (X = 4)
    out_ = submit(open_run(run.paths.root, runs_root), "X=2")
    if forge == "rechain":
        assert out_.outcome == "rejected", out_.reason
        assert open_run(run.paths.root, runs_root).state.best_version.n == best.n
    else:  # v1's own accepted submit lost its signature too: not adopted, so the bar is v0's own score
        assert f"not adopted: v{best.n}" in recovered, recovered
        assert out_.outcome == "accepted" and "v0" in out_.reason, out_.reason


def test_re_measurements_re_chained_onto_a_noisy_run_do_not_move_its_bar(
        noisy: Path, runs_root: Path, core_plugins: None) -> None:  # noqa: F811
    from tests.test_noise import set_model

    run = start_run(str(noisy), runs_root)
    rechain(run, remeasured_at_minus_1e9(run))
    assert avo_cli("recover", "--run", str(run.paths.root))[0] == 0
    set_model(run.paths.work, 0.8)  # 20 % worse than the seed
    out = submit(open_run(run.paths.root, runs_root), "worse")
    assert out.outcome == "rejected", out.reason
    assert len(open_run(run.paths.root, runs_root).state.versions) == 1


def test_a_supervisor_answer_re_chained_onto_the_trajectory_does_not_count(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    rechain(run, {"kind": "supervisor_record", "step": run.state.steps})
    code, out = avo_cli("status", "--run", str(run.paths.root))
    assert code == 1 and "records an answer to the supervisor, but avo did not sign it" in out


def test_a_forged_recovered_record_cannot_make_avo_recover_drop_the_bests_re_measurements(
        noisy: Path, runs_root: Path, core_plugins: None) -> None:  # noqa: F811
    # `avo recover` skipped every line any `recovered` record named, intact or not: an agent's
    # one such line naming avo's own submit dropped its re-measurements from run.json, and the
    # record check (which counts them) then refused the run after every recover.
    from tests.test_noise import set_model

    run = start_run(str(noisy), runs_root, stall_limit=10)
    set_model(run.paths.work, 1.0, 137)
    assert submit(run, "noise").outcome == "rejected"
    taken = open_run(run.paths.root, runs_root).state.remeasured
    lines = run.paths.trajectory.read_bytes().splitlines()
    n = next(i for i, line in enumerate(lines, 1) if b'"confirm"' in line)
    assert taken
    rechain(run, {"kind": "recovered", "acknowledged": [{"line": n, "sha": hashlib.sha256(lines[n - 1]).hexdigest()}]})
    avo_cli("recover", "--run", str(run.paths.root))
    assert avo_cli("status", "--run", str(run.paths.root))[0] == 0
    assert open_run(run.paths.root, runs_root).state.remeasured == taken

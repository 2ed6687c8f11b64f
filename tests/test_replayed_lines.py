"""A line of avo's own, copied to the trajectory's end by the agent, then `avo recover`.

Found at the end of red team round eight (pre-existing since lines were chained): the chain
check blamed the line *before* a line that does not chain to it, so a copy of any old signed
line appended at the end made `avo recover` set aside the newest accepted submit and drop its
version ("best v3 -> v2"). A copy is the stranger: it carries an earlier line's number, and it
sits past the last line run.json's chain head vouches for. `avo recover` sets it aside and chains
its own record past it, so the next copy is named the same way.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo.chain import line_hash
from avo.cli.app import app
from avo.engine import Run, open_run, start_run, submit
from avo.state import load_state
from tests.conftest import set_constants

cli = CliRunner()


def avo(run: Run, *args: str) -> tuple[int, str]:
    result = cli.invoke(app, [*args, "--run", str(run.paths.root)], catch_exceptions=False)
    return result.exit_code, result.output


def _lines(run: Run) -> list[bytes]:
    return run.paths.trajectory.read_bytes().splitlines()


def _append(run: Run, line: bytes) -> None:
    with open(run.paths.trajectory, "ab") as fh:
        fh.write(line + b"\n")


def _kind(line: bytes) -> str:
    return str(json.loads(line)["kind"])


@pytest.fixture
def run(toy: Path, runs_root: Path, core_plugins: None) -> Run:
    """Four accepted steps (X = 4, 5, 6, 7); v4 is the best."""
    run = start_run(str(toy), runs_root)
    for x in (4, 5, 6, 7):
        set_constants(run.paths.work, x=x)
        assert submit(run, f"X={x}").outcome == "accepted"
    return run


def _retimed(line: bytes) -> bytes:
    """The line with another time: no longer the same bytes as the line it copies."""
    record = json.loads(line)
    record["time"] += 1
    return json.dumps(record).encode()


@pytest.mark.parametrize("which", ["first-submit", "newest-line", "start-line", "retimed-submit"])
def test_a_copied_line_at_the_end_is_set_aside_and_the_newest_version_kept(
        run: Run, runs_root: Path, which: str) -> None:
    best = load_state(run.paths).best_version
    assert best.n == 4
    lines = _lines(run)
    copy = {"first-submit": next(x for x in lines if _kind(x) == "submit"),
            "newest-line": lines[-1],  # step 4's own accepted submit, right after itself
            "start-line": lines[0],
            "retimed-submit": _retimed(next(x for x in lines if _kind(x) == "submit"))}[which]
    for round_ in (1, 2):  # the second round failed once the blame moved but recover's link did not
        there = _lines(run)
        _append(run, copy)
        n = len(_lines(run))
        code, out = avo(run, "status")
        # (the second retimed copy copies the first, which is no line of the chain: out of place)
        named = "is out of place: it is numbered" if which == "retimed-submit" else f"is a copy of line {there.index(copy) + 1}"
        assert code == 1 and f"trajectory.jsonl line {n} {named}" in out, out
        code, out = avo(run, "recover")
        assert code == 0, out
        assert f"set aside trajectory.jsonl line {n}" in out, out
        assert "best v4 -> " not in out and "not adopted" not in out, out
        state = load_state(run.paths)
        assert [v.sha for v in state.versions][-1] == best.sha and state.best == 4, (round_, out)
        assert avo(run, "status")[0] == 0
        # recover's own record chains past the copy, to the line before it
        recovered = next(json.loads(x) for x in _lines(run)[n:] if _kind(x) == "recovered")
        assert recovered["prev"] == line_hash(_lines(run)[n - 2])
        assert [a["line"] for a in recovered["acknowledged"]] == [n]
    set_constants(run.paths.work, x=7, y=3.5)
    assert submit(open_run(run.paths.root, runs_root), "after two replays").outcome == "accepted"
    assert avo(run, "status")[0] == 0


@pytest.mark.parametrize("retimed", [False, True])
def test_a_copy_the_chain_head_was_moved_to_by_hand_is_still_the_stranger(run: Run, retimed: bool) -> None:
    # run.json is the agent's to write as well, with the head edited to vouch for the copy. An
    # exact copy is named as one; a retimed one is not avo's (its signature fails), so the chain
    # is walked from avo's newest line instead. Before, step 4's line was named as edited and v4
    # dropped; a walk started from the head whoever wrote its line skipped steps 1 to 4.
    lines = _lines(run)
    copy = next(x for x in lines if _kind(x) == "submit")
    copy = _retimed(copy) if retimed else copy
    _append(run, copy)
    data = json.loads(run.paths.run_json.read_text())
    data["chain"] = {"count": len(lines) + 1, "sha": line_hash(copy), "end": run.paths.trajectory.stat().st_size}
    run.paths.run_json.write_text(json.dumps(data, indent=1))
    code, out = avo(run, "recover")
    assert code == 0, out
    named = "is out of place" if retimed else "is a copy of line"
    assert f"set aside trajectory.jsonl line {len(lines) + 1}: it {named}" in out, out
    state = load_state(run.paths)
    assert state.best == 4 and len(state.versions) == 5, out


def test_two_copies_appended_at_once_are_both_set_aside(run: Run) -> None:
    lines = _lines(run)
    submits = [x for x in lines if _kind(x) == "submit"]
    _append(run, _retimed(submits[0]))
    _append(run, _retimed(submits[2]))
    code, out = avo(run, "recover")
    assert code == 0, out
    for n in (len(lines) + 1, len(lines) + 2):
        assert f"set aside trajectory.jsonl line {n}: it is out of place" in out, out
    assert load_state(run.paths).best == 4 and avo(run, "status")[0] == 0


def test_lines_chained_in_before_the_newest_line_are_the_inserted_ones(run: Run) -> None:
    # Two lines of the agent's, each chained to the one before it and numbered on, put in before
    # step 4's accepted submit (the head's line): the chain from the head skips them.
    lines = _lines(run)
    before = json.loads(lines[-2])
    one = {"kind": "note", "seq": before["seq"] + 1, "prev": line_hash(lines[-2]), "text": "a"}
    two = {"kind": "note", "seq": before["seq"] + 2, "prev": line_hash(json.dumps(one).encode()), "text": "b"}
    run.paths.trajectory.write_bytes(b"\n".join([*lines[:-1], json.dumps(one).encode(), json.dumps(two).encode(),
                                                 lines[-1]]) + b"\n")
    code, out = avo(run, "recover")
    assert code == 0, out
    n = len(lines)
    assert f"set aside trajectory.jsonl line {n}: it was inserted (line {n + 2} chains past it" in out, out
    assert f"set aside trajectory.jsonl line {n + 1}: it was inserted" in out, out
    assert load_state(run.paths).best == 4 and avo(run, "status")[0] == 0


def test_a_line_of_the_agents_appended_past_the_head_is_the_one_set_aside(run: Run) -> None:
    # Numbered as the next line would be, but chained to nothing avo wrote: past the head, the
    # line that does not chain is the stranger (before, step 4's line "was edited").
    lines = _lines(run)
    last = json.loads(lines[-1])
    fake = {"kind": "note", "seq": last["seq"] + 1, "prev": "0" * 64, "text": "hello"}
    _append(run, json.dumps(fake).encode())
    code, out = avo(run, "recover")
    assert code == 0, out
    assert f"set aside trajectory.jsonl line {len(lines) + 1}: it does not chain" in out, out
    assert load_state(run.paths).best == 4


def test_a_copied_supervisor_answer_does_not_clear_a_due_supervisor(toy: Path, runs_root: Path,
                                                                    core_plugins: None, tmp_path: Path) -> None:
    # Left untried in round eight: the supervisor's answer replayed to clear it when it is due
    # again. Tried now: it did not clear it before this change either (the answer's copy never
    # counts); kept so that a change of what recover adopts cannot start clearing it.
    run = start_run(str(toy), runs_root, stall_limit=2)
    for x in (0, 0.5):
        set_constants(run.paths.work, x=x)
        submit(open_run(run.paths.root, runs_root), f"X={x}")
    assert load_state(run.paths).supervisor.due
    answer = tmp_path / "answer.md"
    answer.write_text("# Redirect\n\n1. try X near 7\n2. try Y near 3\n")
    assert avo(run, "supervisor", "record", "-f", str(answer))[0] == 0
    assert not load_state(run.paths).supervisor.due
    for x in (0.25, 0.75):
        set_constants(run.paths.work, x=x)
        submit(open_run(run.paths.root, runs_root), f"X={x}")
    assert load_state(run.paths).supervisor.due
    record = next(x for x in _lines(run) if _kind(x) == "supervisor_record")
    _append(run, record)
    code, out = avo(run, "recover")
    assert code == 0, out
    assert load_state(run.paths).supervisor.due, out
    code, out = avo(run, "supervisor", "brief")
    assert code == 0, out

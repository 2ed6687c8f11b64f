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


# -- two red-team passes on the walk itself (2026-12-06) ----------------------------------------


def _recover_keeps_every_version(run: Run) -> str:
    code, out = avo(run, "recover")
    assert code == 0, out
    state = load_state(run.paths)
    assert len(state.versions) == 5 and state.best == 4, out
    assert "not adopted" not in out and "best v4 -> " not in out, out
    assert avo(run, "status")[0] == 0
    return out


def _write(run: Run, lines: list[bytes]) -> None:
    run.paths.trajectory.write_bytes(b"\n".join(lines) + b"\n")


@pytest.mark.parametrize("where", ["after-line-1", "before-line-1"])
def test_a_copy_put_in_early_is_the_one_set_aside(run: Run, where: str) -> None:
    # A link resolved to the first line with its hash: a copy of step 4's start line put in after
    # line 1 made lines 3 to 11 "inserted" (every version dropped); a copy of the head's line put
    # before line 1 set avo's start record aside and no command worked again.
    lines = _lines(run)
    if where == "after-line-1":
        _write(run, [lines[0], lines[-2], *lines[1:]])
    else:
        _write(run, [lines[-1], *lines])
    out = _recover_keeps_every_version(run)
    n = 2 if where == "after-line-1" else 1
    assert f"set aside trajectory.jsonl line {n}: it is a copy of line" in out, out
    assert out.count("set aside trajectory.jsonl line") == 1, out


@pytest.mark.parametrize("line", [b'{"kind": "note", "seq": 0, "prev": null}', b'{"kind": "note", "seq": 0}'])
def test_a_line_replaced_by_one_numbered_0_is_the_only_one_set_aside(run: Run, line: bytes) -> None:
    # Past the break the walk followed the planted line's link (or its null): every line before
    # it was "inserted", the versions dropped, the start record set aside (the run bricked).
    lines = _lines(run)
    _write(run, [*lines[:-2], line, lines[-1]])
    out = _recover_keeps_every_version(run)
    assert f"set aside trajectory.jsonl line {len(lines) - 1}:" in out, out
    assert out.count("set aside trajectory.jsonl line") == 1, out


@pytest.mark.parametrize("prev", [[], {}, 7])
def test_a_link_that_is_not_a_hash_is_named_not_a_traceback(run: Run, prev: object) -> None:
    lines = _lines(run)
    record = json.loads(lines[4])
    record["prev"] = prev
    _write(run, [*lines[:4], json.dumps(record).encode(), *lines[5:]])
    code, out = avo(run, "status")
    assert code == 1 and "trajectory.jsonl line 5 was edited" in out, out
    _recover_keeps_every_version(run)


def test_a_line_nested_100000_deep_is_named_not_a_traceback(run: Run) -> None:
    _append(run, b"[" * 100_000 + b"]" * 100_000)
    code, out = avo(run, "status")
    assert code == 1 and f"trajectory.jsonl line {len(_lines(run))} is not a JSON record" in out, out
    _recover_keeps_every_version(run)


@pytest.mark.parametrize("names", ["a-submit-by-its-hash", "line-1-by-number"])
def test_a_recovered_record_of_the_agents_sets_nothing_aside(run: Run, names: str) -> None:
    # Any `recovered` line set aside the lines it named: one naming step 1's accepted submit had
    # recover drop v1 to v4; one naming line 1 by number alone hid the start record from every
    # reader, and no command worked again.
    lines = _lines(run)
    n = next(i for i, x in enumerate(lines, 1) if _kind(x) == "submit")
    item = {"line": n, "sha": line_hash(lines[n - 1])} if names == "a-submit-by-its-hash" else {"line": 1, "sha": "x"}
    _append(run, json.dumps({"kind": "recovered", "acknowledged": [item]}).encode())
    _recover_keeps_every_version(run)
    code, out = avo(run, "log", "--attempts")
    assert code == 0 and "step   1 accepted v1" in out, out


def test_a_copy_put_in_early_then_its_original_edited_costs_that_line_only(run: Run) -> None:
    # Third pass: the edited original's successor named the early copy's hash, and the walk
    # jumped to the copy across every line between (v1 to v4 dropped). A link never skips a
    # line avo signed that is no copy: it is a break, the edited line set aside with the copy.
    lines = _lines(run)
    original = lines[-2]
    assert _kind(original) == "submit_started"
    edited = original.replace(b'"step": 4', b'"step":4', 1)
    _write(run, [lines[0], original, *lines[1:-2], edited, lines[-1]])
    out = _recover_keeps_every_version(run)
    assert "set aside trajectory.jsonl line 2:" in out and f"set aside trajectory.jsonl line {len(lines)}:" in out, out
    assert out.count("set aside trajectory.jsonl line") == 2, out


@pytest.mark.parametrize("deleted", ["step-4-start", "step-2-start"])
def test_a_deleted_line_costs_that_line_only(run: Run, deleted: str) -> None:
    # The line after a deleted one "followed a gap" and was set aside with it: deleting the start
    # line of an accepted submit dropped that version and, no accepted submit of avo's recording
    # it, every version after it ("best v4 -> v1"). That line is avo's: it stays.
    lines = _lines(run)
    k = len(lines) - 2 if deleted == "step-4-start" else 6
    assert _kind(lines[k]) == "submit_started" and _kind(lines[k + 1]) == "submit"
    _write(run, [*lines[:k], *lines[k + 1:]])
    code, out = avo(run, "status")
    assert code == 1 and f"trajectory.jsonl line {k + 1} follows a gap: 1 line(s) before it were deleted" in out, out
    out = _recover_keeps_every_version(run)
    assert f"trajectory.jsonl line {k + 1} follows a gap: 1 line(s) before it were deleted: those are lost; it is " \
        "avo's and kept" in out, out
    assert "set aside" not in out, out
    code, out = avo(run, "log", "--attempts")
    assert code == 0 and "step   4 accepted v4" in out and "step   2 accepted v2" in out, out


def test_a_step_number_of_the_agents_moves_no_step(run: Run) -> None:
    # Third pass: an unsigned submit line chained on at the end, "step 999": `avo recover` took
    # it as the steps taken (the step budget gone), and said nothing in `avo status`.
    lines = _lines(run)
    fake = {"kind": "submit", "step": 999, "outcome": "rejected", "seq": json.loads(lines[-1])["seq"] + 1,
            "prev": line_hash(lines[-1])}
    _append(run, json.dumps(fake).encode())
    avo(run, "recover")
    assert load_state(run.paths).steps == 4
    assert avo(run, "status")[0] == 0


def test_every_repair_stays_in_status_and_the_report(run: Run, tmp_path: Path) -> None:
    # Deleting a line cannot be prevented (the agent can delete the signed fold too): what
    # `avo recover` then did is said from then on, by `avo status` and the report.
    code, out = avo(run, "status")
    assert code == 0 and "RECORD REPAIRED" not in out
    lines = _lines(run)
    assert _kind(lines[3]) == "baseline"
    _write(run, [*lines[:3], *lines[4:]])  # a baseline's line deleted: step 1's start line follows a gap
    assert avo(run, "recover")[0] == 0
    code, out = avo(run, "status")
    assert code == 0 and "RECORD REPAIRED: `avo recover` ran 1 time(s)" in out, out
    assert "0 trajectory line(s) edited, inserted or copied by hand set aside, 1 place(s) where lines were " \
        "deleted" in out, out
    code, data = avo(run, "status", "--json")
    assert json.loads(data)["repairs"][0]["gaps"] == 1, data
    report = tmp_path / "report.html"
    assert avo(run, "report", "-o", str(report), "--no-plot")[0] == 0
    page = report.read_text()
    assert '<section id="repairs"><h2>Record repairs</h2>' in page and "follows a gap" in page


def test_a_deleted_confirmation_is_on_the_record_as_a_repair(
        tmp_path: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Not prevented (found 2026-12-06, in every run since the chain): the line of a submit whose
    # confirmation re-measured the best, deleted, then `avo recover`, takes its re-measurements
    # out of run.json (the policy's reference moves). The agent can delete the signed fold that
    # still held them as well; what stays is the repair, in every view.
    from tests.test_noise import banks_target, set_model

    run = start_run(str(banks_target(tmp_path, monkeypatch, 3)), runs_root, stall_limit=10)
    set_model(run.paths.work, 1.0, 137)
    assert submit(run, "noise").outcome == "rejected"
    assert load_state(run.paths).remeasured
    lines = _lines(run)
    n = next(i for i, x in enumerate(lines) if b'"confirm"' in x)
    _write(run, [*lines[:n], *lines[n + 1:]])
    code, out = avo(run, "recover")
    assert code == 0 and "re-measurements {0: [" in out, out
    code, out = avo(run, "status")
    assert code == 0 and "RECORD REPAIRED" in out and "    re-measurements {0: [" in out, out
    # Third pass: that repair's own record, edited by hand, was set aside by the next repair and
    # what it said was gone from every view. The next repair's record says it again.
    lines = _lines(run)
    n = max(i for i, x in enumerate(lines) if _kind(x) == "recovered")
    _write(run, [*lines[:n], lines[n].replace(b"re-measurements {", b"re-measurements  {", 1), *lines[n + 1:]])
    code, out = avo(run, "recover")
    assert code == 0 and f"set aside trajectory.jsonl line {n + 1}" in out, out
    code, out = avo(run, "status")
    assert code == 0 and "an earlier repair's record, now reads:) re-measurements  {0: [" in out, out


# -- red team, round 15 (2026-12-06): a line of avo's moved, not copied ---------------------------


@pytest.mark.parametrize("how", ["newest-up", "early-down"])
def test_a_moved_line_of_avos_is_the_only_one_set_aside(run: Run, how: str) -> None:
    # The newest line (a free `avo eval`'s, signed) moved up to line 3, nothing edited, copied or
    # deleted: the walk started from it (run.json's head vouches for its hash), so every line of
    # avo's after it was "out of place" and `avo recover` dropped every version (best v4 -> v0,
    # in two rounds). An early line moved to the end must not be the start instead.
    code, out = avo(run, "eval")
    assert code == 0, out
    lines = _lines(run)
    assert _kind(lines[-1]) == "eval"
    if how == "newest-up":
        moved, at = lines[-1], 3
        _write(run, [*lines[:2], moved, *lines[2:-1]])
    else:
        k = next(i for i, x in enumerate(lines) if _kind(x) == "submit_started")  # step 1's start
        moved, at = lines[k], len(lines)
        _write(run, [*lines[:k], *lines[k + 1:], moved])
    code, out = avo(run, "status")
    assert code == 1 and f"trajectory.jsonl line {at} is out of place" in out, out
    # (moved down, the line after its old place also reads as following a gap: avo's, kept)
    assert out.count("trajectory.jsonl line") == (1 if how == "newest-up" else 2), out
    out = _recover_keeps_every_version(run)
    assert out.count("set aside trajectory.jsonl line") == 1 and f"set aside trajectory.jsonl line {at}:" in out, out


def _chained_junk(after: bytes, k: int) -> list[bytes]:
    """``k`` unsigned lines of the agent's, each chained to the one before, the first to ``after``."""
    out, last, seq = [], after, json.loads(after)["seq"]
    for i in range(k):
        seq += 1
        line = json.dumps({"kind": "note", "seq": seq, "prev": line_hash(last), "text": f"j{i}"}).encode()
        out.append(line)
        last = line
    return out


def test_lines_of_the_agents_do_not_tip_the_reading_of_a_moved_line(run: Run) -> None:
    # Second pass on round ten: the two readings were weighed by how many lines each named, so
    # 20 unsigned lines chained onto the moved line (taken in by one reading, named by the other)
    # chose the reading that set aside every line of avo's after it (best v4 -> v0).
    code, out = avo(run, "eval")
    assert code == 0, out
    lines = _lines(run)
    moved = lines[-1]
    _write(run, [*lines[:2], moved, *lines[2:-1], *_chained_junk(moved, 20)])
    out = _recover_keeps_every_version(run)
    assert "set aside trajectory.jsonl line 3:" in out, out


def test_a_line_of_the_agents_past_a_head_moved_back_does_not_end_the_chain(run: Run) -> None:
    # run.json's chain head moved back onto line 3 (its own count and hash: not "moved") and one
    # unsigned line chained onto line 3 after it: taken in as the chain's end past the head, it made
    # every line of avo's after it a stranger, and one `avo recover` dropped v1 to v4.
    lines = _lines(run)
    new = [*lines[:3], *_chained_junk(lines[2], 1), *lines[3:]]
    _write(run, new)
    data = json.loads(run.paths.run_json.read_text())
    data["chain"] = {"count": 3, "sha": line_hash(lines[2]), "end": sum(len(x) + 1 for x in lines[:3])}
    run.paths.run_json.write_text(json.dumps(data, indent=1))
    _recover_keeps_every_version(run)  # (the note stays, as any line of the agent's past the head)

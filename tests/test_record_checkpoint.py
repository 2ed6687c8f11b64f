"""The incremental record check: what the signed checkpoint vouches for, and what it cannot hide.

Every edit here is one the full check catches; each must still be caught with a checkpoint
in place (before it, after it, and with the checkpoint itself forged, replayed or unsigned).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import shutil
from pathlib import Path

import pytest

from avo.engine import open_run, start_run, submit
from avo.record_checkpoint import checkpoint_path, load_checkpoint, quick_check
from avo.run_key import key_path
from avo.state import RunPaths, load_state, trajectory_bytes
from tests.conftest import set_constants
from tests.test_record_integrity import avo, edit_json, started


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _hash(line: bytes) -> str:
    return hashlib.sha256(line.rstrip(b"\n")).hexdigest()


def _rechain(paths: RunPaths, lines: list[bytes]) -> None:
    """Write ``lines`` with every link recomputed and run.json's head moved to match: the
    forgery that defeats the chain alone, so only the cross-checks can catch the edit."""
    out: list[bytes] = []
    for line in lines:
        r = json.loads(line)
        if out:
            r["prev"] = _hash(out[-1])
        out.append(json.dumps(r).encode() + b"\n")
    paths.trajectory.write_bytes(b"".join(out))
    edit_json(paths.run_json, lambda d: d.update(chain={"count": len(out), "sha": _hash(out[-1])}))


def _checked(run_dir: Path, runs_root: Path) -> tuple[RunPaths, int]:
    """The run's paths and how many trajectory lines its checkpoint covers (one must exist)."""
    paths = RunPaths(run_dir)
    cp = load_checkpoint(paths, load_state(paths))
    assert cp is not None and cp.lines > 0
    assert quick_check(paths, load_state(paths), trajectory_bytes(paths), locked=False) is not None  # an untouched run passes quickly
    return paths, cp.lines


def test_the_checkpoint_follows_the_run_and_readers_use_it(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root, accepted=2)
    paths, covered = _checked(run.paths.root, runs_root)
    total = len(_lines(paths.trajectory))
    assert covered < total  # the last submit's own records came after its check
    before = checkpoint_path(paths).read_bytes()
    assert avo("status")[0] == 0 and avo("log")[0] == 0 and avo("prompt")[0] == 0
    assert checkpoint_path(paths).read_bytes() == before  # readers never write it
    set_constants(run.paths.work, x=9)
    assert submit(open_run(run.paths.root, runs_root), "X=9").outcome == "accepted"
    assert _checked(run.paths.root, runs_root)[1] == total  # moved to where this submit's check ended


def test_an_edit_before_the_checkpoint_is_caught(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    paths, covered = _checked(run.paths.root, runs_root)
    lines = _lines(paths.trajectory)
    i = next(i for i, line in enumerate(lines[:covered]) if b'"outcome": "accepted"' in line)
    lines[i] = lines[i].replace(b'"message": "X=4"', b'"message": "X=4!"')
    paths.trajectory.write_bytes(b"".join(lines))
    assert quick_check(paths, load_state(paths), trajectory_bytes(paths), locked=False) is None
    code, out = avo("status")
    assert code == 1 and f"trajectory.jsonl line {i + 1} was edited" in out, out

    # Re-chained (every link recomputed, run.json's head moved): the chain no longer tells,
    # the prefix's digest does, and the full check names the disagreement with run.json.
    _rechain(paths, lines)
    assert quick_check(paths, load_state(paths), trajectory_bytes(paths), locked=False) is None
    code, out = avo("log")
    assert code == 1 and f"trajectory.jsonl line {i + 1} records v1 with message 'X=4!' vs 'X=4'" in out, out


def test_an_edit_after_the_checkpoint_is_caught(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    paths, covered = _checked(run.paths.root, runs_root)
    lines = _lines(paths.trajectory)
    i = next(i for i, line in enumerate(lines) if i >= covered and b'"outcome": "rejected"' in line)
    lines[i] = lines[i].replace(b'"outcome": "rejected"', b'"outcome": "accepted"')
    paths.trajectory.write_bytes(b"".join(lines))
    assert quick_check(paths, load_state(paths), trajectory_bytes(paths), locked=False) is None
    code, out = avo("status")
    assert code == 1 and f"trajectory.jsonl line {i + 1} was edited" in out, out
    # Re-chained, the flipped step claiming v1 with a better score: run.json disagrees.
    lines[i] = lines[i].replace(b'"best_before": 1', b'"version": 1, "best_before": 1')
    _rechain(paths, lines)
    code, out = avo("status")
    assert code == 1 and f"trajectory.jsonl line {i + 1} records v1 with scalar" in out, out


def test_a_rejection_flipped_to_accepted_without_a_version_is_caught(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    run = started(toy, runs_root)
    paths, _ = _checked(run.paths.root, runs_root)
    lines = _lines(paths.trajectory)
    i = next(i for i, line in enumerate(lines) if b'"outcome": "rejected"' in line)
    lines[i] = lines[i].replace(b'"outcome": "rejected"', b'"outcome": "accepted"')
    _rechain(paths, lines)  # a consistent chain: only the record's own content can tell
    code, out = avo("status")
    assert code == 1 and f"trajectory.jsonl line {i + 1} records step" in out and "names no version" in out, out


def test_a_version_edited_in_run_json_before_the_checkpoint_is_caught(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    run = started(toy, runs_root, accepted=2)
    paths, _ = _checked(run.paths.root, runs_root)
    assert load_checkpoint(paths, load_state(paths)).versions == 3  # type: ignore[union-attr]
    edit_json(paths.run_json, lambda d: d["versions"][1].update(time=d["versions"][1]["time"] + 1))
    assert quick_check(paths, load_state(paths), trajectory_bytes(paths), locked=False) is None
    code, out = avo("status")
    assert code == 1 and "the .avo/scores.jsonl committed with v1" in out, out


def test_a_forged_checkpoint_hides_nothing(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    paths, covered = _checked(run.paths.root, runs_root)
    genuine = json.loads(checkpoint_path(paths).read_bytes())
    lines = _lines(paths.trajectory)
    i = next(i for i, line in enumerate(lines[:covered]) if b'"outcome": "accepted"' in line)
    lines[i] = lines[i].replace(b'"message": "X=4"', b'"message": "X=4!"')
    _rechain(paths, lines)
    data = paths.trajectory.read_bytes()
    named = f"trajectory.jsonl line {i + 1} records v1 with message 'X=4!' vs 'X=4'"

    def forge(body_change, key: bytes | None = None) -> None:  # type: ignore[no-untyped-def]
        body = json.loads(json.dumps(genuine["body"]))
        body_change(body)
        mac = (hmac.new(key, json.dumps(body, sort_keys=True).encode(), hashlib.sha256).hexdigest()
               if key else genuine["mac"])
        checkpoint_path(paths).write_text(json.dumps({"body": body, "mac": mac}))

    def whole_file(body: dict) -> None:  # claims the edited file as verified, up to its end
        body.update(lines=len(lines), offset=len(data), digest=hashlib.sha256(data).hexdigest(),
                    last=_hash(lines[-1]))

    # 1. The digest recomputed over the edited bytes, the old signature kept.
    forge(whole_file)
    assert load_checkpoint(paths, load_state(paths)) is None
    code, out = avo("status")
    assert code == 1 and named in out, out
    # 2. Signed, but with a key of the agent's own (avo's key file untouched).
    forge(whole_file, key=b"k" * 32)
    assert avo("status")[0] == 1
    # 3. A checkpoint from another run, signed by that run's key, copied in with its key.
    other = start_run(str(toy), runs_root)
    set_constants(other.paths.work, x=4)
    assert submit(other, "X=4").outcome == "accepted"
    set_constants(other.paths.work, x=5)
    assert submit(open_run(other.paths.root, runs_root), "X=5").outcome == "accepted"
    shutil.copy(checkpoint_path(other.paths), checkpoint_path(paths))
    shutil.copy(key_path(other.paths), key_path(paths))
    assert load_checkpoint(paths, load_state(paths)) is None  # signed for another run id
    assert avo("status", "--run", str(paths.root))[0] == 1
    # 4. The genuine checkpoint put back (a replay): its digest covers the unedited bytes.
    checkpoint_path(paths).write_text(json.dumps(genuine))
    assert avo("status", "--run", str(paths.root))[0] == 1
    # 5. No checkpoint, no key: the full check, as before.
    checkpoint_path(paths).unlink()
    key_path(paths).unlink()
    code, out = avo("status", "--run", str(paths.root))
    assert code == 1 and named in out, out


def test_an_older_checkpoint_replayed_checks_everything_after_it(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    run = started(toy, runs_root)
    paths, covered = _checked(run.paths.root, runs_root)
    old = checkpoint_path(paths).read_bytes()
    for x in (6, 7):
        set_constants(run.paths.work, x=x)
        assert submit(open_run(run.paths.root, runs_root), f"X={x}").outcome == "accepted"
    lines = _lines(paths.trajectory)
    i = next(i for i, line in enumerate(lines) if i >= covered and b'"message": "X=6"' in line
             and b'"kind": "submit"' in line)
    lines[i] = lines[i].replace(b'"message": "X=6"', b'"message": "X=6!"')
    _rechain(paths, lines)
    checkpoint_path(paths).write_bytes(old)  # the later checkpoint, which covers line i, is gone
    code, out = avo("status")
    assert code == 1 and f"trajectory.jsonl line {i + 1} records v" in out and "'X=6!' vs 'X=6'" in out, out


def test_partial_reads_of_the_trajectory_agree_with_a_whole_read(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    from avo.engine import revert
    from avo.prompts import ATTEMPT_NEEDLES, _is_attempt
    from avo.state import append_trajectory, read_trajectory, recent_records

    run = started(toy, runs_root, accepted=2)
    set_constants(run.paths.work, x=2)
    assert submit(open_run(run.paths.root, runs_root), "X=2, worse").outcome == "rejected"
    (run.paths.work / "solution.py").write_text("def square(n):\n    raise ValueError('broken')\n")
    assert submit(open_run(run.paths.root, runs_root), "broken").outcome == "failed"
    set_constants(run.paths.work, x=4)
    assert revert(open_run(run.paths.root, runs_root), "a dead end") is not None
    paths = run.paths
    kinds = [(r.get("kind"), r.get("outcome")) for r in read_trajectory(paths) if _is_attempt(r)]
    assert kinds == [("submit", "rejected")] * 2 + [("submit", "failed"), ("revert", None)]
    for limit in (1, 2, 3, 5):
        whole = [r for r in read_trajectory(paths) if _is_attempt(r)][-limit:]
        assert recent_records(paths, ATTEMPT_NEEDLES, _is_attempt, limit) == whole
    tree = next(r["tree"] for r in read_trajectory(paths) if r.get("kind") == "submit")
    assert read_trajectory(paths, mentioning=tree.encode()) == [r for r in read_trajectory(paths)
                                                                 if tree in json.dumps(r)]
    # A line set aside by `avo recover` is left out of both, as from a whole read.
    rejected = next(n for n, line in enumerate(_lines(paths.trajectory), 1) if b'"outcome": "rejected"' in line)
    line = _lines(paths.trajectory)[rejected - 1]
    append_trajectory(paths, {"kind": "recovered", "id": "recovered-1", "step": 0, "unrecorded_versions": [],
                              "acknowledged": [{"line": rejected, "sha": _hash(line), "problem": "test"}]})
    kept = [r for r in read_trajectory(paths) if _is_attempt(r)]
    assert json.loads(line) not in kept
    assert recent_records(paths, ATTEMPT_NEEDLES, _is_attempt, 5) == kept[-5:]
    assert json.loads(line) not in read_trajectory(paths, mentioning=json.loads(line)["tree"].encode())


def test_the_quick_check_keeps_the_steps_whose_confirmation_was_counted(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs_root: Path, core_plugins: None) -> None:
    # Red team, round ten (a defect, not a hole: a line counted twice must still chain): the
    # quick check rebuilt the fold without the steps whose confirmation it had counted, so the
    # checkpoint it saved forgot them.
    from tests.test_noise import banks_target, set_model

    run = start_run(str(banks_target(tmp_path, monkeypatch, 3)), runs_root)
    set_model(run.paths.work, 1.02)  # inside the band: confirmed
    submit(run, "inside the band")
    assert load_state(run.paths).remeasured
    for quality in (1.01, 1.03):  # two more submits: each command's check starts from the checkpoint
        set_model(run.paths.work, quality)
        submit(open_run(run.paths.root, runs_root), f"quality {quality}")
    cp = load_checkpoint(run.paths, load_state(run.paths))
    assert cp is not None and {1, 2} <= cp.fold.confirmed, cp.fold

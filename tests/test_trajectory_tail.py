"""An append to the trajectory reads its tail and moves run.json's chain head in place.

Both files grow with the run (100,000 records, 10,000 versions), so an append must not
read either whole when the file ends where the head says; anything else (a torn tail, a
line past the head, a run.json written by another hand) takes the whole-file path.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic_core import from_json, to_json

from avo import state
from avo.chain import line_hash
from avo.state import RunPaths, _disk_head, append_trajectory, load_state
from tests.test_record_integrity import avo, started


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines()


def test_an_append_reads_only_the_tail(toy: Path, runs_root: Path, core_plugins: None,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    run = started(toy, runs_root)
    paths = run.paths
    head = _disk_head(paths)
    assert head is not None and head.end == paths.trajectory.stat().st_size  # kept by every append
    real = state.read_record_file  # how avo reads the whole trajectory (never through a pipe)

    def no_whole_trajectory(path: Path) -> bytes:
        if path == paths.trajectory:
            raise AssertionError("the whole trajectory was read")
        return real(path)

    monkeypatch.setattr(state, "read_record_file", no_whole_trajectory)
    for i in range(3):
        append_trajectory(paths, {"kind": "note", "step": i, "text": "x" * (70_000 * i)})  # longer than one chunk
    monkeypatch.undo()
    lines = _lines(paths.trajectory)
    head = _disk_head(paths)
    assert head is not None and head.count == len(lines) and head.sha == line_hash(lines[-1])
    assert head.end == paths.trajectory.stat().st_size
    assert [json.loads(x)["seq"] for x in lines] == list(range(1, len(lines) + 1))
    code, out = avo("status", "--run", str(paths.root))
    assert code == 0, out


def test_a_line_past_the_head_sends_the_append_to_the_whole_file(toy: Path, runs_root: Path,
                                                                 core_plugins: None) -> None:
    run = started(toy, runs_root)
    paths = run.paths
    lines = _lines(paths.trajectory)
    last = json.loads(lines[-1])
    # What a kill between the two writes of an append leaves: a chained line the head lacks.
    extra = {"kind": "note", "step": 0, "seq": last["seq"] + 1, "prev": line_hash(lines[-1])}
    with open(paths.trajectory, "ab") as fh:
        fh.write(json.dumps(extra).encode() + b"\n")
    append_trajectory(paths, {"kind": "note", "step": 0, "text": "after"})
    lines = _lines(paths.trajectory)
    head = _disk_head(paths)
    assert head is not None and head.count == len(lines) and head.end == paths.trajectory.stat().st_size
    assert json.loads(lines[-1])["prev"] == line_hash(lines[-2])
    code, out = avo("status", "--run", str(paths.root))
    assert code == 0, out


def test_run_json_is_rewritten_in_place_exactly_as_a_whole_rewrite(toy: Path, runs_root: Path,
                                                                   core_plugins: None) -> None:
    run = started(toy, runs_root)
    paths = run.paths
    append_trajectory(paths, {"kind": "note", "step": 0})
    raw = paths.run_json.read_bytes()
    data = from_json(raw)
    assert list(data)[-1] == "chain"
    assert raw == to_json(data, indent=1)  # byte for byte what parsing and writing it all gives
    assert load_state(paths).chain == _disk_head(paths)


def test_a_run_json_written_by_another_hand_is_read_whole(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    paths = RunPaths(run.paths.root)
    data = json.loads(paths.run_json.read_bytes())
    chain = data.pop("chain")
    paths.run_json.write_text(json.dumps({"chain": chain, **data}))  # no indent, the head first
    assert _disk_head(paths) is not None and _disk_head(paths).count == chain["count"]  # type: ignore[union-attr]
    append_trajectory(paths, {"kind": "note", "step": 0})
    head = _disk_head(paths)
    assert head is not None and head.count == chain["count"] + 1
    assert head.end == paths.trajectory.stat().st_size
    code, out = avo("status", "--run", str(paths.root))
    assert code == 0, out

"""Red team, round five: what an agent's own process can do while avo is in the middle of a
command (after its start-up checks, before its writes), and what avo must do about it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from avo.engine import open_run, start_run, submit
from avo.errors import AvoError
from avo.record_check import check_record
from avo.regular_files import open_own, write_json_atomic
from tests.test_redteam_session13 import _plant_ignored_key

# The agent's background process: once the candidate says (on its stderr, the run's log) that
# it is being evaluated, it swaps the run's logs/ and rejected/ for links to a folder of its
# choice, so that avo's writes after the evaluation would land there.
SWAPPER = r"""
import os, sys, time
root, outside = sys.argv[1], sys.argv[2]
logs = os.path.join(root, "logs")
deadline = time.time() + 60
while time.time() < deadline:
    names = os.listdir(logs) if os.path.isdir(logs) else []
    if any("CANDIDATE-RUNNING" in open(os.path.join(logs, n), errors="replace").read()
           for n in names if n.endswith(".log") and os.path.isfile(os.path.join(logs, n))):
        break
    time.sleep(0.02)
else:
    sys.exit("the candidate never ran")
for name in ("logs", "rejected"):
    os.rename(os.path.join(root, name), os.path.join(root, name + "-moved-by-agent"))
    os.symlink(outside, os.path.join(root, name))
print("swapped", flush=True)
"""


def _slow_worse_candidate(work: Path) -> None:
    # Worse than the seed (X = 1), so the submit is rejected and writes its diff to rejected/.
    (work / "solution.py").write_text(
        "import sys, time\nprint('CANDIDATE-RUNNING', file=sys.stderr, flush=True)\ntime.sleep(3)\n"
        "X = 0.5\nY = 1.0\n\n\ndef square(n):\n    return n * n\n")


def test_folders_swapped_for_links_during_the_evaluation_receive_nothing(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # Before: the start-up check found real folders; the runner's closing lines of the log and
    # the rejected diff were then written by path, through the links, into the agent's folder
    # (or into .avo/, or any folder the user running avo can write).
    outside = tmp_path / "outside"
    outside.mkdir()
    run = start_run(str(toy), runs_root)
    _slow_worse_candidate(run.paths.work)
    _plant_ignored_key(run.paths.work)  # moved into rejected/ by the reset, not deleted
    swapper = subprocess.Popen([sys.executable, "-c", SWAPPER, str(run.paths.root), str(outside)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        outcome = submit(open_run(run.paths.root, runs_root), "X=0.5, slowly")
    finally:
        out, err = swapper.communicate(timeout=60)
    assert "swapped" in out, err
    assert outcome.outcome == "rejected"
    assert sorted(os.listdir(outside)) == []
    for name in ("logs", "rejected"):
        folder = run.paths.root / name
        assert folder.is_dir() and not folder.is_symlink()
        asides = [p for p in run.paths.root.iterdir() if p.name.startswith(f"{name}-found-")]
        assert len(asides) == 1 and asides[0].is_symlink(), asides  # the agent's link, set aside untouched
    assert (run.paths.rejected / "step0001-rejected.diff").is_file()
    kept = run.paths.rejected / "step0001-rejected-ignored-files" / "check.key"
    assert kept.read_text() == "a key of the agent's choosing\n"
    assert any(p.suffix == ".log" for p in run.paths.logs.iterdir())
    again = open_run(run.paths.root, runs_root)
    check_record(again.paths, again.state, locked=False)  # the record is whole
    assert [v.n for v in again.state.versions] == [0]


@pytest.mark.parametrize("make", ["symlink", "file", "fifo"])
def test_a_write_into_a_run_folder_never_goes_through_what_is_at_its_name(tmp_path: Path, make: str) -> None:
    root = tmp_path / "run"
    (root / ".avo").mkdir(parents=True)
    key = root / ".avo" / "check.key"
    key.write_bytes(b"secret")
    folder = root / "logs"
    if make == "symlink":
        folder.symlink_to(root / ".avo")
    elif make == "file":
        folder.write_text("not a folder")
    else:
        os.mkfifo(folder)
    write_json_atomic(folder / "check.key", "a diff\n", sync="all", own=1)
    with os.fdopen(open_own(folder / "x.log", append=True, own=1), "a") as fh:
        fh.write("log line\n")
    assert key.read_bytes() == b"secret" and sorted(os.listdir(root / ".avo")) == ["check.key"]
    assert folder.is_dir() and not folder.is_symlink()
    assert (folder / "check.key").read_text() == "a diff\n" and (folder / "x.log").read_text() == "log line\n"
    assert len([p for p in root.iterdir() if p.name.startswith("logs-found-")]) == 1


def test_a_folder_swapped_again_in_the_instant_after_it_is_made_is_refused_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # own_folder sets a link aside and makes the folder; a second swap between that mkdir and
    # the open is not chased (that could go on forever): the write is refused, nothing written.
    from avo import regular_files

    root = tmp_path / "run"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    root.mkdir()
    (root / "rejected").symlink_to(elsewhere)
    real_mkdir = os.mkdir

    def mkdir_then_swap(name: str, mode: int = 0o777, *, dir_fd: int | None = None) -> None:
        real_mkdir(name, mode, dir_fd=dir_fd)
        os.rmdir(name, dir_fd=dir_fd)
        os.symlink(elsewhere, name, dir_fd=dir_fd)

    monkeypatch.setattr(regular_files.os, "mkdir", mkdir_then_swap)
    with pytest.raises(AvoError, match="never through a link"):
        write_json_atomic(root / "rejected" / "step0001-rejected.diff", "diff", own=1)
    assert os.listdir(elsewhere) == []


def test_a_user_chosen_output_folder_may_be_a_link(tmp_path: Path) -> None:
    # own=0 (reports, plots, exports: the user's -o): links above the file are the user's choice.
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via-link").symlink_to(real)
    write_json_atomic(tmp_path / "via-link" / "report.md", "# report\n", sync="none")
    assert (real / "report.md").read_text() == "# report\n"

"""Red team of session 12's change (a mutating command checks the record once, under the lock):
each test is a hostile action by a same-user agent on a real run, and what avo must do about it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from avo.engine import open_run, recover, start_run, submit
from avo.errors import AvoError
from avo.record_check import SCORES_FILE
from avo.state import load_state, run_lock
from tests.conftest import set_constants
from tests.test_record_holds import DRIVER
from tests.test_redteam_session6 import _avo


def _git(work: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", *args], cwd=work, input=stdin, capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})}).stdout.strip()


def _backup_main(run) -> str:  # type: ignore[no-untyped-def]
    return _git(run.paths.root, f"--git-dir={run.paths.backup}", "rev-parse", "main")


@pytest.mark.parametrize("point", ["after-journal", "after-commit"])
def test_an_agent_commit_written_into_run_json_after_a_killed_accept_never_reaches_the_backup(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, point: str) -> None:
    # The agent kills its own submit of X = 5 once its (genuine, signed) journal is written,
    # commits a v1 of its own on v0 in work/.git (plain git; trailers and scores file claiming
    # 1e9) and writes that commit into run.json as v1, the best. The next command finished the
    # journal before checking anything and pushed run.json's best, the agent's commit, into
    # avo's private backup; it then refused, but `avo recover`, rebuilding from the backup,
    # made 1e9 the run's best.
    run = start_run(str(toy), runs_root)
    v0 = run.state.versions[0].sha
    set_constants(run.paths.work, x=5)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(driver), point, str(run.paths.root), "X=5"],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=300)
    assert proc.returncode == -9, proc.stdout + proc.stderr
    assert run.paths.journal.exists()

    work = run.paths.work
    metrics = {"config_a": 5e8, "config_b": 5e8}
    scores = _git(work, "show", f"{v0}:{SCORES_FILE}") + "\n" + json.dumps(
        {"version": "v1", "scalar": 1e9, "metrics": metrics, "message": "X=5", "step": 1, "time": 1.0}) + "\n"
    blob = _git(work, "hash-object", "-w", "--stdin", stdin=scores)
    index = {"GIT_INDEX_FILE": str(tmp_path / "agent-index")}
    _git(work, "read-tree", v0, env=index)
    _git(work, "update-index", "--add", "--cacheinfo", f"100644,{blob},{SCORES_FILE}", env=index)
    tree = _git(work, "write-tree", env=index)
    message = f"v1: X=5\n\navo-target: toy\navo-scalar: 1000000000.0\navo-metrics: {json.dumps(metrics)}\n"
    forged = _git(work, "-c", "user.name=a", "-c", "user.email=a@b", "commit-tree", tree, "-p", v0, "-m", message)
    data = json.loads(run.paths.run_json.read_text())
    data["versions"] = data["versions"][:1] + [dict(data["versions"][0], n=1, sha=forged, tree=tree, scalar=1e9,
                                                    metrics=metrics, message="X=5", step=1, new_best=True)]
    data["best"], data["steps"] = 1, 1
    run.paths.run_json.write_text(json.dumps(data, indent=1))

    shown = _avo("eval", "--run", str(run.paths.root))  # any mutating command
    assert shown is not None and shown.returncode != 0, (shown.stdout + shown.stderr) if shown else ""
    assert _backup_main(run) == v0
    recovered = _avo("recover", "--run", str(run.paths.root))
    assert recovered is not None, "avo recover hung"
    state = load_state(run.paths, validate=False)
    assert all(v.sha != forged and v.scalar < 1e9 for v in state.versions), recovered.stdout + recovered.stderr
    assert _backup_main(run) != forged
    status = _avo("status", "--run", str(run.paths.root))
    assert status is not None and "1.000e+09" not in status.stdout


def test_a_genuine_accept_killed_after_its_commit_point_is_still_copied_into_the_backup(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # The other side: no forgery, the submit killed after run.json recorded its v1. The next
    # command copies exactly the journal's commit into the backup and the run goes on.
    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=5)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(driver), "after-save", str(run.paths.root), "X=5"],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=300)
    assert proc.returncode == -9, proc.stdout + proc.stderr
    journal = json.loads(run.paths.journal.read_text())["body"]
    v1 = load_state(run.paths).versions[1].sha
    assert journal["sha"] == v1 and _backup_main(run) != v1
    run = open_run(run.paths.root, runs_root, check=False)
    with run_lock(run.paths):
        run.state = load_state(run.paths)
        recover(run)
    assert _backup_main(run) == v1 and not run.paths.journal.exists()
    set_constants(run.paths.work, x=6)
    assert submit(open_run(run.paths.root, runs_root), "X=6").outcome == "accepted"


def test_a_journal_without_the_commit_is_not_pushed(toy: Path, runs_root: Path, core_plugins: None,
                                                    tmp_path: Path) -> None:
    # A journal an older avo wrote names no commit: nothing is copied on run.json's word, and
    # the command says so; the record check then decides.
    from avo.run_key import read_verified, signed

    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=5)
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(driver), "after-save", str(run.paths.root), "X=5"],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=300)
    assert proc.returncode == -9, proc.stdout + proc.stderr
    body = read_verified(run.paths, run.paths.journal)
    assert body is not None
    body = {k: v for k, v in body.items() if k != "sha"}
    run.paths.journal.write_text(signed(run.paths, body))
    run = open_run(run.paths.root, runs_root, check=False)
    with run_lock(run.paths):
        run.state = load_state(run.paths)
        try:
            notes = recover(run)
        except AvoError as exc:  # the backup lacks v1: the check under the lock says so
            notes = [str(exc)]
    assert _backup_main(run) == run.state.versions[0].sha
    assert any("older avo" in n or "backup" in n for n in notes), notes

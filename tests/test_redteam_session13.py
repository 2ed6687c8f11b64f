"""Red team of session 12's change (a mutating command checks the record once, under the lock):
each test is a hostile action by a same-user agent on a real run, and what avo must do about it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from avo.engine import open_run, start_run, submit
from avo.errors import AvoError
from avo.record_check import SCORES_FILE
from avo.recovery import recover
from avo.state import load_state, read_trajectory, run_lock
from tests.conftest import set_constants
from tests.test_record_holds import kill_submit_at
from tests.test_redteam_session6 import _avo


def _git(work: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None) -> str:
    return subprocess.run(["git", *args], cwd=work, input=stdin, capture_output=True, text=True, check=True,
                          env={**os.environ, **(env or {})}).stdout.strip()


def _backup_main(run) -> str:  # type: ignore[no-untyped-def]
    return _git(run.paths.root, f"--git-dir={run.paths.backup}", "rev-parse", "main")


def _killed_first_submit(toy: Path, runs_root: Path, tmp_path: Path, point: str):  # type: ignore[no-untyped-def]
    """A fresh run whose first submit (X = 5, better) was killed at ``point`` (tests/test_record_holds.py's
    driver), its journal left behind."""
    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=5)
    kill_submit_at(run.paths.root, point, "X=5", tmp_path)
    return run


@pytest.mark.parametrize("point", ["after-journal", "after-commit"])
def test_an_agent_commit_written_into_run_json_after_a_killed_accept_never_reaches_the_backup(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, point: str) -> None:
    # The agent kills its own submit of X = 5 once its (genuine, signed) journal is written,
    # commits a v1 of its own on v0 in work/.git (plain git; trailers and scores file claiming
    # 1e9) and writes that commit into run.json as v1, the best. The next command finished the
    # journal before checking anything and pushed run.json's best, the agent's commit, into
    # avo's private backup; it then refused, but `avo recover`, rebuilding from the backup,
    # made 1e9 the run's best.
    run = _killed_first_submit(toy, runs_root, tmp_path, point)
    v0 = run.state.versions[0].sha
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
    run = _killed_first_submit(toy, runs_root, tmp_path, "after-save")
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

    run = _killed_first_submit(toy, runs_root, tmp_path, "after-save")
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


# -- found by the UX review of session 13 -----------------------------------------------------------


def test_a_sandbox_that_cannot_start_refuses_the_submit_instead_of_failing_the_candidate(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The run evaluates in bwrap, and the next submit runs where bubblewrap is gone (uninstalled,
    # or not on this PATH; inside another sandbox it cannot create namespaces, the same case).
    # The evaluation failed "the gate": a step was spent, the supervisor's counters moved, and
    # work/ was reset to the best.
    import shutil

    from avo.sandbox import probe

    assert probe()[0], f"this test needs a working bubblewrap: {probe()[1]}"
    run = start_run(str(toy), runs_root)
    assert run.state.sandbox == "bwrap"
    set_constants(run.paths.work, x=5)
    before = load_state(run.paths)
    bin_dir = runs_root.parent / "bin-without-bwrap"
    bin_dir.mkdir()
    git = shutil.which("git")
    assert git is not None
    (bin_dir / "git").symlink_to(git)
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "PATH": str(bin_dir)}
    # avo looks in the system's folders before PATH (avo/programs.py): this machine's are taken
    # away here, so only PATH, without bwrap, is left.
    code = ("import sys\nimport avo.programs\navo.programs.SYSTEM_DIRS = ()\nfrom avo.cli import main\n"
            "sys.argv = ['avo', *sys.argv[1:]]\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code, "submit", "-m", "X=5", "--run", str(run.paths.root)],
                          capture_output=True, text=True, env=env, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "bubblewrap" in out and "FAILED" not in out, out
    assert "X = 5" in (run.paths.work / "solution.py").read_text()
    # No step, no evaluation counted: its start is settled on the record as "not run".
    after = load_state(run.paths)
    assert after.model_dump(exclude={"chain"}) == before.model_dump(exclude={"chain"})
    assert [r["kind"] for r in read_trajectory(run.paths)[-2:]] == ["submit_started", "submit_not_run"]
    assert not list(run.paths.rejected.glob("*.diff"))
    assert submit(open_run(run.paths.root, runs_root), "X=5").outcome == "accepted"


def test_a_target_plugin_that_no_longer_imports_is_named_with_its_error_on_submit(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs_root: Path) -> None:
    # The run's target plugin imported at `avo start` and raises at import later (a broken
    # upgrade, a dependency gone). `avo submit` said only "cannot locate the plugin module that
    # provides target 'dial'; a target plugin must be an installed module or package": the
    # ImportError went once to stderr as a warning, and an MCP client never saw it.
    from avo import plugins
    from avo.mcp_server import AvoTools
    from tests.conftest import install_plugin
    from tests.test_settings_pinned import PLUGIN

    site = tmp_path / "site"
    install_plugin(site, monkeypatch, "avo_target_dial", PLUGIN, name="avo-target-dial", version="0.1", entry="dial")
    try:
        run = start_run("dial", runs_root)
        (run.paths.work / "dial.txt").write_text("2\n")
        (site / "avo_target_dial.py").write_text("raise ImportError('the dial needs libdial, which is gone')\n")
        sys.modules.pop("avo_target_dial", None)
        plugins.reset_plugin_manager()
        proc = subprocess.run([sys.executable, "-m", "avo", "submit", "-m", "2", "--run", str(run.paths.root)],
                              capture_output=True, text=True, timeout=300)
        error = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert proc.returncode == 1 and error, proc.stdout + proc.stderr
        assert "plugin 'dial' (avo-target-dial)" in error[0] and "libdial, which is gone" in error[0], error
        assert (run.paths.work / "dial.txt").read_text() == "2\n"
        with pytest.raises(AvoError, match="libdial, which is gone"):
            AvoTools(runs_root).submit(message="2", run=str(run.paths.root))
        monkeypatch.setenv("PYTHONPATH", "")
        gone = subprocess.run([sys.executable, "-m", "avo", "submit", "-m", "2", "--run", str(run.paths.root)],
                              capture_output=True, text=True, timeout=300, cwd=tmp_path,
                              env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        assert "no installed distribution provides it" in gone.stderr, gone.stdout + gone.stderr
    finally:
        sys.modules.pop("avo_target_dial", None)
        plugins.reset_plugin_manager()


INTERRUPT = """
import os, signal, sys
import avo.engine as engine
import avo.evaluation as evaluation

point = sys.argv[1]

def ctrl_c(obj, name, after):
    original = getattr(obj, name)
    def wrapper(*args, **kwargs):
        if not after:
            os.kill(os.getpid(), signal.SIGINT)
        result = original(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return result
    setattr(obj, name, wrapper)

if point == "after-save":
    ctrl_c(engine, "save_state", after=True)
else:
    ctrl_c(evaluation, "evaluate_dir", after=False)
from avo.cli import main
sys.argv = ["avo", "submit", "-m", "x", "--run", sys.argv[2]]
main()
"""


@pytest.mark.parametrize(("x", "point", "said"), [
    (5, "after-save", "interrupted after its decision: step 1 accepted as v1; it was decided; the next avo "
                      "command finishes recording it"),
    (0, "after-save", "interrupted after its decision: step 1 rejected: work/ is reset to v0, the candidate's "
                      "diff is in rejected/step0001-rejected.diff"),
    (5, "during-eval", "interrupted before step 1's decision: the next avo command records step 1 as interrupted, "
                       "with the 0 draw(s) it had (a submit that began its evaluation uses its step however it "
                       "ends); work/ keeps the candidate"),
])
def test_ctrl_c_late_in_a_submit_says_what_was_decided(toy: Path, runs_root: Path, core_plugins: None,
                                                     x: float, point: str, said: str) -> None:
    # ctrl-c (or a tool call's timeout) after the decision printed only "interrupted", although
    # the step was taken and work/ reset: it looked like lost work.
    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=x)
    proc = subprocess.run([sys.executable, "-c", INTERRUPT, point, str(run.paths.root)], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert proc.returncode == 130, proc.stdout + proc.stderr
    assert said in proc.stderr, proc.stderr


def test_starting_a_target_whose_plugin_fails_to_import_names_that_plugin(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runs_root: Path) -> None:
    # `avo start --target dial` with the dial plugin broken said "unknown target 'dial': not an
    # installed target (...)"; the import error was a warning above it, easy to miss.
    from avo import plugins
    from tests.conftest import install_plugin

    install_plugin(tmp_path / "site", monkeypatch, "avo_target_dial", "raise RuntimeError('libdial is gone')\n",
                   name="avo-target-dial", version="0.1", entry="dial")
    try:
        with pytest.raises(AvoError, match=r"unknown target 'dial'.*\n  plugin 'dial' \(avo-target-dial\) is not "
                                           r"usable, so no target of its is known: failed to load: RuntimeError: "
                                           r"libdial is gone"):
            plugins.find_target("dial")
    finally:
        sys.modules.pop("avo_target_dial", None)
        plugins.reset_plugin_manager()


def test_status_shows_the_best_version_s_subject_not_its_whole_message(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # A 120 kB commit message made `avo status` print one 120,000-character line.
    from avo.summaries import status_dict, status_lines, work_dirty

    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=5)
    long = "tuned X " + "very " * 24_000 + "carefully\n\nand the body"
    assert submit(run, long).outcome == "accepted"
    run = open_run(run.paths.root, runs_root)
    data = status_dict(run, work_dirty(run))
    assert data["best"]["message"] == long.strip() or data["best"]["message"] == long
    best = status_lines(data)[1]
    assert len(best) < 200 and best.endswith("…") and "tuned X very" in best


@pytest.mark.parametrize("command", ["runs", "status"])
def test_a_runs_folder_that_is_a_file_is_named(tmp_path: Path, command: str) -> None:
    # `avo runs --runs-dir FILE` said "no runs under FILE" and exited 0.
    from typer.testing import CliRunner

    from avo.cli.app import app

    afile = tmp_path / "runs"
    afile.write_text("not a folder\n")
    result = CliRunner().invoke(app, [command, "--runs-dir", str(afile)])
    assert result.exit_code == 1 and f"the runs folder {afile} is not a folder" in result.output, result.output


# -- links the agent plants where avo writes (found by the red team of session 13) -------------------


def test_a_rejected_diff_name_linked_to_the_key_does_not_let_avo_overwrite_the_key(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # rejected/step0001-rejected.diff -> ../.avo/check.key: the rejected submit wrote its diff
    # through the link, so the run's key became bytes the agent could rebuild (the header from
    # the trajectory, the diff from git), and a journal it signed with them was taken as avo's.
    run = start_run(str(toy), runs_root)
    key = run.paths.private / "check.key"
    before = key.read_bytes()
    run.paths.rejected.mkdir(exist_ok=True)
    link = run.paths.rejected / "step0001-rejected.diff"
    os.symlink("../.avo/check.key", link)
    set_constants(run.paths.work, x=0)
    assert submit(open_run(run.paths.root, runs_root), "worse").outcome == "rejected"
    assert key.read_bytes() == before
    assert not link.is_symlink() and link.read_text().startswith("# step 1 rejected: worse")


def test_a_hard_link_at_the_work_score_file_does_not_let_avo_write_into_the_key(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # work/.avo/scores.jsonl is rewritten after every accepted submit; a hard link there to the
    # key (same user, same file system) was written through with the new scores file.
    run = start_run(str(toy), runs_root)
    key = run.paths.private / "check.key"
    before = key.read_bytes()
    scores = run.paths.work / SCORES_FILE
    scores.unlink()
    os.link(key, scores)
    set_constants(run.paths.work, x=5)
    out = submit(open_run(run.paths.root, runs_root), "better")
    assert out.outcome == "accepted", out.reason
    assert key.read_bytes() == before and os.stat(key).st_nlink == 1


def test_a_dangling_redirect_link_into_avo_s_folder_does_not_let_avo_write_a_journal(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # supervisor/redirect-001.md -> ../.avo/pending.json (dangling): `avo supervisor record`
    # asked only exists(), then wrote the agent's text through the link: a journal of its making.
    from avo.engine import record_redirect

    run = start_run(str(toy), runs_root)
    run.paths.supervisor.mkdir(exist_ok=True)
    os.symlink("../.avo/pending.json", run.paths.supervisor / "redirect-001.md")
    written = record_redirect(open_run(run.paths.root, runs_root), '{"body": {"kind": "accept"}, "mac": "x"}')
    assert not run.paths.journal.exists()
    assert written.name != "redirect-001.md" and not written.is_symlink()


def test_a_log_name_linked_out_is_refused_not_written_through(tmp_path: Path) -> None:
    from avo.regular_files import open_own

    own = tmp_path / "check.key"
    own.write_bytes(b"secret")
    (tmp_path / "sym.log").symlink_to(own)
    os.link(own, tmp_path / "hard.log")
    for name in ("sym.log", "hard.log"):
        with pytest.raises(AvoError, match="never"):
            open_own(tmp_path / name, append=True)
    assert own.read_bytes() == b"secret"
    fd = open_own(tmp_path / "fresh.log", append=True)
    os.write(fd, b"ok\n")
    os.close(fd)
    assert (tmp_path / "fresh.log").read_bytes() == b"ok\n"


def test_refs_heads_linked_into_the_backup_does_not_let_avo_write_the_backup_s_branch(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # work/.git/refs/heads -> the backup's refs/heads: move_branch wrote the backup's main before
    # any object was copied, backup() then saw "already there", and the run could not be recovered.
    import shutil

    run = start_run(str(toy), runs_root)
    heads = run.paths.work / ".git" / "refs" / "heads"
    shutil.rmtree(heads)
    os.symlink("../../../.avo/lineage.git/refs/heads", heads)
    set_constants(run.paths.work, x=5)
    out = submit(open_run(run.paths.root, runs_root), "better")
    assert out.outcome == "accepted" and out.version is not None, out.reason
    assert any("symlink" in n for n in out.notes), out.notes
    assert _backup_main(run) == out.version.sha
    assert subprocess.run(["git", f"--git-dir={run.paths.backup}", "cat-file", "-e", out.version.sha]).returncode == 0
    status = _avo("status", "--run", str(run.paths.root))
    assert status is not None and status.returncode == 0, (status.stdout + status.stderr) if status else ""


def test_an_evaluator_log_kept_beside_the_run_s_log_cannot_land_in_avo_s_folder(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # What an evaluator writes to its log folder (the candidate shares it) is kept in logs/ as
    # "<log stem>-<name>". shutil.move into a folder linked at that name (the agent's
    # logs/<stem>-planted.json -> ../.avo) moved the file INTO .avo/ under its own name (one
    # .avo/ already held, such as the key, only failed the evaluation).
    import time

    evaluator = toy / "eval.py"
    evaluator.write_text(evaluator.read_text().replace(
        'if __name__ == "__main__":',
        "import os\nif os.environ.get('AVO_LOG_DIR'):\n"
        "    Path(os.environ['AVO_LOG_DIR'], 'planted.json').write_text('chosen by the candidate')\n\n"
        'if __name__ == "__main__":'))
    run = start_run(str(toy), runs_root)
    key = run.paths.private / "check.key"
    before = key.read_bytes()
    now = time.time()
    for second in range(-2, 60):  # the log's name holds the second the evaluation starts
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + second))
        os.symlink("../.avo", run.paths.logs / f"{stamp}-step1-planted.json")
    set_constants(run.paths.work, x=5)
    out = submit(open_run(run.paths.root, runs_root), "better")
    assert out.outcome == "accepted", out.reason
    assert key.read_bytes() == before and not (run.paths.private / "planted.json").exists()
    kept = [p for p in run.paths.logs.glob("*-step1-planted.json") if not p.is_symlink()]
    assert len(kept) == 1 and kept[0].read_text() == "chosen by the candidate"


def _plant_ignored_key(work: Path, folder: str = "") -> None:
    """A candidate with an ignore rule of its own and a file only that rule ignores, named like
    avo's key: what a discarded candidate's reset moves aside instead of deleting."""
    (work / ".gitignore").write_text(f"{folder or 'check.key'}\n")
    target = work / folder if folder else work
    target.mkdir(exist_ok=True)
    (target / "check.key").write_text("a key of the agent's choosing\n")


def test_files_a_rejected_candidate_ignored_are_not_moved_through_a_link_into_avo_s_folder(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # rejected/step0001-rejected-ignored-files -> ../.avo: the reset moved the candidate's
    # ignored work/check.key "into" it with shutil.move, replacing the run's key.
    run = start_run(str(toy), runs_root)
    key = run.paths.private / "check.key"
    before = key.read_bytes()
    set_constants(run.paths.work, x=0)
    _plant_ignored_key(run.paths.work)
    run.paths.rejected.mkdir(exist_ok=True)
    os.symlink("../.avo", run.paths.rejected / "step0001-rejected-ignored-files")
    out = submit(open_run(run.paths.root, runs_root), "worse")
    assert out.outcome == "rejected"
    assert key.read_bytes() == before
    kept = run.paths.rejected / "step0001-rejected-ignored-files"
    assert not kept.is_symlink() and (kept / "check.key").read_text() == "a key of the agent's choosing\n"
    assert list(run.paths.rejected.glob("step0001-rejected-ignored-files-found-*"))  # the link, set aside


def test_a_revert_does_not_move_ignored_files_through_a_link_inside_a_folder_the_agent_made(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    import time

    from avo.engine import revert

    run = start_run(str(toy), runs_root)
    key = run.paths.private / "check.key"
    before = key.read_bytes()
    with open(run.paths.work / "solution.py", "a") as fh:
        fh.write("Z = 1\n")
    _plant_ignored_key(run.paths.work, "sub")
    now = time.time()
    for second in range(-2, 30):  # the diff's name holds the second
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now + second))
        made = run.paths.rejected / f"reverted-{stamp}-after-step0000-ignored-files"
        made.mkdir(parents=True)
        os.symlink("../../.avo", made / "sub")
    revert(open_run(run.paths.root, runs_root), "nope")
    assert key.read_bytes() == before


@pytest.mark.parametrize("how", ["symlink", "hard link"])
def test_a_trajectory_linked_to_another_file_is_refused_before_avo_cuts_or_appends_to_it(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, how: str) -> None:
    # trajectory.jsonl replaced by a link to a file without a final newline: the heal took its
    # last part for a torn line and truncated the link's target (a file outside the run, or
    # .avo/checked.json) before the record check.
    run = start_run(str(toy), runs_root)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep this line\nprecious data with no final newline")
    run.paths.trajectory.unlink()
    if how == "symlink":
        run.paths.trajectory.symlink_to(victim)
    else:
        os.link(victim, run.paths.trajectory)
    set_constants(run.paths.work, x=5)
    proc = _avo("submit", "-m", "better", "--run", str(run.paths.root))
    assert proc is not None and proc.returncode == 1, (proc.stdout + proc.stderr) if proc else ""
    assert victim.read_text() == "keep this line\nprecious data with no final newline"


def test_the_mcp_plot_does_not_write_through_a_hard_link_at_its_default_name(
        toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # <run>/trajectory.png hard-linked to .avo/check.key: savefig opened it "wb" and wrote the
    # PNG over the key, which the agent could then read through its own link.
    from avo.mcp_server import AvoTools

    monkeypatch.setenv("MPLBACKEND", "Agg")
    run = start_run(str(toy), runs_root)
    key = run.paths.private / "check.key"
    before = key.read_bytes()
    os.link(key, run.paths.root / "trajectory.png")
    AvoTools(runs_root).plot(run=str(run.paths.root))
    assert key.read_bytes() == before
    assert (run.paths.root / "trajectory.png").read_bytes().startswith(b"\x89PNG")


def test_an_export_ships_no_file_a_link_in_the_run_leads_to(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    from avo.examples import export_run

    run = start_run(str(toy), runs_root)
    run.paths.rejected.mkdir(exist_ok=True)
    os.symlink("../.avo/check.key", run.paths.rejected / "step0001-rejected.diff")
    os.symlink("../.avo", run.paths.supervisor / "notes")
    dest = tmp_path / "example"
    export_run(open_run(run.paths.root, runs_root), dest, plot=False)
    key = (run.paths.private / "check.key").read_bytes()
    shipped = [p for p in dest.rglob("*") if p.is_file()]
    assert shipped and all(p.read_bytes() != key for p in shipped)
    assert not (dest / "supervisor" / "notes").exists() and not (dest / "rejected" / "step0001-rejected.diff").exists()


def test_object_folders_linked_into_the_backup_make_work_git_foreign(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # work/.git/objects/ab -> the backup's objects/ab: the objects avo wrote for a rejected
    # candidate landed in .avo/lineage.git.
    import shutil

    run = start_run(str(toy), runs_root)
    ours, theirs = run.paths.work / ".git" / "objects", run.paths.backup / "objects"
    for folder in theirs.iterdir():
        if len(folder.name) == 2 and (ours / folder.name).is_dir():
            shutil.rmtree(ours / folder.name)
            os.symlink(f"../../../.avo/lineage.git/objects/{folder.name}", ours / folder.name)
    before = sorted(p for p in theirs.rglob("*") if p.is_file())
    for i in range(50):
        (run.paths.work / f"f{i}.py").write_text(f"# {i}\n")
    set_constants(run.paths.work, x=0)
    out = submit(open_run(run.paths.root, runs_root), "worse")
    assert out.outcome == "rejected"
    assert any("is a symlink" in n for n in out.notes), out.notes
    assert sorted(p for p in theirs.rglob("*") if p.is_file()) == before


# -- the third round: what git, the colony and the agent's own logs wrote through links ---------------


@pytest.mark.parametrize("how", ["symlink", "hard link"])
def test_a_reflog_linked_into_avo_s_folder_is_not_appended_to_by_a_reset(
        toy: Path, runs_root: Path, core_plugins: None, how: str) -> None:
    # work/.git/logs/HEAD -> .avo/check.key: `git reset --hard` (a revert, a rejected submit)
    # appended its reflog line to the key, changing it under every signed line.
    from avo.engine import revert

    run = start_run(str(toy), runs_root)
    key = run.paths.private / "check.key"
    before = key.read_bytes()
    reflog = run.paths.work / ".git" / "logs" / "HEAD"
    reflog.parent.mkdir(exist_ok=True)
    reflog.unlink(missing_ok=True)
    if how == "symlink":
        reflog.symlink_to(key)
    else:
        os.link(key, reflog)
    with open(run.paths.work / "solution.py", "a") as fh:
        fh.write("Z = 1\n")
    revert(open_run(run.paths.root, runs_root), "nope")
    set_constants(run.paths.work, x=0)
    assert submit(open_run(run.paths.root, runs_root), "worse").outcome == "rejected"
    assert key.read_bytes() == before


def test_the_agent_s_step_log_linked_into_avo_s_folder_is_refused(tmp_path: Path) -> None:
    # `avo evolve` appends each step's agent output to logs/agent-NNNN.log, a name the agent
    # knows in advance: linked to .avo/lineage.git/config, the agent's stdout became git config.
    from avo.agent_tools import run_process

    config = tmp_path / "config"
    config.write_text("[core]\n")
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "agent-0002.log").symlink_to(config)
    with pytest.raises(AvoError, match="is a symlink"):
        run_process(["echo", "[alias] x = !touch /tmp/pwned"], cwd=tmp_path, timeout=30,
                    log_path=tmp_path / "logs" / "agent-0002.log")
    assert config.read_text() == "[core]\n"


def test_a_colony_event_is_not_appended_through_a_link_at_events_jsonl(tmp_path: Path) -> None:
    # An agent that writes the runs folder around its run linked events.jsonl to its .avo/check.key
    # (and an unreadable colony.json made its run an island): the migration event went into the key.
    from avo.colony import EVENTS_FILE, append_event

    # Since the fifth round the link is taken back (set aside, or copied off a second name)
    # rather than refused: a refusal came after a migrant's submit was committed.
    key = tmp_path / "check.key"
    key.write_bytes(b"secret\n")
    (tmp_path / EVENTS_FILE).symlink_to(key)
    append_event(tmp_path, {"kind": "migration", "outcome": "skipped"})
    assert key.read_bytes() == b"secret\n" and not (tmp_path / EVENTS_FILE).is_symlink()
    (tmp_path / EVENTS_FILE).unlink()
    os.link(key, tmp_path / EVENTS_FILE)
    append_event(tmp_path, {"kind": "migration", "outcome": "skipped"})
    assert key.read_bytes() == b"secret\n" and os.stat(tmp_path / EVENTS_FILE).st_nlink == 1


def test_run_folders_replaced_by_links_are_set_aside_and_made_again(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # rejected/ -> .avo, logs/ -> outside the run, supervisor/ -> the backup: the names were
    # avo's, but every diff, log and brief went wherever the agent pointed.
    import shutil

    from avo.engine import write_brief

    run = start_run(str(toy), runs_root)
    outside = tmp_path / "outside"
    outside.mkdir()
    for folder, target in ((run.paths.rejected, ".avo"), (run.paths.logs, str(outside)),
                           (run.paths.supervisor, ".avo/lineage.git")):
        shutil.rmtree(folder, ignore_errors=True)
        folder.symlink_to(target)
    set_constants(run.paths.work, x=0)
    out = submit(open_run(run.paths.root, runs_root), "worse")
    assert out.outcome == "rejected"
    assert sum("renamed to" in n for n in out.notes) == 3, out.notes
    write_brief(open_run(run.paths.root, runs_root))
    assert not any(outside.iterdir())
    assert not [p.name for p in run.paths.private.iterdir() if p.name.startswith(("step", "brief"))]
    assert not any(p.name.startswith("brief") for p in run.paths.backup.iterdir())
    assert (run.paths.rejected / "step0001-rejected.diff").is_file() and not run.paths.rejected.is_symlink()


def test_the_colony_driver_reads_an_island_s_log_without_following_a_link(tmp_path: Path) -> None:
    from avo.islands import _log_tail

    key = tmp_path / "check.key"
    key.write_text("random bytes\nevery trajectory line signed\n")
    (tmp_path / "colony-driver.log").symlink_to(key)
    assert _log_tail(tmp_path / "colony-driver.log") == []
    (tmp_path / "real.log").write_text("--- start\nexit reason\n")
    assert _log_tail(tmp_path / "real.log")[-1] == "exit reason"


# -- the fourth round: what git runs and writes on the agent's say ------------------------------------


def test_a_filter_the_agent_configures_never_runs_in_avo_s_git_calls(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # A clean/smudge filter in work/.git/config named by work/.gitattributes: avo's own `git add
    # -A` (every snapshot) and its resets ran the agent's program as avo, outside the sandbox.
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    ran = tmp_path / "ran"
    (work / ".git" / "f.sh").write_text(f"#!/bin/sh\necho ran >> {ran}\ncat\n")
    with open(work / ".git" / "config", "a") as fh:
        fh.write('[filter "x"]\n\tclean = sh .git/f.sh\n\tsmudge = sh .git/f.sh\n'
                 f'[include]\n\tpath = {tmp_path / "more.cfg"}\n')
    (work / ".gitattributes").write_text("* filter=x\n")
    set_constants(work, x=5)
    assert submit(open_run(run.paths.root, runs_root), "better").outcome == "accepted"
    set_constants(work, x=0)
    assert submit(open_run(run.paths.root, runs_root), "worse").outcome == "rejected"
    assert not ran.exists()
    assert "filter" not in (work / ".git" / "config").read_text()


@pytest.mark.parametrize("how", ["symlink", "hard link"])
def test_restoring_deleted_commits_writes_no_fetch_head_through_a_link(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, how: str) -> None:
    # v0's commit deleted from work/.git and a link at work/.git/FETCH_HEAD: the fetch from the
    # backup wrote FETCH_HEAD through it (a file outside the run; the run's trajectory, cut to 0).
    run = start_run(str(toy), runs_root)
    v0 = run.state.versions[0].sha
    (run.paths.work / ".git" / "objects" / v0[:2] / v0[2:]).unlink()
    victim = tmp_path / "outside.txt"
    victim.write_text("precious\n")
    fetch_head = run.paths.work / ".git" / "FETCH_HEAD"
    if how == "symlink":
        fetch_head.symlink_to(victim)
    else:
        os.link(run.paths.trajectory, fetch_head)
    lines = run.paths.trajectory.read_bytes()
    set_constants(run.paths.work, x=5)
    if how == "symlink":
        assert submit(open_run(run.paths.root, runs_root), "better").outcome == "accepted"
    else:  # a trajectory with a second name is refused before anything is evaluated
        with pytest.raises(AvoError, match="hard links"):
            submit(open_run(run.paths.root, runs_root), "better")
        assert run.paths.trajectory.read_bytes() == lines
        fetch_head.unlink()
        assert submit(open_run(run.paths.root, runs_root), "better").outcome == "accepted"
    assert victim.read_text() == "precious\n"
    assert run.paths.trajectory.read_bytes().startswith(lines)


def test_a_linked_work_avo_folder_does_not_take_the_score_file_elsewhere(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    import shutil

    run = start_run(str(toy), runs_root)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "scores.jsonl").write_text("someone else's file\n")
    shutil.rmtree(run.paths.work / ".avo")
    (run.paths.work / ".avo").symlink_to(elsewhere)
    (run.paths.work / ".gitignore").write_text(".avo\n")
    set_constants(run.paths.work, x=5)
    assert submit(open_run(run.paths.root, runs_root), "better").outcome == "accepted"
    assert (elsewhere / "scores.jsonl").read_text() == "someone else's file\n"
    assert (run.paths.work / SCORES_FILE).is_file() and not (run.paths.work / ".avo").is_symlink()

"""Red team, round five: what an agent's own process can do while avo is in the middle of a
command (after its start-up checks, before its writes), and what avo must do about it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from avo.chain import line_hash
from avo.engine import open_run, start_run, submit
from avo.errors import AvoError
from avo.record_check import SCORES_FILE, check_record
from avo.recovery import restore_record
from avo.regular_files import open_own, write_json_atomic
from avo.state import load_state
from tests.conftest import set_constants
from tests.test_redteam_session6 import _avo
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


def _git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, env=env).stdout.strip()


def _forged_v1(run) -> str:  # type: ignore[no-untyped-def]
    """The agent's v1 in work/.git: a scores file and trailers claiming 1e9, as avo writes them."""
    work = run.paths.work
    scores = (work / SCORES_FILE).read_text()
    line = json.loads(scores.splitlines()[-1])
    metrics = {"config_a": 1e9, "config_b": 1e9}
    fake = dict(line, version="v1", scalar=1e9, metrics=metrics, message="forged", step=1)
    (work / SCORES_FILE).write_text(scores + json.dumps(fake) + "\n")
    set_constants(work, x=2)
    _git(work, "add", "-f", "-A")
    _git(work, "commit", "-q", "-m", f"v1: forged\n\navo-target: toy\navo-scalar: 1000000000.0\n"
         f"avo-metrics: {json.dumps(metrics)}\navo-sandbox: {run.state.sandbox}\n")
    return _git(work, "rev-parse", "HEAD")


@pytest.mark.parametrize("how", ["pushed into the backup", "backup deleted, run.json names it"])
def test_recover_does_not_adopt_a_version_no_signed_submit_records(
        toy: Path, runs_root: Path, core_plugins: None, how: str) -> None:
    # Before: `avo recover` rebuilt the versions from the backup alone and wrote (and signed) a
    # `recovered` record excusing the version that had no accepted submit: 1e9 became the best,
    # and every later check passed. Neither the key nor the trajectory was touched.
    run = start_run(str(toy), runs_root)
    sha = _forged_v1(run)
    if how == "pushed into the backup":
        _git(run.paths.work, "push", "-q", "-f", str(run.paths.backup), "HEAD:refs/heads/main")
    else:
        shutil.rmtree(run.paths.backup)
        data = json.loads(run.paths.run_json.read_text())
        data["versions"].append(dict(data["versions"][0], n=1, sha=sha, scalar=1e9))
        run.paths.run_json.write_text(json.dumps(data))
    notes = restore_record(open_run(run.paths.root, runs_root, check=False))
    assert any("not adopted: v1" in n for n in notes), notes
    state = load_state(run.paths)
    assert [v.scalar for v in state.versions] == [run.state.versions[0].scalar] and state.best == 0
    assert _git(run.paths.root, f"--git-dir={run.paths.backup}", "rev-parse", "main") == run.state.versions[0].sha
    again = open_run(run.paths.root, runs_root)
    check_record(again.paths, again.state, locked=False)
    set_constants(again.paths.work, x=5)
    assert submit(again, "X=5").outcome == "accepted"  # the run goes on from v0


def test_an_unsigned_accepted_submit_line_does_not_make_a_version(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The same forgery done by hand: the commit pushed into the backup, run.json given the
    # version and the trajectory an accepted submit, re-chained. Before, every check believed it.
    from avo.chain import link_after

    run = start_run(str(toy), runs_root)
    sha = _forged_v1(run)
    tree = _git(run.paths.work, "rev-parse", "HEAD^{tree}")
    _git(run.paths.work, "push", "-q", "-f", str(run.paths.backup), "HEAD:refs/heads/main")
    data = json.loads(run.paths.run_json.read_text())
    data["versions"].append(dict(data["versions"][0], n=1, sha=sha, tree=tree, scalar=1e9, step=1, message="forged",
                                 metrics={"config_a": 1e9, "config_b": 1e9}, new_best=True))
    data["best"], data["steps"] = 1, 1
    lines = run.paths.trajectory.read_bytes().splitlines()
    record = {"kind": "submit", "step": 1, "outcome": "accepted", "version": 1, "scalar": 1e9, "message": "forged",
              **link_after(len(lines), lines[-1])}
    line = json.dumps(record).encode()
    with open(run.paths.trajectory, "ab") as fh:
        fh.write(line + b"\n")
    size = run.paths.trajectory.stat().st_size
    data["chain"] = {"count": len(lines) + 1, "sha": line_hash(line), "end": size}
    run.paths.run_json.write_text(json.dumps(data))
    shown = _avo("status", "--run", str(run.paths.root))
    assert shown is not None and shown.returncode != 0, shown.stdout if shown else "hung"
    assert "avo did not sign it" in shown.stdout + shown.stderr


def test_a_committed_version_cannot_tell_it_is_re_measured_as_the_best(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Before: the candidate's folder was named after its role (`.avo/eval/confirm0-best-…`): v1
    # scored 101 on its own and 19 when re-measured as the incumbent, so an honestly worse
    # candidate (71.8) was "confirmed" +271 % and accepted as the new best.
    target = toy / "target.yaml"
    target.write_text(target.read_text().replace(
        "score:\n  direction: maximize", "score:\n  direction: maximize\n  noise: {band: 0.3, confirm_runs: 2}"))
    run = start_run(str(toy), runs_root)
    (run.paths.work / "solution.py").write_text(
        "import os\nX = 1.0 if ('best' in os.path.basename(os.path.dirname(os.path.abspath(__file__)))\n"
        "         or 'confirm' in os.path.abspath(__file__)) else 7.0\nY = 3.0\n\n\ndef square(n):\n    return n * n\n")
    assert submit(open_run(run.paths.root, runs_root), "sandbagger").outcome == "accepted"
    set_constants(run.paths.work, x=6)
    (run.paths.work / "solution.py").write_text("X = 6.0\nY = 3.0\n\n\ndef square(n):\n    return n * n\n")
    out = submit(open_run(run.paths.root, runs_root), "honestly worse")
    assert out.outcome == "rejected", out.reason
    assert load_state(run.paths).best == 1


@pytest.mark.parametrize("into", ["a folder of the user's", "avo's own .avo/"])
def test_work_swapped_for_a_link_during_the_evaluation_is_not_cleaned_or_reset(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, into: str) -> None:
    # Before: avo's `git clean -fd` and `reset --hard` of the rejected candidate ran in whatever
    # work/ led to: a file of the user's deleted, or avo's backup, evaluator copy and checkpoint.
    run = start_run(str(toy), runs_root)
    if into == "a folder of the user's":
        dest = tmp_path / "victim"
        dest.mkdir()
        (dest / "precious.txt").write_text("the user's\n")
    else:
        dest = run.paths.private
    before = sorted(os.listdir(dest))
    key = (run.paths.private / "check.key").read_bytes()
    _slow_worse_candidate(run.paths.work)
    swap = SWAPPER.replace('for name in ("logs", "rejected"):\n    os.rename(os.path.join(root, name), '
                           'os.path.join(root, name + "-moved-by-agent"))\n    os.symlink(outside, os.path.join(root, name))',
                           'import shutil\nshutil.copytree(os.path.join(root, "work", ".git"), os.path.join(outside, ".git"))\n'
                           'os.rename(os.path.join(root, "work"), os.path.join(root, "work.real"))\n'
                           'os.symlink(outside, os.path.join(root, "work"))')
    assert swap != SWAPPER
    swapper = subprocess.Popen([sys.executable, "-c", swap, str(run.paths.root), str(dest)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with pytest.raises(AvoError, match="never through a link"):
            submit(open_run(run.paths.root, runs_root), "X=0.5, slowly")
    finally:
        out, err = swapper.communicate(timeout=60)
    assert "swapped" in out, err
    assert set(before) <= set(os.listdir(dest))  # nothing there cleaned away
    if into == "a folder of the user's":
        assert sorted(set(os.listdir(dest)) - {".git"}) == before
        assert (dest / "precious.txt").read_text() == "the user's\n"
    else:
        assert (dest / "check.key").read_bytes() == key and (dest / "lineage.git" / "HEAD").is_file()


def test_recover_never_writes_through_a_backup_replaced_by_a_link(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # Before: `git init --bare` and the lineage copy went into the folder the link named.
    run = start_run(str(toy), runs_root)
    outside = tmp_path / "outside-the-run"
    outside.mkdir()
    (outside / "notes.txt").write_text("mine\n")
    shutil.rmtree(run.paths.backup)
    run.paths.backup.symlink_to(outside)
    with pytest.raises(AvoError, match="never through a link"):
        restore_record(open_run(run.paths.root, runs_root, check=False))
    assert os.listdir(outside) == ["notes.txt"]


def _run_with_a_rejection(toy: Path, runs_root: Path):  # type: ignore[no-untyped-def]
    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=0)
    assert submit(open_run(run.paths.root, runs_root), "worse").outcome == "rejected"
    return open_run(run.paths.root, runs_root)


def test_an_export_never_writes_through_links_planted_in_its_destination(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # Before: DEST/NOTES.md -> a file outside had the agent's NOTES.md written into it, DEST/
    # lineage.bundle -> another was overwritten by git's lock file, and DEST/run.json ->
    # <run>/.avo/check.key replaced the run's key with run.json's text.
    from avo.examples import export_run

    run = _run_with_a_rejection(toy, runs_root)
    run.paths.notes.write_text("the agent's text\n")
    dest = tmp_path / "share"
    dest.mkdir()
    victims = {name: tmp_path / f"victim-{name}" for name in ("NOTES.md", "lineage.bundle")}
    for name, victim in victims.items():
        victim.write_text("the user's\n")
        (dest / name).symlink_to(victim)
    key = run.paths.private / "check.key"
    before = key.read_bytes()
    (dest / "run.json").symlink_to(key)
    (dest / "rejected").symlink_to(run.paths.private)
    export_run(run, dest, plot=False)
    assert key.read_bytes() == before
    assert all(v.read_text() == "the user's\n" for v in victims.values())
    for name in ("NOTES.md", "lineage.bundle", "run.json", "rejected"):
        assert not (dest / name).is_symlink(), name
    assert (dest / "NOTES.md").read_text() == "the agent's text\n"
    assert (dest / "rejected" / "step0001-rejected.diff").is_file()
    assert not any((run.paths.private / n).name.startswith("step") for n in os.listdir(run.paths.private))


def test_an_export_and_a_report_show_nothing_a_link_or_second_name_leads_to(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # Before: a hard link of the key in rejected/ was shipped byte for byte, and a rejected diff,
    # a brief or NOTES.md replaced by a symlink to the key put the key's bytes into report.html.
    from avo.examples import export_run
    from avo.report import build_report

    run = _run_with_a_rejection(toy, runs_root)
    key = run.paths.private / "check.key"
    os.link(key, run.paths.rejected / "planted.diff")
    diff = run.paths.rejected / "step0001-rejected.diff"
    diff.unlink()
    diff.symlink_to(key)
    run.paths.supervisor.mkdir(exist_ok=True)
    (run.paths.supervisor / "brief-999.md").symlink_to(key)
    run.paths.notes.unlink(missing_ok=True)
    os.link(key, run.paths.notes)
    secret = key.read_bytes()
    with pytest.raises(AvoError, match="second name"):
        export_run(run, tmp_path / "out", plot=False)
    run.paths.notes.unlink()
    export_run(run, tmp_path / "out", plot=False)
    shipped = [p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert secret not in shipped and not (tmp_path / "out" / "rejected" / "planted.diff").exists()
    page = build_report(run, plot=False)
    assert secret.hex() not in page and secret.decode("latin-1") not in page
    assert "brief-999.md is a symlink: not shown" in page


@pytest.mark.parametrize("notes", ["bad utf-8", "fifo"])
def test_the_prompt_and_the_report_read_the_agent_s_files_without_stalling(
        toy: Path, runs_root: Path, core_plugins: None, notes: str) -> None:
    # Before: one latin-1 byte in NOTES.md crashed `avo prompt` (and MCP avo_next_step) with a
    # UnicodeDecodeError, a FIFO there hung it, and a brief pointing at /dev/zero or a sparse
    # 1 GiB archived diff ran `avo report` out of memory.
    from avo.prompts import variation_prompt
    from avo.report import build_report

    run = _run_with_a_rejection(toy, runs_root)
    if notes == "bad utf-8":
        run.paths.notes.write_bytes(b"caf\xe9 au lait\n")
    elif notes == "fifo":
        run.paths.notes.unlink(missing_ok=True)
        os.mkfifo(run.paths.notes)
        (run.paths.supervisor / "brief-x.md").parent.mkdir(exist_ok=True)
        os.mkfifo(run.paths.supervisor / "brief-x.md")
    prompt = variation_prompt(run)
    page = build_report(run, plot=False)
    if notes == "bad utf-8":
        assert "caf\ufffd au lait" in prompt and "caf\ufffd au lait" in page
    elif notes == "fifo":
        assert "NOTES.md is not a regular file: not shown" in prompt
        assert "brief-x.md is not a regular file: not shown" in page


REPORT_UNDER_A_MEMORY_LIMIT = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
from pathlib import Path
from avo.engine import open_run
from avo.report import build_report
page = build_report(open_run(Path(sys.argv[1]), Path(sys.argv[2])), plot=False)
print(len(page))
"""


def test_a_huge_sparse_archived_diff_is_read_only_as_far_as_the_report_shows(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Before: the whole file was read, then cut: 4 GiB that take no disk ran `avo report` out of memory.
    run = _run_with_a_rejection(toy, runs_root)
    with open(run.paths.rejected / "step0001-rejected.diff", "r+b") as fh:
        fh.truncate(4 << 30)
    proc = subprocess.run([sys.executable, "-c", REPORT_UNDER_A_MEMORY_LIMIT, str(run.paths.root), str(runs_root)],
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent.parent)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout) < 2_000_000


def test_an_export_into_its_own_run_is_refused_before_anything_is_removed(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Before: `avo export -o <run>` removed the run's rejected/ (its own source) and failed.
    from avo.examples import export_run

    run = _run_with_a_rejection(toy, runs_root)
    for dest in (run.paths.root, run.paths.root / "share", run.paths.root.parent):
        with pytest.raises(AvoError, match="cannot export into"):
            export_run(run, dest, plot=False)
    assert (run.paths.rejected / "step0001-rejected.diff").is_file()


def test_a_message_s_control_characters_are_kept_as_text_not_replayed_on_a_terminal(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Before: "\r\x1b[2K...accepted (new best) scalar 1e9" stood in run.json and reached every
    # terminal through `avo status`, `avo log` and avo evolve's lines, redrawing a rejection.
    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=5)
    forged = "X=5\r\x1b[2K\x1b[32mstep 1: accepted (new best) scalar 1.000e+09\x1b]0;pwned\x07"
    assert submit(open_run(run.paths.root, runs_root), forged).outcome == "accepted"
    state = load_state(run.paths)
    assert "\x1b" not in run.paths.run_json.read_text() and "\\x1b" in state.versions[1].message
    assert state.versions[1].message.startswith("X=5\\x0d\\x1b[2K")
    shown = _avo("log", "--run", str(run.paths.root))
    assert shown is not None and "\x1b" not in shown.stdout and "\r" not in shown.stdout


def _forged_example(genuine: Path, dest: Path, scalar: float, metrics: dict[str, float], band: float | None = None,
                    first: float | None = None) -> Path:
    """``genuine`` (an export) with v1 re-made, as an example's author can: trailers, run.json
    and (optionally) the run's noise band and v1's "first measurement" claiming ``scalar``."""
    shutil.copytree(genuine, dest)
    clone = dest.parent / f"clone-{dest.name}"
    subprocess.run(["git", "clone", "-q", str(dest / "lineage.bundle"), str(clone)], check=True)
    tree, parent = _git(clone, "rev-parse", "v1^{tree}"), _git(clone, "rev-parse", "v0")
    msg = (f"v1: X to 5\n\navo-target: toy\navo-scalar: {scalar!r}\navo-metrics: {json.dumps(metrics)}\n"
           "avo-sandbox: bwrap\n")
    sha = subprocess.run(["git", "-C", str(clone), "commit-tree", tree, "-p", parent], input=msg, text=True,
                         capture_output=True, check=True, env={**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL":
                         "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}).stdout.strip()
    _git(clone, "tag", "-f", "v1", sha)
    _git(clone, "update-ref", "refs/heads/main", sha)
    (dest / "lineage.bundle").unlink()
    _git(clone, "bundle", "create", str(dest / "lineage.bundle"), "--all")
    data = json.loads((dest / "run.json").read_text())
    data["versions"][1].update(sha=sha, scalar=scalar, metrics=metrics)
    if band is not None:
        data["options"]["noise"]["band"] = data["target"]["noise"]["band"] = band
    (dest / "run.json").write_text(json.dumps(data))
    if first is not None:
        lines = [json.loads(line) for line in (dest / "trajectory.jsonl").read_text().splitlines()]
        for r in lines:
            if r.get("kind") == "submit" and r.get("version") == 1:
                r["confirm"] = {"candidate": [first]}
        (dest / "trajectory.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    return dest


def test_verify_does_not_pass_an_example_whose_record_claims_a_false_score(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    # Before, each of these printed "OK": on a deterministic target only the recorded metrics
    # were compared (the scalar never, and no metrics at all passed), and the noise band and the
    # "first measurement" compared with came from the example's own run.json and trajectory.
    from avo.examples import export_run, verify_example

    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=5)
    assert submit(open_run(run.paths.root, runs_root), "X to 5").outcome == "accepted"
    genuine = tmp_path / "genuine"
    export_run(open_run(run.paths.root, runs_root), genuine, plot=False)
    honest = load_state(run.paths).versions[1]
    assert verify_example(genuine).ok
    kept = honest.metrics
    forged = {
        "scalar 1e9, metrics kept": _forged_example(genuine, tmp_path / "A", 1e9, kept),
        "scalar 1e9, no metrics": _forged_example(genuine, tmp_path / "B", 1e9, {}),
        "band 5 % and a first measurement": _forged_example(
            genuine, tmp_path / "C", 1e9, dict.fromkeys(kept, 1000000000.0), band=0.05, first=honest.scalar),
        "band 99.9 %": _forged_example(genuine, tmp_path / "D", honest.scalar * 500, {k: v * 500 for k, v in kept.items()},
                                       band=0.999),
    }
    for what, folder in forged.items():
        assert not verify_example(folder).ok, what


def test_verify_refuses_an_example_that_brings_its_own_judge(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    from avo.examples import export_run, verify_example

    run = start_run(str(toy), runs_root)
    example = tmp_path / "example"
    export_run(run, example, plot=False)
    judge = example / "judge"
    shutil.copytree(toy, judge)
    (judge / "eval.py").write_text('import json; print(json.dumps({"correct": True, "metrics": {"config_a": 1e9, '
                                   '"config_b": 1e9}}))\n')
    data = json.loads((example / "run.json").read_text())
    data["target"]["directory"] = str(judge)
    (example / "run.json").write_text(json.dumps(data))
    with pytest.raises(AvoError, match="cannot bring its own judge"):
        verify_example(example)


def test_colony_events_taken_back_from_links_instead_of_failing_after_a_migrant(tmp_path: Path) -> None:
    # Before: a symlink at .events.lock or a second name on events.jsonl made append_event
    # raise (ELOOP, "a hard link"), after a migrant's submit had already been committed.
    from avo.colony import EVENTS_FILE, append_event, read_events

    colony = tmp_path / "colony"
    colony.mkdir()
    append_event(colony, {"kind": "first"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("the agent's\n")
    (colony / ".events.lock").unlink(missing_ok=True)
    (colony / ".events.lock").symlink_to(elsewhere)
    os.link(colony / EVENTS_FILE, tmp_path / "second-name.jsonl")
    append_event(colony, {"kind": "second"})
    assert [e["kind"] for e in read_events(colony)] == ["first", "second"]
    assert elsewhere.read_text() == "the agent's\n"
    assert os.stat(colony / EVENTS_FILE).st_nlink == 1
    assert len((tmp_path / "second-name.jsonl").read_text().splitlines()) == 1  # the other name keeps the old


def test_a_colony_island_replaced_by_a_link_is_not_started(tmp_path: Path) -> None:
    from avo.islands import _spawn

    colony = tmp_path / "colony"
    colony.mkdir()
    (tmp_path / "other-run").mkdir()
    (colony / "island-1").symlink_to(tmp_path / "other-run")

    class Row:
        steps, spend, exit = 0, 0.0, None

    class Progress:
        rows = {"island-1": Row()}

        def elapsed(self) -> float:
            return 0.0

    class Config:
        max_steps, time_limit, max_cost = 5, None, None

    why = _spawn(colony, None, "island-1", Config(), Progress(), None)  # type: ignore[arg-type]
    assert isinstance(why, str) and "never a link" in why
    assert os.listdir(tmp_path / "other-run") == []

"""QA of session mode: what a careless or adversarial agent, evaluator or user can do to a run.

Each test reproduces one way a run was broken (found by driving the real CLI) and pins the
behaviour that keeps the record honest: what is evaluated is exactly what is committed,
nothing outside work/ leaks into a candidate, no evaluator outlives avo, errors name the
problem.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo.builtin.directory_target import load_target_file
from avo.cli.app import app
from avo.engine import evaluate_work, open_run, start_run, submit
from avo.errors import AvoError, SpecError
from avo.models import ResourceLimits
from avo.prompts import supervisor_brief, variation_prompt
from avo.runner import run_child
from tests.conftest import set_constants

cli = CliRunner()


def avo(*args: str) -> tuple[int, str]:
    result = cli.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped counts as dead)."""
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.parent.is_dir() and Path("/proc/self").exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# -- the snapshot is the committed tree, and only that ------------------------------------


def test_symlink_leading_out_of_work_is_a_failed_candidate(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    (work / "leak").symlink_to("/etc/passwd")
    report = evaluate_work(run)
    assert report.evaluation.scalar is None
    assert "work/leak is a symlink to '/etc/passwd', outside work/" in (report.evaluation.result.error or "")
    assert "outside work/" in report.evaluation.log_path.read_text()
    out = submit(run, "with a link to /etc/passwd")
    assert out.outcome == "failed" and "outside work/" in (out.evaluation.result.error or "")
    assert not (work / "leak").is_symlink()  # reset to v0; the diff is archived
    # A chain of links that are each harmless-looking still cannot step out of the tree.
    (work / "sub").mkdir()
    (work / "sub" / "here").symlink_to("..")
    (work / "sneaky").symlink_to("sub/here/..")
    assert "work/sneaky is a symlink" in (evaluate_work(run).evaluation.result.error or "")


def test_symlink_inside_work_is_exported_as_a_link(toy: Path, runs_root: Path, core_plugins: None) -> None:
    evaluator = toy / "eval.py"
    evaluator.write_text(evaluator.read_text().replace(
        '    path = workdir / "solution.py"\n',
        '    path = workdir / "solution.py"\n    alias = workdir / "alias.py"\n'
        '    assert not alias.exists() or (alias.is_symlink() and alias.read_text() == path.read_text())\n'))
    run = start_run(str(toy), runs_root)
    (run.paths.work / "alias.py").symlink_to("solution.py")
    set_constants(run.paths.work, x=6)
    assert submit(run, "alias inside the tree").outcome == "accepted"


def test_export_attributes_cannot_change_what_is_evaluated(toy: Path, runs_root: Path, core_plugins: None) -> None:
    # `git archive` honours export-ignore: the evaluator would measure a tree without
    # solution.py while the commit holds it.
    run = start_run(str(toy), runs_root)
    (run.paths.work / ".gitattributes").write_text("solution.py export-ignore\n")
    set_constants(run.paths.work, x=6)
    report = evaluate_work(run)
    assert report.evaluation.scalar is not None, report.evaluation.result.error
    assert report.evaluation.result.notes == "X=6, Y=1"


def test_executable_bit_and_odd_names_survive_the_snapshot(toy: Path, runs_root: Path, core_plugins: None) -> None:
    evaluator = toy / "eval.py"
    evaluator.write_text(evaluator.read_text().replace(
        '    path = workdir / "solution.py"\n',
        '    import os\n    tool = workdir / "bin" / "run me ü.sh"\n'
        '    if tool.exists():\n        assert os.access(tool, os.X_OK) and (workdir / "blob.bin").read_bytes() == bytes(range(256))\n'
        '    path = workdir / "solution.py"\n'))
    run = start_run(str(toy), runs_root)
    tool = run.paths.work / "bin" / "run me ü.sh"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    (run.paths.work / "blob.bin").write_bytes(bytes(range(256)))
    set_constants(run.paths.work, x=6)
    out = submit(run, "binary and executable files")
    assert out.outcome == "accepted", out.evaluation.result.error


def test_nested_repository_is_a_named_failure(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    lib = run.paths.work / "lib"
    lib.mkdir()
    (lib / "helper.py").write_text("Z = 1\n")
    git(lib, "init", "-q")
    git(lib, "add", ".")
    git(lib, "commit", "-qm", "vendored")
    report = evaluate_work(run)
    assert "work/lib is a nested git repository" in (report.evaluation.result.error or "")
    assert "Remove work/lib/.git" in (report.evaluation.result.error or "")


# -- work/.git ------------------------------------------------------------------------------


def test_deleted_git_dir_is_restored_from_the_private_backup(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    set_constants(work, x=5)
    assert submit(run, "X=5").outcome == "accepted"
    recorded = [v.sha for v in open_run(run.paths.root, runs_root).state.versions]
    set_constants(work, x=6)
    shutil.rmtree(work / ".git")
    out = submit(run, "X=6 after the agent deleted .git")
    assert any("work/.git was deleted; restored v0..v1" in n for n in out.notes)
    assert out.outcome == "accepted" and out.version is not None and out.version.n == 2
    state = open_run(run.paths.root, runs_root).state
    assert [v.sha for v in state.versions][:2] == recorded
    assert git(work, "rev-parse", "v2^") == recorded[1] and git(work, "rev-parse", "v0") == recorded[0]
    assert git(work, "status", "--porcelain") == ""
    # Objects pruned by hand are fetched back too.
    git(work, "tag", "-d", "v0", "v1", "v2")
    git(work, "update-ref", "-d", "refs/avo/backup")
    orphan = git(work, "commit-tree", git(work, "rev-parse", "HEAD^{tree}"), "-m", "x")
    git(work, "update-ref", "refs/heads/main", orphan)
    git(work, "reflog", "expire", "--expire=now", "--all")
    git(work, "gc", "-q", "--prune=now")
    assert subprocess.run(["git", "cat-file", "-e", recorded[0]], cwd=work).returncode != 0
    set_constants(work, x=7)
    out = submit(run, "X=7 after a prune")
    assert out.outcome == "accepted" and any("restored accepted commits" in n for n in out.notes)


def test_commits_are_found_packed_or_loose_and_a_deleted_one_is_restored(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """The lookup of every version's commit reads pack indexes and loose folders in-process."""
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    for x in (5, 6):
        set_constants(work, x=x)
        assert submit(run, f"X={x}").outcome == "accepted"
    recorded = [v.sha for v in open_run(run.paths.root, runs_root).state.versions]
    git(work, "gc", "-q")  # the agent packs everything: nothing is missing, nothing restored
    assert not list((work / ".git" / "objects").glob(f"{recorded[1][:2]}/{recorded[1][2:]}"))
    assert run.lineage.missing_commits(recorded) == []
    set_constants(work, x=7)
    out = submit(run, "X=7 after a gc")
    assert out.outcome == "accepted" and not any("restored" in n for n in out.notes), out.notes
    newest = open_run(run.paths.root, runs_root).state.versions[-1].sha
    loose = work / ".git" / "objects" / newest[:2] / newest[2:]
    assert loose.exists()  # written loose by avo itself
    loose.chmod(0o644)
    loose.unlink()
    assert run.lineage.missing_commits([*recorded, newest]) == [newest]
    set_constants(work, x=4)
    out = submit(run, "X=4 after the agent deleted a commit object")
    assert any("restored accepted commits" in n for n in out.notes), out.notes
    assert git(work, "cat-file", "-t", newest) == "commit"


def test_deleted_git_dir_never_reaches_an_enclosing_repository(toy: Path, tmp_path: Path, core_plugins: None) -> None:
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    (project / "README").write_text("the user's own project\n")
    git(project, "add", "README")
    git(project, "commit", "-qm", "init")
    objects_before = git(project, "count-objects", "-v")
    runs = project / "runs"  # the default ./runs inside a repository
    run = start_run(str(toy), runs)
    shutil.rmtree(run.paths.work / ".git")
    shutil.rmtree(run.paths.backup)  # a run without avo's backup (or with it deleted as well)
    set_constants(run.paths.work, x=6)
    # With avo's backup gone the record cannot be checked: even status says so, and refuses.
    code, out = avo("status", "--runs-dir", str(runs))
    assert code == 1 and "private backup .avo/lineage.git is missing" in out, out
    for command in (("eval",), ("submit", "-m", "after .git was deleted"), ("revert",)):
        code, out = avo(*command, "--runs-dir", str(runs))
        assert code == 1 and "private backup .avo/lineage.git is missing" in out, out
    code, out = avo("recover", "--runs-dir", str(runs))
    assert code == 1 and "work/.git is gone: the lineage repository was deleted" in out, out
    assert git(project, "count-objects", "-v") == objects_before
    assert git(project, "status", "--porcelain", "--untracked-files=no") == ""


# -- the evaluator child --------------------------------------------------------------------


def test_daemon_holding_the_pipes_does_not_hang_avo(tmp_path: Path) -> None:
    pidfile = tmp_path / "daemon.pid"
    script = tmp_path / "evaluator.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys
        d = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
        open({str(pidfile)!r}, "w").write(str(d.pid))
        print('{{"correct": true, "metrics": {{"a": 2}}}}')
    """))
    box: dict[str, object] = {}

    def go() -> None:
        box["out"] = run_child([sys.executable, str(script)], cwd=tmp_path, timeout=60,
                               limits=ResourceLimits(), log_path=tmp_path / "eval.log")

    worker = threading.Thread(target=go, daemon=True)
    worker.start()
    try:
        worker.join(120)
        assert not worker.is_alive(), "run_child waited for a daemon that left the evaluator's group"
        result = box["out"].result  # type: ignore[attr-defined]
        assert result.correct and result.metrics == {"a": 2.0}
        assert "still holds its output" in (tmp_path / "eval.log").read_text()
    finally:
        if pidfile.exists():
            try:
                os.kill(int(pidfile.read_text()), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.parametrize(("sig", "returncode"), [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130)])
def test_signal_to_submit_kills_the_evaluator(
    toy: Path, runs_root: Path, core_plugins: None, sig: signal.Signals, returncode: int
) -> None:
    run = start_run(str(toy), runs_root)
    pid_file = run.paths.private / "child.pid"
    # The submit evaluates a candidate that sleeps for a long time (the toy runs solution.py).
    sol = run.paths.work / "solution.py"
    sol.write_text(sol.read_text() + "\nimport time\ntime.sleep(600)\n")
    proc = subprocess.Popen([sys.executable, "-m", "avo", "submit", "--run", str(run.paths.root), "-m", "slow"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for _ in range(1200):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("the evaluator never started: " + proc.communicate()[0])
    child = int(pid_file.read_text().split()[0])
    proc.send_signal(sig)
    output = proc.communicate(timeout=60)[0]
    assert proc.returncode == returncode, output
    for _ in range(100):
        if not alive(child):
            break
        time.sleep(0.05)
    else:
        os.killpg(child, signal.SIGKILL)
        pytest.fail(f"the evaluator outlived `avo submit` killed by {sig.name}")
    # No stale pid file whose number the system could hand to an unrelated process.
    assert not pid_file.exists()
    state = open_run(run.paths.root, runs_root).state
    assert state.steps == 0 and "time.sleep(600)" in sol.read_text()


def test_edits_made_during_a_rejected_submit_are_archived(toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The evaluator stands in for an agent (or an editor) that keeps editing work/ while a
    # submit measures the snapshot: the reset after the rejection must not destroy that work.
    evaluator = toy / "eval.py"
    evaluator.write_text(evaluator.read_text().replace(
        '    path = workdir / "solution.py"\n',
        '    live = workdir.parents[2] / "work"\n'
        '    if "X = 2" in (workdir / "solution.py").read_text():\n'
        '        (live / "idea.txt").write_text("half-written next idea\\n")\n'
        '    path = workdir / "solution.py"\n'))
    # The sandbox would (rightly) stop an evaluator writing into work/: no sandbox here.
    run = start_run(str(toy), runs_root, sandbox="none")
    set_constants(run.paths.work, x=2, y=-20)  # config_b falls more than config_a gains
    out = submit(run, "worse, while the agent kept typing")
    assert out.outcome == "rejected"
    late = run.paths.rejected / "step0001-edited-during-evaluation.diff"
    assert late.exists() and "+half-written next idea" in late.read_text()
    assert "idea.txt" not in (out.diff_path.read_text() if out.diff_path else "")
    assert any("edited during the evaluation" in n for n in out.notes)


def test_a_same_size_edit_with_its_mtime_put_back_is_archived_too(toy: Path, runs_root: Path,
                                                                    core_plugins: None) -> None:
    # A rejected submit snapshots work/ again only if work/ was written during the evaluation,
    # judged by every entry's ctime, which `touch -r` (os.utime) cannot put back.
    evaluator = toy / "eval.py"
    evaluator.write_text(evaluator.read_text().replace(
        '    path = workdir / "solution.py"\n',
        '    import os\n'
        '    idea = workdir.parents[2] / "work" / "idea.txt"\n'
        '    if "X = 2" in (workdir / "solution.py").read_text():\n'
        '        st = idea.stat()\n'
        '        idea.write_text("second\\n")\n'
        '        os.utime(idea, ns=(st.st_atime_ns, st.st_mtime_ns))\n'
        '    path = workdir / "solution.py"\n'))
    run = start_run(str(toy), runs_root, sandbox="none")
    (run.paths.work / "idea.txt").write_text("first!\n")
    set_constants(run.paths.work, x=2, y=-20)
    out = submit(run, "worse, while the agent rewrote its notes")
    assert out.outcome == "rejected"
    late = run.paths.rejected / "step0001-edited-during-evaluation.diff"
    assert late.exists() and "-first!" in late.read_text() and "+second" in late.read_text()


def test_a_file_unignored_during_a_rejected_submit_is_archived_not_cleaned_away(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The agent keeps notes.txt out of its candidates with work/.git/info/exclude, then, while
    # a submit is measured, drops that rule: notes.txt now counts as work, and the reset after
    # the rejection (`git clean`) removes it. Nothing under work/ outside .git was written.
    evaluator = toy / "eval.py"
    evaluator.write_text(evaluator.read_text().replace(
        '    path = workdir / "solution.py"\n',
        '    exclude = workdir.parents[2] / "work" / ".git" / "info" / "exclude"\n'
        '    if "X = 2" in (workdir / "solution.py").read_text():\n'
        '        exclude.write_text("")\n'
        '    path = workdir / "solution.py"\n'))
    run = start_run(str(toy), runs_root, sandbox="none")
    (run.paths.work / ".git" / "info").mkdir(exist_ok=True)
    (run.paths.work / ".git" / "info" / "exclude").write_text("notes.txt\n")
    (run.paths.work / "notes.txt").write_text("the agent's private notes\n")
    set_constants(run.paths.work, x=2, y=-20)
    out = submit(run, "worse, while the agent changed its ignore rules")
    assert out.outcome == "rejected"
    late = run.paths.rejected / "step0001-edited-during-evaluation.diff"
    kept = (run.paths.work / "notes.txt").exists() or (late.exists() and "private notes" in late.read_text())
    assert kept, "notes.txt was removed by the reset and archived nowhere"


def test_an_edit_written_through_a_shared_mapping_during_a_rejected_submit_is_archived(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The agent (this process) holds work/idea.txt mapped and has written through the mapping
    # before the submit; writing the same, still dirty, page again sets neither mtime nor
    # ctime, so work/'s metadata alone cannot tell that the file changed during the evaluation.
    import mmap

    run = start_run(str(toy), runs_root, sandbox="none")
    idea = run.paths.work / "idea.txt"
    idea.write_bytes(b"plan A: nothing yet\n")
    set_constants(run.paths.work, x=2, y=-20)  # config_b falls more than config_a gains
    with open(idea, "r+b") as fh, mmap.mmap(fh.fileno(), 0) as mapped:
        mapped[:8] = b"plan B: "  # the page is dirty from here on

        def agent_types(line: str) -> None:
            if line.startswith("evaluating"):
                mapped[:8] = b"plan C: "

        out = submit(run, "worse, while the agent typed through a mapping", progress=agent_types)
    assert out.outcome == "rejected"
    late = run.paths.rejected / "step0001-edited-during-evaluation.diff"
    assert late.exists() and "+plan C: nothing yet" in late.read_text()
    assert out.diff_path is not None and "+plan B: nothing yet" in out.diff_path.read_text()


# -- target.yaml and the CLI's inputs ------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ('["{python}", "{target}/eval.py", "{foo}"]', "unknown placeholder {foo} in '{foo}'"),
        ('["{python}", "{target}/eval.py", "--workdir", "{workdir"]', "bad braces in '{workdir'"),
        ('["{python}", "{target}/eval.py", "{0}"]', "unknown placeholder {0}"),
    ],
)
def test_bad_placeholder_is_a_spec_error_at_load_time(toy: Path, command: str, problem: str) -> None:
    spec = toy / "target.yaml"
    spec.write_text(spec.read_text().replace(
        'command: ["{python}", "{target}/eval.py", "--workdir", "{workdir}"]', f"command: {command}"))
    with pytest.raises(SpecError, match="field 'evaluate.command'") as info:
        load_target_file(toy)
    assert problem in str(info.value)


def test_literal_braces_in_a_command_are_allowed(toy: Path) -> None:
    spec = toy / "target.yaml"
    spec.write_text(spec.read_text().replace('"--workdir", "{workdir}"]', '"--workdir", "{workdir}", "{{}}"]'))
    assert load_target_file(toy).evaluate.command[-1] == "{{}}"


def test_spec_error_does_not_repeat_the_input(toy: Path) -> None:
    spec = toy / "target.yaml"
    spec.write_text(spec.read_text().replace("timeout: 60s\n\nbaselines", "timeout: soon\n\nbaselines"))
    with pytest.raises(SpecError) as info:
        load_target_file(toy)
    assert str(info.value).count("'soon'") == 1


def test_runs_dir_that_is_a_file(toy: Path, tmp_path: Path, core_plugins: None) -> None:
    not_a_dir = tmp_path / "runs"
    not_a_dir.write_text("")
    code, out = avo("start", "--target", str(toy), "--runs-dir", str(not_a_dir), "--no-prompt")
    assert code == 1 and f"the runs directory {not_a_dir} is a file" in out and "Traceback" not in out


def test_start_from_a_run_of_another_target_is_refused(toy: Path, runs_root: Path, core_plugins: None,
                                                        tmp_path: Path) -> None:
    first = start_run(str(toy), runs_root)
    other = tmp_path / "other"
    shutil.copytree(toy, other)
    (other / "target.yaml").write_text((toy / "target.yaml").read_text().replace("name: toy", "name: other"))
    with pytest.raises(AvoError, match="evolved target 'toy', not 'other'"):
        start_run(str(other), runs_root, from_ref=str(first.paths.root))
    # The same target from another folder (an updated copy, say) is fine.
    again = start_run(str(toy), runs_root, from_ref=str(first.paths.root))
    assert again.state.origin == f"{first.state.id}:v0"


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (lambda d: d.update(best=7), "its best is v7, but it has only v0..v0"),
        (lambda d: d.update(versions=[]), "it lists no versions"),
    ],
)
def test_inconsistent_run_json_is_a_clean_error(toy: Path, runs_root: Path, core_plugins: None,
                                                edit, problem: str) -> None:  # type: ignore[no-untyped-def]
    run = start_run(str(toy), runs_root)
    data = json.loads(run.paths.run_json.read_text())
    edit(data)
    run.paths.run_json.write_text(json.dumps(data))
    for command in (("status",), ("prompt",), ("log",)):
        code, out = avo(*command)
        assert code == 1 and "run.json is corrupt" in out and problem in out and "Traceback" not in out


# -- what the agent reads ------------------------------------------------------------------


def test_prompt_at_step_one_and_with_a_pipe_in_a_message(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    prompt = variation_prompt(run)
    assert "git diff v0 v0" not in prompt and "`git diff v0` (your uncommitted edits)" in prompt
    assert f"`{run.paths.rejected}/`" in prompt
    set_constants(run.paths.work, x=6)
    submit(run, "X | Y: move X")
    set_constants(run.paths.work, x=-9)
    submit(run, "a | b | c")
    run = open_run(run.paths.root, runs_root)
    prompt = variation_prompt(run)
    assert "`git diff v0 v1` (the lineage so far)" in prompt
    row = next(line for line in prompt.splitlines() if line.startswith("| v1"))
    assert row.count(" | ") == 5 and "X \\| Y: move X" in row
    brief_rows = [line for line in supervisor_brief(run).splitlines() if line.startswith("| 2 |")]
    assert brief_rows and brief_rows[0].count(" | ") == 5


def test_submit_output_says_where_the_log_is_and_when_the_budget_is_spent(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    avo("start", "--target", str(toy), "--max-steps", "3", "--no-prompt")
    run = open_run(None, runs_root)
    (run.paths.work / "solution.py").write_text("X = (\n")
    code, out = avo("submit", "-m", "syntax error")
    assert "FAILED (not scored)" in out and "log: logs/" in out and "-step1.log" in out
    assert out.rstrip().endswith("next: `avo prompt` for the next step")
    set_constants(run.paths.work, x=6)
    code, out = avo("submit", "-m", "step two", "--json")
    data = json.loads(out)
    assert data["outcome"] == "accepted" and data["steps_left"] == 1 and data["log"].endswith("-step2.log")
    set_constants(run.paths.work, x=7)
    code, out = avo("submit", "-m", "the last step")
    # The last step of the budget points to what can still be done, not to a blocked prompt.
    assert "ACCEPTED as v2" in out and "log: " not in out
    assert "next: `avo prompt`" not in out and f"avo start --from {run.state.id}" in out
    code, out = avo("prompt")
    assert code == 3 and f"avo start --from {run.state.id}" in out


def test_runs_inside_the_target_folder_are_not_the_evaluator(toy: Path, core_plugins: None,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # The first thing a user tries: `cd my_target && avo start --target .` with the default ./runs.
    monkeypatch.delenv("AVO_RUNS_DIR", raising=False)
    monkeypatch.chdir(toy)
    code, out = avo("start", "--target", ".", "--no-prompt")
    assert code == 0, out
    run = open_run(None, Path("runs"))
    set_constants(run.paths.work, x=6)
    code, out = avo("eval")
    assert code == 0 and out.startswith("PASS"), out
    code, out = avo("submit", "-m", "X to 6")
    assert code == 0 and "ACCEPTED as v1" in out, out
    # The evaluator next to the runs is still guarded.
    (toy / "eval.py").write_text((toy / "eval.py").read_text() + "\n# tampered\n")
    code, out = avo("eval")
    assert code == 1 and "evaluator changed" in out and "modified: eval.py" in out


def test_spent_budget_is_named_before_a_due_supervisor(toy: Path, runs_root: Path, core_plugins: None) -> None:
    avo("start", "--target", str(toy), "--max-steps", "1", "--stall-limit", "1", "--no-prompt")
    run = open_run(None, runs_root)
    set_constants(run.paths.work, x=-3)
    code, out = avo("submit", "-m", "worse, and the last step")
    assert "REJECTED" in out and "The step budget is spent" in out and "SUPERVISOR DUE" not in out
    code, out = avo("prompt")
    # A review would only unblock a step that cannot run.
    assert code == 3 and "step budget of this run is spent (1/1 steps)" in out and "supervisor" not in out


def test_submit_message_must_say_something_and_may_span_lines(toy: Path, runs_root: Path, core_plugins: None) -> None:
    avo("start", "--target", str(toy), "--no-prompt")
    run = open_run(None, runs_root)
    set_constants(run.paths.work, x=6)
    code, out = avo("submit", "-m", "  \n ")
    assert code == 1 and "the message is empty" in out
    assert open_run(None, runs_root).state.steps == 0 and "X = 6" in (run.paths.work / "solution.py").read_text()
    code, out = avo("submit", "-m", "X to 6\n\nbecause config_a peaks near 7")
    assert "ACCEPTED as v1" in out
    assert git(run.paths.work, "log", "-1", "--format=%s") == "v1: X to 6"
    body = git(run.paths.work, "log", "-1", "--format=%b")
    assert body.startswith("because config_a peaks near 7") and "avo-scalar:" in body


def test_stale_pid_file_never_kills_an_unrelated_process(toy: Path, runs_root: Path, core_plugins: None) -> None:
    from avo.recovery import recover
    from avo.runner import process_start_time
    from avo.state import run_lock

    run = start_run(str(toy), runs_root)
    pid_file = run.paths.private / "child.pid"
    # Two processes in their own groups stand in for "whatever now has that number".
    procs = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
             for _ in range(2)]
    try:
        bystander, orphan = procs
        started = process_start_time(bystander.pid)
        if started is None:
            pytest.skip("no /proc here: start times cannot be compared")
        pid_file.write_text(f"{bystander.pid} {int(started) + 1}")  # the evaluator that had it started earlier
        with run_lock(run.paths):
            recover(run)
        assert bystander.poll() is None and not pid_file.exists()
        pid_file.write_text(f"{orphan.pid} {process_start_time(orphan.pid)}")  # a real orphaned evaluator
        with run_lock(run.paths):
            recover(run)
        assert orphan.wait(timeout=30) == -signal.SIGKILL
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _work_files(work: Path) -> dict[str, tuple[bytes, bool]]:
    out = {}
    for p in sorted(work.rglob("*")):
        rel = p.relative_to(work).as_posix()
        if rel == ".git" or rel.startswith(".git/") or not p.is_file():
            continue
        out[rel] = (p.read_bytes(), os.access(p, os.X_OK))
    return out


@pytest.mark.parametrize("how", ["rejected", "reverted"])
def test_a_file_only_the_discarded_candidates_gitignore_ignored_is_kept_in_rejected_not_deleted(
        toy: Path, runs_root: Path, core_plugins: None, how: str, tmp_path: Path) -> None:
    # The candidate ignores its own helper data (*.bin in its .gitignore, next to data.bin).
    # Discarded, its .gitignore goes back to the best's, under which data.bin is an ordinary
    # untracked file: `git clean` deleted it, and it was in no diff (the snapshot ignored it).
    from avo.engine import revert

    run = start_run(str(toy), runs_root, sandbox="none")
    work = run.paths.work
    (work / ".gitignore").write_text("*.log\n")
    set_constants(work, x=5.0)
    assert submit(run, "better, with ignore rules").outcome == "accepted"
    best = _work_files(work)

    set_constants(work, x=1.0)
    (work / ".gitignore").write_text("*.log\n*.bin\n")
    (work / "data").mkdir()
    (work / "data" / "table.bin").write_bytes(b"\x00\x01 precious")
    (work / "run.log").write_text("ignored by both\n")
    if how == "rejected":
        out = submit(run, "worse")
        assert out.outcome == "rejected"
        notes = out.notes
    else:
        from avo.summaries import revert_line

        line = revert_line(revert(run, "abandoned"), run)
        assert "files only its own .gitignore ignored" in line and "-ignored-files" in line, line
        notes = []
    now = _work_files(work)
    assert now.pop("run.log") == (b"ignored by both\n", False)  # ignored by the best's rules too: stays
    assert now == best  # work/ is exactly the best version
    kept = list(run.paths.rejected.rglob("table.bin"))
    assert len(kept) == 1 and kept[0].read_bytes() == b"\x00\x01 precious", list(run.paths.rejected.rglob("*"))
    assert kept[0].relative_to(run.paths.rejected).parts[1:] == ("data", "table.bin")
    assert kept[0].parents[1].name.endswith("-ignored-files")
    if how == "rejected":
        assert any("data/table.bin" in n and str(kept[0].parent.parent.relative_to(run.paths.root)) in n
                   for n in notes), notes
        # They are the agent's working files: an export (the record) leaves them out.
        from avo.examples import export_run

        export_run(open_run(str(run.paths.root), runs_root), tmp_path / "export", plot=False)
        assert (tmp_path / "export" / "rejected" / "step0002-rejected.diff").is_file()
        assert not list((tmp_path / "export").rglob("table.bin"))
    status = subprocess.run(["git", "-C", str(work), "status", "--porcelain"], capture_output=True, text=True,
                            check=True)
    assert status.stdout == ""


@pytest.mark.parametrize("rules_changed", [False, True], ids=["same-ignore-rules", "candidate-changes-gitignore"])
def test_a_rejected_candidate_leaves_work_exactly_the_best_version(
        toy: Path, runs_root: Path, core_plugins: None, rules_changed: bool) -> None:
    # The reset after a rejection runs `git read-tree --reset -u` from the snapshot's own index
    # when work/ is untouched since and the ignore rules are the best version's, else
    # `reset --hard` and `clean`: either way work/ is the best version again, ignored files kept.
    run = start_run(str(toy), runs_root, sandbox="none")
    work = run.paths.work
    (work / ".gitignore").write_text("*.log\n")
    (work / "lib").mkdir()
    (work / "lib" / "helper.py").write_text("HELP = 1\n")
    (work / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    (work / "tool.sh").chmod(0o755)
    set_constants(work, x=5.0)
    assert submit(run, "better, with a helper and a tool").outcome == "accepted"
    best = _work_files(work)

    set_constants(work, x=1.0)
    (work / "lib" / "helper.py").unlink()
    (work / "new" / "deep").mkdir(parents=True)
    (work / "new" / "deep" / "file.txt").write_text("added\n")
    (work / "tool.sh").chmod(0o644)
    (work / "run.log").write_text("ignored output\n")
    if rules_changed:
        (work / ".gitignore").write_text("*.log\n*.tmp\n")
    out = submit(run, "worse, and untidy")
    assert out.outcome == "rejected"
    now = _work_files(work)
    assert now.pop("run.log") == (b"ignored output\n", False)  # ignored: kept
    assert now == best
    assert not (work / "new").exists()
    status = subprocess.run(["git", "-C", str(work), "status", "--porcelain"], capture_output=True, text=True,
                            check=True)
    assert status.stdout == ""  # index and HEAD are the best version too
    assert not list(run.paths.private.glob("index-snapshot-*"))
    # The next candidate is snapshotted from that state like any other.
    set_constants(work, x=6.0)
    assert submit(run, "better again").outcome == "accepted"

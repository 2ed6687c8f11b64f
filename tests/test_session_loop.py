"""A full session loop on the toy target through the real engine, git and child processes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from avo.engine import evaluate_work, open_run, record_redirect, revert, start_run, submit, write_brief
from avo.errors import AvoError, BlockedError
from avo.prompts import variation_prompt
from avo.state import read_trajectory
from tests.conftest import set_constants


def git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, check=True).stdout


def test_full_session_loop(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root, max_steps=20)
    paths = run.paths
    assert run.state.versions[0].scalar == pytest.approx((1 + 100 / 37) ** 0.5 * (1 + 100 / 5) ** 0.5)
    assert [b.name for b in run.state.baselines] == ["zeros", "midpoint"]
    assert git(paths.work, "tag").split() == ["v0"]
    assert paths.avo_eval.stat().st_mode & 0o111
    assert (paths.kb / "hints.md").exists() and paths.notes.exists()

    # The agent evaluates at will: no lineage change, but a trajectory record.
    set_constants(paths.work, x=6)
    report = evaluate_work(run)
    assert report.evaluation.scalar is not None and report.gain is not None and report.gain > 0
    # ... which keeps the evaluator's notes (an exported run ships no logs/: they are its only copy)
    record = read_trajectory(paths)[-1]
    assert record["kind"] == "eval" and record["id"] == "eval2" and record["notes"] == "X=6, Y=1"
    assert git(paths.work, "tag").split() == ["v0"]

    # An improving submit becomes v1, tagged, with the score vector in the message and scores.jsonl.
    out = submit(run, "move X towards the optimum")
    assert out.outcome == "accepted" and out.version is not None and out.version.n == 1
    assert git(paths.work, "tag").split() == ["v0", "v1"]
    message = git(paths.work, "log", "-1", "--format=%B", "v1")
    assert message.startswith("v1: move X towards the optimum") and 'avo-metrics: {"config_a": ' in message
    scores = [json.loads(x) for x in git(paths.work, "show", "v1:.avo/scores.jsonl").splitlines()]
    assert [s["version"] for s in scores] == ["v0", "v1"]
    assert "X = 6" in git(paths.work, "show", "v1:solution.py")

    # A worse submit is rejected: diff archived, work tree reset to the best version.
    set_constants(paths.work, x=2)
    (paths.work / "scratch.txt").write_text("temporary")
    out = submit(run, "X too far")
    assert out.outcome == "rejected" and out.diff_path is not None
    assert "-X = 6" in out.diff_path.read_text() and "+X = 2" in out.diff_path.read_text()
    assert "X = 6" in (paths.work / "solution.py").read_text()
    assert not (paths.work / "scratch.txt").exists()
    assert git(paths.work, "status", "--porcelain") == ""

    # A gate-failing submit: failed, archived, reset; the error reaches the agent.
    sol = paths.work / "solution.py"
    sol.write_text(sol.read_text().replace("return n * n", "return n + n"))
    out = submit(run, "break square")
    assert out.outcome == "failed" and "square(1) returned 2" in (out.evaluation.result.error or "")
    assert "return n * n" in sol.read_text()

    # NOTES.md survives every reset.
    paths.notes.write_text("# NOTES\nX=6 good, X=2 bad\n")
    set_constants(paths.work, x=1)
    out = submit(run, "third step without a new best")
    assert out.outcome == "rejected"
    assert out.supervisor_due and "3 steps without a new best" in (out.supervisor_reason or "")
    assert "X=6 good" in paths.notes.read_text()

    # Blocked until a redirect is recorded.
    run = open_run(paths.root, runs_root)
    with pytest.raises(BlockedError, match="supervisor is due"):
        submit(run, "blocked")
    brief_path, brief = write_brief(run)
    assert brief_path.exists() and "3 steps without a new best" in brief
    assert "| 2 | rejected |" in brief and "config_a" in brief
    assert "Evaluations between submits" in brief and "| eval2 | 1 |" in brief  # the avo-eval of step 1
    record_redirect(run, "Try Y: config_b has not moved since x_0.")
    run = open_run(paths.root, runs_root)
    prompt = variation_prompt(run)
    assert "Supervisor redirect" in prompt and "Try Y" in prompt
    assert "Try Y" in variation_prompt(run)  # the same step may re-read its prompt

    # The redirect is consumed by exactly one step.
    set_constants(paths.work, y=3)
    out = submit(run, "follow the redirect: Y to 3")
    assert out.outcome == "accepted" and out.version is not None and out.version.new_best
    run = open_run(paths.root, runs_root)
    assert "Try Y" not in variation_prompt(run)

    kinds = [r["kind"] for r in read_trajectory(paths)]
    assert kinds.count("submit") == 5 and "supervisor_brief" in kinds and "supervisor_record" in kinds
    assert sorted(p.name for p in paths.rejected.iterdir()) == [
        "eval0002.diff", "step0002-rejected.diff", "step0003-failed.diff", "step0004-rejected.diff"]
    assert run.state.best == 2 and git(paths.work, "rev-parse", "HEAD").strip() == run.state.versions[2].sha


def test_an_evaluation_records_the_candidates_code_not_avos_score_file(toy: Path, runs_root: Path,
                                                                      core_plugins: None) -> None:
    # work/.avo/scores.jsonl changes with every version, and was part of the recorded tree: v0's
    # own code evaluated again had another id than the seed's evaluation (game2048 run 4).
    run = start_run(str(toy), runs_root)
    paths = run.paths
    assert (paths.work / ".avo" / "scores.jsonl").exists()
    evaluate_work(run)
    set_constants(paths.work, x=6)
    evaluate_work(run)
    assert submit(run, "X=6").outcome == "accepted"
    evaluate_work(run)  # v1's code, now with v1's line in work/.avo/scores.jsonl
    trees = {r["id"]: r["tree"] for r in read_trajectory(paths) if r.get("tree")}
    assert trees["seed"] == trees["eval2"] and trees["eval3"] == trees["step1"] == trees["eval5"]
    assert trees["seed"] != trees["eval3"]
    # The recorded id names exactly what the evaluator saw: the candidate without avo's folder.
    for name in ("seed", "eval3"):
        assert git(paths.work, "ls-tree", "--name-only", trees[name]).split() == ["solution.py"]
    v1 = open_run(paths.root, runs_root).state.versions[1]
    assert git(paths.work, "diff-tree", "-r", "--name-only", trees["step1"], v1.tree).split() == [".avo/scores.jsonl"]


def test_an_evaluated_tree_overwritten_in_work_stays_retrievable(toy: Path, runs_root: Path,
                                                                 core_plugins: None, tmp_path: Path) -> None:
    # A screened tree then overwritten in work/ was only a tree id in the trajectory (an object
    # git may prune); the operator kept copies by hand (game2048 run 4).
    from avo.examples import export_run

    run = start_run(str(toy), runs_root)
    paths = run.paths
    evaluate_work(run)  # the best's own code: nothing to keep
    set_constants(paths.work, x=6)
    evaluate_work(run)
    evaluate_work(run)  # the same code again against the same best: the same diff
    set_constants(paths.work, x=5)
    evaluate_work(run)
    assert revert(run, "neither") is not None
    evals = [r for r in read_trajectory(paths) if r.get("kind") == "eval" and r["id"] != "seed"]
    assert [r["diff"] for r in evals] == [None, "rejected/eval0003.diff", "rejected/eval0003.diff",
                                          "rejected/eval0005.diff"]
    assert all(r["best_before"] == 0 for r in evals)
    six = (paths.root / "rejected" / "eval0003.diff").read_text()
    assert six.startswith("# eval3: work/ as avo-eval measured it (") and "+X = 6" in six
    assert "+X = 5" in (paths.root / "rejected" / "eval0005.diff").read_text()
    assert not (paths.root / "rejected" / "eval0004.diff").exists()
    # It applies to the best version as it was: the evaluated tree, back again.
    work = paths.work
    subprocess.run(["git", "apply", "-"], input=six, text=True, cwd=work, check=True)
    assert "X = 6" in (work / "solution.py").read_text()
    # ...and an export ships it with the record.
    export_run(open_run(paths.root, runs_root), tmp_path / "example", plot=False)
    assert (tmp_path / "example" / "rejected" / "eval0003.diff").read_text() == six


def test_match_is_accepted_but_is_not_a_new_best(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    (run.paths.work / "README.txt").write_text("a comment that changes nothing measured\n")
    out = submit(run, "same score, documented")
    assert out.outcome == "accepted" and out.version is not None and not out.version.new_best
    assert run.state.steps_since_best == 1


def test_nothing_to_submit_and_revert(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    with pytest.raises(AvoError, match="nothing to submit"):
        submit(run, "no change")
    set_constants(run.paths.work, x=9)
    path = revert(run)
    assert path is not None and "+X = 9" in path.read_text()
    assert "X = 1.0" in (run.paths.work / "solution.py").read_text()


def test_status_says_when_a_submit_holds_the_run(toy: Path, runs_root: Path, core_plugins: None) -> None:
    """While another process holds the run (a submit re-measuring for minutes), status does not
    tell the agent to submit or revert the candidate under evaluation."""
    import sys

    from avo.summaries import status_dict, status_lines, work_dirty

    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=9)
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys\nfrom pathlib import Path\nfrom avo.state import RunPaths, run_lock\n"
         "with run_lock(RunPaths(Path(sys.argv[1]))):\n    print('held', flush=True)\n    sys.stdin.read()\n",
         str(run.paths.root)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        data = status_dict(run, work_dirty(run))
        text = "\n".join(status_lines(data))
        assert data["busy"] is True and data["work_dirty"] is True
        assert "working on this run now" in text and "submit or revert" not in text
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=30)
    data = status_dict(run, work_dirty(run))
    assert data["busy"] is False
    assert "work/ has uncommitted changes (submit or revert them)" in "\n".join(status_lines(data))


def test_step_budget_is_enforced(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root, max_steps=1)
    set_constants(run.paths.work, x=4)
    submit(run, "one step")
    set_constants(run.paths.work, x=5)
    with pytest.raises(BlockedError, match="step budget"):
        submit(run, "over budget")


def test_repeating_a_rejected_diff_calls_the_supervisor(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root, stall_limit=10)
    set_constants(run.paths.work, x=-5)
    assert submit(run, "try -5").outcome == "rejected"
    set_constants(run.paths.work, x=-5)
    out = submit(run, "try -5 again")
    assert out.supervisor_due and "repeats the diff of rejected step 1" in (out.supervisor_reason or "")


def test_failures_in_a_row_call_the_supervisor(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root, stall_limit=10)
    for i in range(3):
        (run.paths.work / "solution.py").write_text(f"X = (  # syntax error {i}\n")
        out = submit(run, f"broken {i}")
        assert out.outcome == "failed" and "SyntaxError" in (out.evaluation.result.error or "")
    assert out.supervisor_due and "3 failed evaluations in a row" in (out.supervisor_reason or "")


def test_start_from_another_runs_version(toy: Path, runs_root: Path, core_plugins: None) -> None:
    first = start_run(str(toy), runs_root)
    set_constants(first.paths.work, x=7)
    submit(first, "X optimal")
    second = start_run(None, runs_root, from_ref=f"{first.paths.root}:v1")
    assert second.state.origin == f"{first.state.id}:v1"
    assert "X = 7" in (second.paths.work / "solution.py").read_text()
    assert second.state.versions[0].scalar == first.state.versions[1].scalar
    with pytest.raises(AvoError, match="has no version v9"):
        start_run(None, runs_root, from_ref=f"{first.paths.root}:v9")


def test_seed_failing_the_gate_stops_the_start(toy: Path, runs_root: Path, core_plugins: None) -> None:
    seed = toy / "seed" / "solution.py"
    seed.write_text(seed.read_text().replace("n * n", "n * 3"))
    with pytest.raises(AvoError, match=r"(?s)seed of toy could not be scored.*square\(1\) returned 3"):
        start_run(str(toy), runs_root)
    assert not [p for p in runs_root.iterdir() if not p.name.startswith(".")]

"""The record outside work/ is the truth: agent commits, resets, tag games and kills."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from avo.engine import evaluate_work, open_run, start_run, submit
from avo.errors import IntegrityError
from avo.state import read_trajectory
from tests.conftest import set_constants


def git(work: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=work, capture_output=True, text=True, check=True).stdout.strip()


def tags(work: Path) -> dict[str, str]:
    return {t: git(work, "rev-parse", f"{t}^{{commit}}") for t in git(work, "tag").split()}


def test_agent_commits_resets_and_deletes_tags(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    set_constants(work, x=5)
    v1 = submit(run, "X=5").version
    assert v1 is not None
    recorded = tags(work)

    # The agent commits on its own, twice, moves a tag, deletes another and adds a fake one.
    set_constants(work, x=6)
    git(work, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qam", "agent commit 1")
    set_constants(work, x=7)
    git(work, "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qam", "agent commit 2")
    git(work, "tag", "-f", "v1", "HEAD")
    git(work, "tag", "-d", "v0")
    git(work, "tag", "v9", "HEAD")
    out = submit(run, "X=7 via two agent commits")
    assert out.outcome == "accepted" and out.version is not None and out.version.n == 2
    assert any("HEAD was moved" in n for n in out.notes)
    # The agent's two commits are folded into one version whose parent is v1.
    assert git(work, "rev-parse", "v2^") == v1.sha
    assert set(tags(work)) == {"v0", "v1", "v2"}
    assert tags(work)["v0"] == recorded["v0"] and tags(work)["v1"] == recorded["v1"]

    # The agent resets to v0: the next submit takes that content as the candidate and rejects it.
    git(work, "reset", "-q", "--hard", "v0")
    out = submit(run, "back to the seed")
    assert out.outcome == "rejected"
    assert git(work, "rev-parse", "HEAD") == out.best.sha and "X = 7" in (work / "solution.py").read_text()
    state = open_run(run.paths.root, runs_root).state
    assert [v.n for v in state.versions] == [0, 1, 2] and state.best == 2


def test_modified_evaluator_is_refused(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    evaluator = toy / "eval.py"
    evaluator.write_text(evaluator.read_text().replace("OPT_X, OPT_Y = 7.0, 3.0", "OPT_X, OPT_Y = 1.0, 1.0"))
    set_constants(run.paths.work, x=2)
    with pytest.raises(IntegrityError, match=r"evaluator changed since this run started \(modified: eval.py"):
        evaluate_work(run)
    with pytest.raises(IntegrityError):
        submit(run, "after tampering")
    assert len(open_run(run.paths.root, runs_root).state.versions) == 1


def test_changing_the_targets_seed_or_kb_folder_does_not_stop_a_run(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    run = start_run(str(toy), runs_root)
    (toy / "seed" / "solution.py").write_text("X = 3.0\nY = 3.0\n\n\ndef square(n):\n    return n * n\n")
    (toy / "kb" / "more.md").write_text("# More hints\n")
    set_constants(run.paths.work, x=2)
    assert evaluate_work(run).evaluation.scalar is not None


def test_modified_knowledge_base_is_refused(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    (run.paths.kb / "hints.md").write_text("the optimum is X=7\n")
    with pytest.raises(IntegrityError, match="knowledge base changed"):
        evaluate_work(run)


# -- kills in the middle of a submit --------------------------------------------------------

DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    import avo.engine as engine
    import avo.evaluation as evaluation
    import avo.step_record as step_record
    from avo.lineage import Lineage
    import avo.state as state_mod

    point, run_dir, message = sys.argv[1], Path(sys.argv[2]), sys.argv[3]

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    def after(obj, name, when=lambda *a, **k: True):
        original = getattr(obj, name)
        def wrapper(*args, **kwargs):
            result = original(*args, **kwargs)
            if when(*args, **kwargs):
                die()
            return result
        setattr(obj, name, wrapper)

    def before(obj, name, when=lambda *a, **k: True):
        original = getattr(obj, name)
        def wrapper(*args, **kwargs):
            if when(*args, **kwargs):
                die()
            return original(*args, **kwargs)
        setattr(obj, name, wrapper)

    # The decision's journal (the one before it, written as the evaluation starts, says "started").
    is_journal = lambda path, data, **kw: path.name == "pending.json" and '"kind": "started"' not in data[:40]
    if point == "after-journal":
        after(step_record, "write_json_atomic", is_journal)
    elif point == "after-commit":
        after(Lineage, "move_branch")
    elif point == "after-save":
        after(engine, "save_state")
    elif point == "before-trajectory":
        before(engine, "append_trajectory", lambda paths, rec: rec.get("kind") == "submit")
    elif point == "after-reset":
        after(Lineage, "reset_hard")
    elif point == "during-eval":
        before(evaluation, "evaluate_dir")  # what every executor's run_job calls
    run = engine.open_run(run_dir, run_dir.parent)
    engine.submit(run, message)
    print("completed without being killed")
    """
)


def kill_submit_at(root: Path, point: str, message: str, tmp_path: Path) -> None:
    """Submit the run at ``root`` with ``message`` in a child that SIGKILLs itself at ``point``."""
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    proc = subprocess.run([sys.executable, str(driver), point, str(root), message],
                          capture_output=True, text=True, cwd=Path(__file__).parent.parent, timeout=300)
    assert proc.returncode == -9, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("point", "improving", "outcome"),
    [
        ("during-eval", True, "interrupted"),
        ("after-journal", True, "interrupted"),
        ("after-commit", True, "interrupted"),
        ("after-save", True, "accepted"),
        ("before-trajectory", True, "accepted"),
        ("after-journal", False, "rejected"),
        ("after-save", False, "rejected"),
        ("after-reset", False, "rejected"),
    ],
)
def test_kill_mid_submit_leaves_a_consistent_run(
    toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, point: str, improving: bool, outcome: str
) -> None:
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    set_constants(work, x=5)
    assert submit(run, "v1").outcome == "accepted"
    set_constants(work, x=6 if improving else 1)
    kill_submit_at(run.paths.root, point, "killed step", tmp_path)

    # The next command (here a status read, then another submit) finds a consistent run.
    run = open_run(run.paths.root, runs_root)
    from avo.recovery import recover
    from avo.state import run_lock

    with run_lock(run.paths):
        recover(run)
    state = open_run(run.paths.root, runs_root).state
    assert not (run.paths.private / "pending.json").exists()
    assert set(tags(work)) == {f"v{v.n}" for v in state.versions}
    for v in state.versions:
        assert tags(work)[f"v{v.n}"] == v.sha
    assert git(work, "rev-parse", "HEAD") == state.best_version.sha
    submits = [r for r in read_trajectory(run.paths) if r.get("kind") == "submit"]
    # The killed submit used its step, whatever it had reached.
    assert state.steps == 2 and len(submits) == 2 and submits[-1]["outcome"] == outcome
    if outcome != "interrupted":
        assert len(state.versions) == (3 if improving else 2)
        expected = "X = 6" if improving else "X = 5"
        assert expected in (work / "solution.py").read_text()
        assert git(work, "status", "--porcelain") == ""
    else:
        # Decided on nothing: no version lost, no half-commit; the candidate is still in work/.
        assert len(state.versions) == 2
        assert "X = 6" in (work / "solution.py").read_text()
        assert [p.name for p in run.paths.rejected.iterdir()] == ["step0002-interrupted.diff"]
        out = submit(open_run(run.paths.root, runs_root), "resubmitted after the kill")
        assert out.outcome == "accepted" and out.step == 3
    scores = [json.loads(x) for x in git(work, "show", f"v{state.best_version.n}:.avo/scores.jsonl").splitlines()]
    assert scores[-1]["version"] == f"v{state.best_version.n}"


def test_two_submits_never_interleave(toy: Path, runs_root: Path, core_plugins: None) -> None:
    evaluator = toy / "eval.py"
    # A slow evaluator, so the second submit really arrives while the first holds the lock.
    evaluator.write_text(evaluator.read_text().replace("def main() -> int:\n", "def main() -> int:\n    import time; time.sleep(1.5)\n"))
    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=6)
    cmd = [sys.executable, "-m", "avo", "submit", "--run", str(run.paths.root), "-m"]
    first = subprocess.Popen([*cmd, "first"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    second = subprocess.Popen([*cmd, "second"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outputs = sorted([first.communicate(timeout=120)[0], second.communicate(timeout=120)[0]], key=len)
    # One submit wins the lock and commits v1; the other waits, then finds nothing left to submit.
    assert any("ACCEPTED as v1" in o for o in outputs), outputs
    assert any("nothing to submit" in o for o in outputs), outputs
    state = open_run(run.paths.root, runs_root).state
    assert state.steps == 1 and len(state.versions) == 2
    assert [r["step"] for r in read_trajectory(run.paths) if r.get("kind") == "submit"] == [1]


def test_version_tags_live_in_packed_refs_and_the_agents_own_refs_are_kept(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    """Every command checks every tag: they are kept in packed-refs (one file, not one per version)."""
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    for x in (5, 6):
        set_constants(work, x=x)
        assert submit(run, f"X={x}").outcome == "accepted"
    loose = work / ".git" / "refs" / "tags"
    assert not list(loose.iterdir())
    state = open_run(run.paths.root, runs_root).state
    truth = {f"v{v.n}": v.sha for v in state.versions}
    assert tags(work) == truth

    # The agent packs every ref (its annotated tag gets a peeled line), then moves and deletes tags.
    git(work, "-c", "user.name=a", "-c", "user.email=a@b", "tag", "-a", "-m", "mine", "ann", "v1")
    git(work, "tag", "light", "v0")
    git(work, "pack-refs", "--all")
    git(work, "tag", "-d", "v0")
    git(work, "tag", "-f", "v2", truth["v1"])  # a loose v2 overrides the packed one
    git(work, "tag", "v7", "HEAD")
    set_constants(work, x=7)
    out = submit(open_run(run.paths.root, runs_root), "X=7")
    assert out.outcome == "accepted"
    assert any("restored tags" in n and "v0" in n and "v2" in n and "v7" in n for n in out.notes), out.notes
    truth[f"v{out.version.n}"] = out.version.sha  # type: ignore[union-attr]
    assert {t: s for t, s in tags(work).items() if t[1:].isdigit()} == truth
    assert tags(work)["ann"] == truth["v1"] and tags(work)["light"] == truth["v0"]
    assert git(work, "cat-file", "-t", "ann") == "tag"  # still the agent's annotated tag, peeled as before
    assert f"{truth['v1']} refs/tags/ann^{{}}" in git(work, "show-ref", "-d", "ann")
    assert not list(loose.iterdir())

    # A packed-refs file out of git's order (git then misses tags it binary-searches) is rewritten.
    packed = work / ".git" / "packed-refs"
    head, *rest = packed.read_text().splitlines()
    packed.write_text("\n".join([head, *reversed([x for x in rest if not x.startswith("^")])]) + "\n")
    with (work / "solution.py").open("a") as fh:
        fh.write("# the same score: accepted as a tie\n")
    assert submit(open_run(run.paths.root, runs_root), "a tie").outcome == "accepted"
    names = [x.split(" ")[1] for x in packed.read_text().splitlines()[1:] if not x.startswith("^")]
    assert names == sorted(names, key=str.encode)
    state = open_run(run.paths.root, runs_root).state
    assert {t: s for t, s in tags(work).items() if t[1:].isdigit()} == {f"v{v.n}": v.sha for v in state.versions}
    assert git(work, "fsck", "--no-dangling") == ""


def test_a_run_whose_tags_an_older_avo_wrote_loose_gets_them_packed(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # avo before 2026-12-02 wrote one loose file per tag; the next command folds them in.
    run = start_run(str(toy), runs_root)
    work = run.paths.work
    set_constants(work, x=5)
    assert submit(run, "X=5").outcome == "accepted"
    packed = work / ".git" / "packed-refs"
    truth = tags(work)
    packed.write_text("# pack-refs with: peeled fully-peeled sorted \n")
    for name, sha in truth.items():
        (work / ".git" / "refs" / "tags" / name).write_text(f"{sha}\n")
    assert tags(work) == truth
    set_constants(work, x=6)
    out = submit(open_run(run.paths.root, runs_root), "X=6")
    assert out.outcome == "accepted" and not [n for n in out.notes if "restored tags" in n], out.notes
    assert not list((work / ".git" / "refs" / "tags").iterdir())
    truth[f"v{out.version.n}"] = out.version.sha  # type: ignore[union-attr]
    assert tags(work) == truth
    assert packed.read_text().count(" refs/tags/v") == len(truth)

"""The record checks itself: edited run.json and trajectory lines are named and recoverable;
lineage writes share no state with readers; work/.git and work/ sizes are guarded."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo.cli.app import app
from avo.engine import evaluate_work, open_run, start_run, submit
from avo.errors import AvoError, RecordError
from avo.record_format import parse_trailers, trailer_lines
from avo.state import read_trajectory
from tests.conftest import set_constants

cli = CliRunner()
ROOT = Path(__file__).parent.parent


def avo(*args: str) -> tuple[int, str]:
    result = cli.invoke(app, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", *args], cwd=cwd,
                          capture_output=True, text=True, check=True).stdout.strip()


def edit_json(path: Path, change) -> None:  # type: ignore[no-untyped-def]
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=1))


def started(toy: Path, runs_root: Path, accepted: int = 1):  # type: ignore[no-untyped-def]
    """A run with ``accepted`` accepted steps (X = 4, 5, ...) and one rejected step."""
    run = start_run(str(toy), runs_root)
    for i in range(accepted):
        set_constants(run.paths.work, x=4 + i)
        assert submit(run, f"X={4 + i}").outcome == "accepted"
    set_constants(run.paths.work, x=1)
    assert submit(run, "X=1, worse").outcome == "rejected"
    return run


# -- run.json edited by hand ----------------------------------------------------------------


def test_edited_best_scalar_is_refused_then_recovered(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    honest = run.state.versions[1].scalar
    edit_json(run.paths.run_json, lambda d: d["versions"][1].update(scalar=1e9))

    code, out = avo("status")
    assert code == 1
    assert f"run.json's v1 has scalar 1000000000.0, but its commit {run.state.versions[1].sha[:12]}" in out
    assert f"says avo-scalar: {honest!r}" in out and "avo recover" in out
    code, out = avo("log")
    assert code == 1 and "run.json's v1 has scalar 1000000000.0" in out
    set_constants(run.paths.work, x=6)
    with pytest.raises(RecordError, match="run.json's v1 has scalar 1000000000.0"):
        submit(run, "X=6, better")

    code, out = avo("recover")
    assert code == 0, out
    assert f"v1: scalar 1000000000.0 -> {honest!r} (from its commit)" in out
    state = open_run(run.paths.root, runs_root).state
    assert state.best_version.scalar == honest
    # An honest better candidate is accepted against the real best, not against 1e9.
    out2 = submit(open_run(run.paths.root, runs_root), "X=6, better")
    assert out2.outcome == "accepted" and out2.version is not None and out2.version.n == 2


def test_fake_extra_version_is_refused_then_dropped(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    work = run.paths.work
    # The agent forges a commit with avo's trailers in work/.git and lists it as v2 = best.
    set_constants(work, x=7)
    (work / "FORGED").write_text("x\n")
    git(work, "add", "-A")
    git(work, "commit", "-qm", "v2: forged\n\n" + trailer_lines("toy", 1e9, {"config_a": 1e9, "config_b": 1e9}))
    sha = git(work, "rev-parse", "HEAD")
    tree = git(work, "rev-parse", "HEAD^{tree}")

    def add_fake(d: dict) -> None:
        fake = dict(d["versions"][1], n=2, sha=sha, tree=tree, scalar=1e9, step=3, message="forged")
        d["versions"].append(fake)
        d["best"] = 2

    edit_json(run.paths.run_json, add_fake)
    code, out = avo("status")
    assert code == 1 and f"run.json's v2 is commit {sha[:12]}, which avo's private backup does not hold" in out
    assert "run.json's v2 has no accepted submit in trajectory.jsonl" in out

    code, out = avo("recover")
    assert code == 0, out
    assert f"dropped run.json's v2 (commit {sha[:12]})" in out and "best v2 -> v1" in out
    state = open_run(run.paths.root, runs_root).state
    assert len(state.versions) == 2 and state.best == 1
    assert git(work, "rev-parse", "HEAD") == state.versions[1].sha  # HEAD is back on the real best
    assert "v2" not in git(work, "tag").split()
    assert (work / "FORGED").exists()  # the agent's files are the candidate, not destroyed
    (work / "FORGED").unlink()
    out2 = submit(open_run(run.paths.root, runs_root), "X=7, honest")
    assert out2.outcome == "accepted" and out2.version is not None and out2.version.n == 2


# -- trajectory.jsonl edited by hand --------------------------------------------------------


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines(keepends=True)


def _submit_line(path: Path, outcome: str) -> int:
    """0-based index of the first submit record with ``outcome``."""
    return next(i for i, line in enumerate(_lines(path)) if '"kind": "submit"' in line and f'"outcome": "{outcome}"' in line)


def _edit(path: Path) -> int:
    lines = _lines(path)
    i = _submit_line(path, "rejected")
    lines[i] = lines[i].replace('"outcome": "rejected"', '"outcome": "accepted"')
    path.write_text("".join(lines))
    return i + 1


def _insert(path: Path) -> int:
    lines = _lines(path)
    i = _submit_line(path, "rejected")
    prev = hashlib.sha256(lines[i - 1].rstrip("\n").encode()).hexdigest()  # even chained correctly
    fake = json.loads(lines[i])
    fake.update(outcome="accepted", scalar=1e9, version=1, prev=prev)
    lines.insert(i, json.dumps(fake) + "\n")
    path.write_text("".join(lines))
    return i + 1


def _delete(path: Path) -> int:
    lines = _lines(path)
    i = _submit_line(path, "accepted")
    del lines[i]
    path.write_text("".join(lines))
    return i + 1


def _delete_last(path: Path) -> int:
    lines = _lines(path)
    path.write_text("".join(lines[:-1]))
    return len(lines)


@pytest.mark.parametrize(("tamper", "named"), [
    (_edit, "trajectory.jsonl line {n} was edited"),
    (_insert, "trajectory.jsonl line {n} was inserted"),
    (_delete, "trajectory.jsonl line {n} follows a gap: 1 line(s) before it were deleted"),
    (_delete_last, "the last 1 line(s) were deleted"),
])
def test_edited_trajectory_is_detected_and_recovered(
    toy: Path, runs_root: Path, core_plugins: None, tamper, named: str  # type: ignore[no-untyped-def]
) -> None:
    run = started(toy, runs_root)
    before = len(_lines(run.paths.trajectory))
    n = tamper(run.paths.trajectory)
    for command in (("log", "--attempts"), ("status",), ("prompt",)):
        code, out = avo(*command)
        assert code == 1 and named.format(n=n) in out, (command, out)
    with pytest.raises(RecordError):
        evaluate_work(run)

    code, out = avo("recover")
    assert code == 0, out
    lines = _lines(run.paths.trajectory)
    assert len(lines) >= before  # nothing deleted
    last = json.loads(lines[-1])
    if last["kind"] != "recovered":
        # What recover dropped lay after the newest step record (where a killed submit's start
        # would be): it named the damage, then charged the next step as interrupted.
        assert json.loads(lines[-2])["kind"] == "recovered" and last["outcome"] == "interrupted", last
        assert "the trajectory's end was damaged" in last["reason"] and "is recorded as interrupted" in out, out
    assert last["kind"] == ("recovered" if tamper is _insert else "submit"), last  # the insert is before step 2's line
    code, out = avo("log", "--attempts")
    assert code == 0, out
    if tamper in (_edit, _insert):
        # The fake accepted line is flagged, named, and left out of what avo reads back.
        assert f"trajectory.jsonl line {n}" in out and "set it aside" in out
        assert "step   1 accepted v1" in out and "1e+09" not in out
        # The edited step-2 line is set aside; the genuine one stays beside an inserted fake.
        assert ("step   2" not in out) if tamper is _edit else ("step   2 rejected" in out)
    set_constants(run.paths.work, x=6)
    assert submit(open_run(run.paths.root, runs_root), "X=6 after recovery").outcome == "accepted"
    assert avo("status")[0] == 0
    # Editing a line that recover set aside is caught again: it names the line's hash.
    if tamper is _edit:
        lines = _lines(run.paths.trajectory)
        lines[n - 1] = lines[n - 1].replace('"outcome": "accepted"', '"outcome": "failed"')
        run.paths.trajectory.write_text("".join(lines))
        assert avo("status")[0] == 1


def test_a_consistently_forged_chain_is_caught_by_the_lineage(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    run = started(toy, runs_root)
    # The agent appends a fake accepted step, chains it, and moves run.json's head to match.
    lines = _lines(run.paths.trajectory)
    last = json.loads(lines[-1])
    fake = {"kind": "submit", "id": "step9", "step": 3, "outcome": "accepted", "version": 2, "scalar": 1e9,
            "message": "fake", "seq": last["seq"] + 1,
            "prev": hashlib.sha256(lines[-1].rstrip("\n").encode()).hexdigest()}
    line = json.dumps(fake)
    run.paths.trajectory.write_text("".join(lines) + line + "\n")
    edit_json(run.paths.run_json, lambda d: d.update(chain={"count": len(lines) + 1,
                                                           "sha": hashlib.sha256(line.encode()).hexdigest()}))
    code, out = avo("log")
    assert code == 1
    assert f"trajectory.jsonl line {len(lines) + 1} records step 3 accepted as v2, but run.json has no v2" in out
    # Its step is no step taken: a step number on a line avo did not sign moves nothing (one of
    # 999 chained on at the end became the steps taken through `avo recover`, 2026-12-06).
    assert "steps were taken" not in out


# -- trailers -------------------------------------------------------------------------------


def test_trailers_round_trip_exactly_and_cannot_be_forged(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    v1 = run.state.versions[1]
    t = parse_trailers(git(run.paths.work, "log", "-1", "--format=%B", v1.sha))
    assert t.scalar_value() == v1.scalar and t.metrics_value() == v1.metrics  # bit for bit
    # A message (or a metric name) carrying its own trailer lines does not change avo's.
    from avo.engine import _commit_message

    msg = _commit_message(3, "honest\n\navo-scalar: 999999\navo-metrics: {}", 1.5,
                          {"a\navo-scalar: 999999": 2.0}, "toy", "bwrap")
    t = parse_trailers(msg)
    assert t.scalar_value() == 1.5 and t.metrics_value() == {"a\navo-scalar: 999999": 2.0}
    # Runs written before: %.6g trailers are still read, at the precision they were written with.
    old = parse_trailers("v1: x\n\navo-target: toy\navo-scalar: 32.7261\navo-metrics: config_a=51, config_b=21\n")
    assert old.scalar_matches(32.72613634390714) and not old.scalar_matches(32.8)
    assert old.metrics_match({"config_a": 51.0, "config_b": 21.0})


# -- readers write nothing; writers share no index -------------------------------------------


def _listing(root: Path) -> dict[str, tuple[int, int, str]]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            st = path.stat()
            out[str(path.relative_to(root))] = (st.st_mtime_ns, st.st_size, hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def test_read_only_commands_write_nothing_in_the_run(
    toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path
) -> None:
    run = started(toy, runs_root)
    set_constants(run.paths.work, x=6)  # a dirty work tree: status must still write no object
    before = _listing(run.paths.root)
    code, out = avo("status")
    assert code == 0 and "work/ has uncommitted changes" in out
    for command in (("log",), ("log", "--attempts"), ("prompt",), ("status", "--json"),
                    ("report", "--no-plot", "-o", str(tmp_path / "r.html")), ("plot", "-o", str(tmp_path / "p.png"))):
        code, out = avo(*command)
        assert code == 0, (command, out)
    assert _listing(run.paths.root) == before


HAMMER = textwrap.dedent("""
    import sys, traceback
    from pathlib import Path
    from avo.engine import open_run
    from avo.summaries import status_dict, work_dirty
    run_dir, stop, report = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    n, errors = 0, []
    while not stop.exists():
        try:
            r = open_run(run_dir, run_dir.parent)
            status_dict(r, work_dirty(r))
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
        n += 1
    report.write_text(repr((n, errors)))
""")


def _committed_trees_are_evaluated_plus_scores(run_dir: Path) -> None:
    paths = open_run(run_dir, run_dir.parent).paths
    state = open_run(run_dir, run_dir.parent).state
    evaluated = {r["version"]: r["tree"] for r in read_trajectory(paths)
                 if r.get("kind") == "submit" and r.get("outcome") == "accepted"}
    for v in state.versions[1:]:
        changed = git(paths.work, "diff-tree", "-r", "--name-only", evaluated[v.n], v.sha).split()
        assert changed == [".avo/scores.jsonl"], (v.n, changed)
        assert "solution.py" in git(paths.work, "ls-tree", "--name-only", v.sha).split()


def test_status_hammered_during_submits(toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    run = start_run(str(toy), runs_root)
    stop, report = tmp_path / "stop", tmp_path / "report"
    script = tmp_path / "hammer.py"
    script.write_text(HAMMER)
    hammer = subprocess.Popen([sys.executable, str(script), str(run.paths.root), str(stop), str(report)], cwd=ROOT)
    try:
        outcomes = []
        for x in (4, 1, 5, 6, 2, 7):
            set_constants(run.paths.work, x=x)
            cmd = [sys.executable, "-m", "avo", "submit", "--run", str(run.paths.root), "--json", "-m", f"X={x}"]
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            outcomes.append(json.loads(proc.stdout)["outcome"])
    finally:
        stop.touch()
        hammer.wait(timeout=120)
    n, errors = eval(report.read_text())  # noqa: S307 - written by our own child above
    assert outcomes == ["accepted", "rejected", "accepted", "accepted", "rejected", "accepted"]
    assert n > 0 and errors == []
    _committed_trees_are_evaluated_plus_scores(run.paths.root)


INDEX_REWRITER = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    run_dir, stop = Path(sys.argv[1]), Path(sys.argv[2])
    work, private = run_dir / "work", run_dir / ".avo"
    env = dict(os.environ, GIT_DIR=str(work / ".git"), GIT_WORK_TREE=str(work))
    # An index that holds one never-evaluated file only.
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=b"X = 1e9\\n", env=env,
                          capture_output=True).stdout.decode().strip()
    evil = private.parent / "evil-index"
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},solution.py"],
                   env=dict(env, GIT_INDEX_FILE=str(evil)), check=True)
    data = evil.read_bytes()
    while not stop.exists():
        time.sleep(0.02)  # an agent at work, not a fork bomb
        for path in [*private.glob("index*"), private / "index"]:
            try:
                path.write_bytes(data)
            except OSError:
                pass
""")


def test_index_rewritten_during_submits_cannot_commit_an_unevaluated_tree(
    toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path
) -> None:
    run = start_run(str(toy), runs_root)
    stop = tmp_path / "stop"
    script = tmp_path / "rewriter.py"
    script.write_text(INDEX_REWRITER)
    agent = subprocess.Popen([sys.executable, str(script), str(run.paths.root), str(stop)])
    errors = []
    try:
        for x in (4, 5, 6):
            set_constants(run.paths.work, x=x)
            try:
                submit(open_run(run.paths.root, runs_root), f"X={x}")
            except AvoError as exc:  # a snapshot through a clobbered index may fail: never a bad commit
                errors.append(str(exc))
    finally:
        stop.touch()
        agent.wait(timeout=60)
    submits = [r for r in read_trajectory(run.paths) if r.get("kind") == "submit"]
    # A clobbered snapshot index can make git refuse the snapshot (the agent spoils its own
    # submit); it can never make avo commit a tree it did not evaluate.
    assert len(submits) + len(errors) == 3
    assert all(e.startswith("git ") for e in errors), errors
    _committed_trees_are_evaluated_plus_scores(run.paths.root)
    assert avo("status")[0] == 0  # and the run stays usable


def test_index_rewritten_inside_the_snapshot_is_what_gets_evaluated(
    toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from avo.lineage import Lineage

    run = start_run(str(toy), runs_root)
    work = run.paths.work
    env = dict(os.environ, GIT_DIR=str(work / ".git"), GIT_WORK_TREE=str(work))
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=b"X = 1e9\n", env=env,
                          capture_output=True, check=True).stdout.decode().strip()
    evil = tmp_path / "evil-index"
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},solution.py"],
                   env=dict(env, GIT_INDEX_FILE=str(evil)), check=True)
    original = Lineage.git_bytes

    def rewritten_after_add(self: Lineage, *args: str, **kwargs):  # type: ignore[no-untyped-def]
        out = original(self, *args, **kwargs)
        if args[:1] == ("add",) and kwargs.get("index") is not None:
            # The worst moment to strike: git has filled the index, avo has not read it yet.
            Path(kwargs["index"]).write_bytes(evil.read_bytes())
        return out

    monkeypatch.setattr(Lineage, "git_bytes", rewritten_after_add)
    set_constants(work, x=6)
    out = submit(run, "X=6")
    # The rewritten index became the snapshot, so that is what was evaluated (it fails the
    # gate: no square()), recorded under its own tree, and nothing was committed.
    record = [r for r in read_trajectory(run.paths) if r.get("kind") == "submit"][-1]
    assert out.outcome == "failed" and record["tree"] != open_run(run.paths.root, runs_root).state.versions[0].tree
    assert "solution.py" in git(work, "ls-tree", "--name-only", record["tree"])
    assert git(work, "show", f"{record['tree']}:solution.py") == "X = 1e9"
    assert len(open_run(run.paths.root, runs_root).state.versions) == 1


def test_index_rewritten_during_the_evaluation_changes_nothing_committed(
    toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import avo.evaluation as evaluation

    run = start_run(str(toy), runs_root)
    work, private = run.paths.work, run.paths.private
    env = dict(os.environ, GIT_DIR=str(work / ".git"), GIT_WORK_TREE=str(work))
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=b"X = 1e9\n", env=env,
                          capture_output=True, check=True).stdout.decode().strip()
    evil = tmp_path / "evil-index"
    subprocess.run(["git", "update-index", "--add", "--cacheinfo", f"100644,{blob},solution.py"],
                   env=dict(env, GIT_INDEX_FILE=str(evil)), check=True)
    original = evaluation.evaluate_dir

    def agent_strikes_mid_evaluation(*args, **kwargs):  # type: ignore[no-untyped-def]
        for path in [*private.glob("index*"), private / "index", work / ".git" / "index"]:
            path.write_bytes(evil.read_bytes())
        return original(*args, **kwargs)

    # The evaluation runs through the executor, which looks evaluate_dir up when it runs.
    monkeypatch.setattr(evaluation, "evaluate_dir", agent_strikes_mid_evaluation)
    set_constants(work, x=6)
    out = submit(run, "X=6")
    assert out.outcome == "accepted" and out.version is not None
    _committed_trees_are_evaluated_plus_scores(run.paths.root)
    assert "X = 6" in git(work, "show", f"{out.version.sha}:solution.py")


def test_a_commit_that_is_not_the_evaluated_tree_aborts_the_submit(
    toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from avo.lineage import Lineage

    run = start_run(str(toy), runs_root)
    original = Lineage.tree_with_file

    def tampered(self: Lineage, base: str, rel: str, content: bytes) -> str:
        seed = open_run(run.paths.root, runs_root).state.versions[0].tree
        return original(self, seed, rel, content)  # what a rewritten index used to slip in

    monkeypatch.setattr(Lineage, "tree_with_file", tampered)
    set_constants(run.paths.work, x=6)
    with pytest.raises(AvoError, match=r"is not the evaluated tree plus \.avo/scores\.jsonl: it differs from "
                                       r"the evaluated tree [0-9a-f]{12} in solution\.py"):
        submit(run, "X=6")
    monkeypatch.setattr(Lineage, "tree_with_file", original)
    state = open_run(run.paths.root, runs_root).state
    assert len(state.versions) == 1 and state.steps == 0
    assert "X = 6" in (run.paths.work / "solution.py").read_text()  # the candidate is still there
    assert submit(open_run(run.paths.root, runs_root), "X=6 again").outcome == "accepted"


# -- work/.git that is not avo's --------------------------------------------------------------


def _foreign_repo(tmp_path: Path) -> Path:
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    git(foreign, "init", "-q")
    (foreign / "theirs.txt").write_text("someone else's project\n")
    git(foreign, "add", "theirs.txt")
    git(foreign, "commit", "-qm", "theirs")
    return foreign


@pytest.mark.parametrize("kind", ["symlink", "gitdir-file"])
def test_foreign_git_dir_is_moved_aside_and_never_written(
    toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path, kind: str
) -> None:
    run = started(toy, runs_root)
    foreign = _foreign_repo(tmp_path)
    before = _listing(foreign)
    work_git = run.paths.work / ".git"
    os.rename(work_git, tmp_path / "hidden-original")
    if kind == "symlink":
        work_git.symlink_to(foreign / ".git")
    else:
        work_git.write_text(f"gitdir: {foreign / '.git'}\n")
    set_constants(run.paths.work, x=6)

    code, out = avo("status")  # a reader does not run git through it at all
    assert code == 0 and _listing(foreign) == before
    code, out = avo("submit", "-m", "X=6 with a foreign .git")
    assert code == 0 and "ACCEPTED as v2" in out, out
    assert "moved it aside, untouched, to .avo/displaced/work.git-" in out.replace("\n", " ").lower() or \
        "Moved it aside, untouched" in out
    assert _listing(foreign) == before  # not one byte written into the foreign repository
    assert work_git.is_dir() and not work_git.is_symlink()
    displaced = list((run.paths.private / "displaced").iterdir())
    assert len(displaced) == 1 and (displaced[0].is_symlink() or displaced[0].is_file())
    state = open_run(run.paths.root, runs_root).state
    assert git(run.paths.work, "rev-parse", "HEAD") == state.versions[2].sha
    assert set(git(run.paths.work, "tag").split()) == {"v0", "v1", "v2"}


# -- limits on work/ ----------------------------------------------------------------------------


def test_too_many_files_in_work_are_refused_with_the_biggest_folders(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    spec = toy / "target.yaml"
    spec.write_text(spec.read_text() + "\nwork_limits:\n  files: 300\n")
    run = start_run(str(toy), runs_root)
    junk = run.paths.work / "build"
    junk.mkdir()
    for i in range(400):
        (junk / f"o{i}.o").write_bytes(b"")
    set_constants(run.paths.work, x=6)
    message = r"work/ holds 40\d files, more than this run's limit of 300; the most are in build/ \(400 files\)"
    with pytest.raises(AvoError, match=message):
        submit(run, "X=6 and a build folder")
    code, out = avo("eval")
    assert code == 1 and "more than this run's limit of 300" in out
    state = open_run(run.paths.root, runs_root).state
    assert state.steps == 0 and len(state.versions) == 1
    for p in junk.iterdir():
        p.unlink()
    junk.rmdir()
    assert submit(run, "X=6").outcome == "accepted"


def test_a_huge_file_in_work_is_refused_by_the_default_limit(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    big = run.paths.work / "data" / "dump.bin"
    big.parent.mkdir()
    with open(big, "wb") as fh:  # sparse: 300 MiB that cost nothing to write
        fh.truncate(300 * 1024 * 1024)
    set_constants(run.paths.work, x=6)
    with pytest.raises(AvoError, match=r"work/ holds 300\.0 MiB in \d+ files, more than this run's limit of "
                                       r"256\.0 MiB; the largest files are data/dump\.bin \(300\.0 MiB\)"):
        submit(run, "X=6 and a dump")
    big.unlink()
    assert submit(run, "X=6").outcome == "accepted"


def test_a_kill_between_the_two_writes_of_an_append_is_healed(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    from avo.state import append_trajectory

    run = started(toy, runs_root)
    head = json.loads(run.paths.run_json.read_text())["chain"]
    # As if killed after the line was written but before run.json's head moved, then again
    # half-way through writing the next line.
    append_trajectory(run.paths, {"kind": "note", "id": "written-before-the-kill"})
    edit_json(run.paths.run_json, lambda d: d.update(chain=head))
    with open(run.paths.trajectory, "a") as fh:
        fh.write('{"kind": "eval", "id": "torn')
    assert avo("status")[0] == 0  # readers allow for both
    set_constants(run.paths.work, x=6)
    out = submit(open_run(run.paths.root, runs_root), "X=6")
    assert out.outcome == "accepted"
    assert any("adopted 1 trajectory line(s)" in n for n in out.notes)
    assert any("torn last line of trajectory.jsonl" in n for n in out.notes)
    assert list(run.paths.private.glob("torn-trajectory-*.txt"))[0].read_text() == '{"kind": "eval", "id": "torn'
    assert avo("status")[0] == 0
    ids = [r.get("id") for r in read_trajectory(run.paths)]
    assert "written-before-the-kill" in ids and ids[-1] == "step3"


def test_edited_terms_are_refused_then_restored(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    # Flip the direction, widen the noise band, take gains on one look and raise the work
    # limit: all pinned by v0.
    edit_json(run.paths.run_json, lambda d: (d["target"].update(direction="minimize"),
                                             d["options"]["noise"].update(band=0.5, recheck_gains=False),
                                             d["target"]["work_limits"].update(files=10**9)))
    code, out = avo("status")
    assert code == 1
    assert "run.json's target.direction is 'minimize', but the run started with 'maximize'" in out
    assert "run.json's options.noise.band is 0.5, but the run started with 0.0" in out
    assert "run.json's options.noise.recheck_gains is False, but the run started with True" in out
    assert "run.json's target.work_limits.files is 1000000000" in out
    code, out = avo("recover")
    assert code == 0 and "target.direction 'minimize' -> 'maximize'" in out, out
    state = open_run(run.paths.root, runs_root).state
    assert state.target.direction == "maximize" and state.options.noise.band == 0.0
    # The budget is the one term that may change (avo evolve --max-steps): not refused.
    edit_json(run.paths.run_json, lambda d: d["options"].update(max_steps=50))
    assert avo("status")[0] == 0


def test_recover_keeps_each_versions_secret(toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The secret picks the inputs a version was measured on, which `avo verify` replays: a
    # recover that kept run.json's versions used to drop every one of them.
    run = started(toy, runs_root)
    secrets = [v.secret for v in run.state.versions]
    assert all(secrets)
    assert avo("recover", "--run", str(run.paths.root))[0] == 0
    assert [v.secret for v in open_run(run.paths.root, runs_root).state.versions] == secrets


def test_counters_that_steer_the_policy_are_checked(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    # Fake re-measurements of the best would move the reference a candidate is compared with.
    edit_json(run.paths.run_json, lambda d: d.update(remeasured={"1": [0.1, 0.1]}))
    code, out = avo("status")
    assert code == 1 and "re-measurements of the best {1: [0.1, 0.1]} are not those the trajectory records {}" in out
    code, out = avo("recover")
    assert code == 0 and "re-measurements {1: [0.1, 0.1]} -> {} (from the trajectory)" in out, out
    assert avo("status")[0] == 0


def test_a_forged_loose_object_is_not_read_as_the_commit_it_is_named_after(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # Read-only commands read avo's loose objects in-process (no GitPython, no cat-file): the
    # content must hash to the object's name. `git cat-file` itself does not check that.
    import zlib

    from avo.lineage import commit_message, read_any

    run = start_run(str(toy), runs_root)
    sha = run.state.versions[0].sha
    backup = run.paths.backup
    honest = commit_message(backup, sha)
    assert honest and "forged" not in honest
    path = backup / "objects" / sha[:2] / sha[2:]
    body = (zlib.decompress(path.read_bytes()).partition(b"\0")[2]
            .replace(b"\n\n", b"\n\nforged: no terms pinned here\n\n", 1))
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"commit %d\0" % len(body) + body))
    assert read_any(backup, sha) is None
    assert commit_message(backup, sha) is None
    # git itself hands the forged content out under the old name.
    shown = subprocess.run(["git", "--git-dir", str(backup), "cat-file", "commit", sha], capture_output=True)
    assert b"forged" in shown.stdout


def test_a_loose_object_linked_to_dev_zero_is_a_clear_error_not_a_memory_blowup(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The agent replaces v0's commit in avo's backup by a symlink to /dev/zero: read to the
    # end, it never ends (git itself sees an empty object file).
    run = start_run(str(toy), runs_root)
    sha = run.state.versions[0].sha
    path = run.paths.backup / "objects" / sha[:2] / sha[2:]
    path.unlink()
    path.symlink_to("/dev/zero")
    code = ("import resource, sys\n"
            "resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))  # main's MemoryError, not the machine's\n"
            "from avo.cli import main\nsys.argv = ['avo', 'status', '--run', sys.argv[1]]\nmain()\n")
    proc = subprocess.run([sys.executable, "-c", code, str(run.paths.root)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == 1 and "error:" in proc.stderr, proc.stdout + proc.stderr


def test_a_forged_loose_object_read_through_git_is_refused_too(toy: Path, runs_root: Path,
                                                               core_plugins: None) -> None:
    # The full record check and the lineage read through `git cat-file --batch`, which hands a
    # replaced loose file out under its old name: what it returns must hash to that name.
    import zlib

    from avo.lineage import read_objects

    run = start_run(str(toy), runs_root)
    v0 = run.state.versions[0].sha
    backup = run.paths.backup
    spec = f"{v0}:.avo/scores.jsonl"
    blob = subprocess.run(["git", "--git-dir", str(backup), "rev-parse", spec], capture_output=True,
                          text=True, check=True).stdout.strip()
    honest = read_objects(backup, [spec])[0]
    assert honest is not None and b'"scalar"' in honest
    path = backup / "objects" / blob[:2] / blob[2:]
    forged = honest.replace(b'"scalar": ', b'"scalar": 9', 1)
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob %d\0" % len(forged) + forged))
    shown = subprocess.run(["git", "--git-dir", str(backup), "cat-file", "blob", blob], capture_output=True)
    assert shown.stdout == forged  # git serves the forgery...
    from avo.lineage import _objects

    _objects(backup).close()  # a fresh reader, as a new command would start
    assert read_objects(backup, [spec]) == [None]  # ... avo does not
    assert read_objects(backup, [spec] * 8) == [None] * 8  # nor through the pipelined reader


def test_a_planted_module_with_its_hash_written_into_run_json_is_refused(
    toy: Path, runs_root: Path, core_plugins: None
) -> None:
    # The agent plants json.py beside the toy's eval.py (the script's folder comes first on
    # sys.path, so `import json` there runs it: it prints a result of its own and exits), and
    # writes its hash into run.json's evaluator hashes so the integrity check finds what it
    # expects. The check of the terms v0's commit pins passed over a key added to a table,
    # as if an upgrade had added a field: the submit was accepted at 1e9.
    run = start_run(str(toy), runs_root)
    evil = ('import os, sys\nsys.stdout.write(\'{"correct": true, "metrics": {"config_a": 1e9, "config_b": 1e9}}\\n\')\n'
            "sys.stdout.flush()\nos._exit(0)\n")
    (toy / "json.py").write_text(evil)
    data = json.loads(run.paths.run_json.read_text())
    data["hashes"]["evaluator"]["json.py"] = hashlib.sha256(evil.encode()).hexdigest()
    run.paths.run_json.write_text(json.dumps(data, indent=2))
    set_constants(run.paths.work, x=6)
    with pytest.raises(RecordError, match="disagrees with its lineage") as caught:
        submit(open_run(run.paths.root, runs_root), "X=6")
    assert "run.json's hashes.evaluator is" in str(caught.value)
    assert [v["scalar"] < 1e6 for v in json.loads(run.paths.run_json.read_text())["versions"]] == [True]
    # `avo recover`, which the refusal points at, puts the pinned hashes back (it used to keep
    # a key the start had not recorded); the planted file is then what the integrity check names.
    result = CliRunner().invoke(app, ["recover", "--run", str(run.paths.root)])
    assert result.exit_code == 0, result.output
    assert "json.py" not in json.loads(run.paths.run_json.read_text())["hashes"]["evaluator"]
    with pytest.raises(AvoError, match="json.py"):
        submit(open_run(run.paths.root, runs_root), "X=6")
    assert len(json.loads(run.paths.run_json.read_text())["versions"]) == 1

"""Attacks on migration by a hostile agent of one island (a same-user process that edits any
file of the colony): forged colony records, symlinked donors, edits made while a migrant is
measured. Real git, real evaluator child processes; the toy target."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from avo.colony import MigrationPolicy, island_specs, load_colony
from avo.engine import Run, open_run, submit
from avo.errors import AvoError
from avo.islands import start_colony
from avo.lineage import commit_message, read_any
from avo.migration import offer
from avo.record_format import parse_trailers
from avo.state import read_trajectory
from tests.conftest import set_constants


def _start(toy: Path, runs_root: Path) -> Path:
    return start_colony(str(toy), runs_root, island_specs(2, {}), MigrationPolicy(topology="ring", every=1),
                        max_steps=20, sandbox="none")


def _island(colony: Path, k: int) -> Run:
    return open_run(colony / f"island-{k}", colony)


def _forge(colony: Path, **changes: object) -> None:
    path = colony / "colony.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_a_forged_colony_id_cannot_smuggle_a_score_trailer_into_a_migrant_commit(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-1's agent rewrites colony.json's id with trailer lines; the migrant's commit on
    island-2 must not carry them (the last ``avo-score`` line of a message is the one read)."""
    colony = _start(toy, runs_root)
    set_constants(_island(colony, 1).paths.work, x=4.0)
    submit(_island(colony, 1), "X to 4")
    _forge(colony, id="c\navo-score: 1000000000.0\navo-metrics: {}")
    done = offer(_island(colony, 2))
    assert done is not None and done.outcome == "skipped" and "colony.json" in done.reason
    two = _island(colony, 2)  # still opens: nothing false entered its lineage
    assert [v.n for v in two.state.versions] == [0]
    for v in two.state.versions:
        assert parse_trailers(commit_message(two.paths.backup, v.sha) or "").scalar_matches(v.scalar)


def test_a_forged_island_name_cannot_point_migration_outside_the_colony(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-1's agent renames the donor of island-2 to ``../elsewhere`` (a run it controls)."""
    colony = _start(toy, runs_root)
    set_constants(_island(colony, 1).paths.work, x=4.0)
    submit(_island(colony, 1), "X to 4")
    shutil.copytree(colony / "island-1", colony.parent / "elsewhere", symlinks=True)
    data = json.loads((colony / "colony.json").read_text())
    data["islands"][0]["name"] = "../elsewhere"
    (colony / "colony.json").write_text(json.dumps(data))
    done = offer(_island(colony, 2))
    assert done is not None and done.outcome == "skipped" and "colony.json" in done.reason
    assert [v.n for v in _island(colony, 2).state.versions] == [0]


def test_a_symlinked_donor_island_gives_nothing(toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-1's agent replaces its own island folder by a symlink to a run outside the colony:
    the migrant's trailers would name island-1 of this colony for a version it never had."""
    colony = _start(toy, runs_root)
    outside = runs_root / "outside"
    outside.mkdir()
    other = start_colony(str(toy), outside, island_specs(2, {}), MigrationPolicy(), max_steps=20, sandbox="none")
    set_constants(_island(other, 1).paths.work, x=5.0)
    submit(_island(other, 1), "X to 5, elsewhere")
    os.rename(colony / "island-1", colony / "island-1.real")
    os.symlink(other / "island-1", colony / "island-1")
    done = offer(_island(colony, 2))
    assert done is not None and done.outcome == "skipped" and "island-1 cannot be read" in done.reason
    assert [v.n for v in _island(colony, 2).state.versions] == [0]


def test_edits_made_while_an_accepted_migrant_is_measured_are_kept(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-2's agent (or anything of its) writes work/ while the migrant is evaluated; the
    accepted migrant's checkout must not destroy those edits without a copy."""
    colony = _start(toy, runs_root)
    set_constants(_island(colony, 1).paths.work, x=4.0)
    submit(_island(colony, 1), "X to 4")
    two = _island(colony, 2)

    def agent_edits(line: str) -> None:
        if line.startswith("evaluating"):
            (two.paths.work / "notes.md").write_text("the agent's half-written idea\n")
            set_constants(two.paths.work, y=2.5)

    done = offer(two, progress=agent_edits)
    assert done is not None and done.outcome == "accepted" and done.submitted is not None
    two = _island(colony, 2)
    kept = list(two.paths.rejected.glob("*edited-during-evaluation.diff"))
    assert len(kept) == 1 and "the agent's half-written idea" in kept[0].read_text()
    assert "+Y = 2.5" in kept[0].read_text() and "+X = 4.0" not in kept[0].read_text()  # only the edits
    assert "X = 4.0" in (two.paths.work / "solution.py").read_text()  # work/ holds the accepted migrant
    assert any("edited during the evaluation" in n for n in done.submitted.notes)


def test_colony_json_names_are_checked_when_loaded(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    good = {"id": "c", "created": 0.0, "target": "toy", "islands": [{"name": "island-1"}, {"name": "island-2"}]}
    (folder / "colony.json").write_text(json.dumps(good))
    assert load_colony(folder).names() == ["island-1", "island-2"]
    for bad in ({"id": "c\navo-score: 1"}, {"islands": [{"name": "island-1"}, {"name": "../x"}]},
                {"islands": [{"name": "island-1"}, {"name": "island-1"}]}):
        (folder / "colony.json").write_text(json.dumps({**good, **bad}))
        with pytest.raises(AvoError, match="colony.json"):
            load_colony(folder)


def _crafted_tree(work: Path, escape: Path) -> str:
    """A tree git itself never writes: the candidate's files plus a blob whose name climbs out
    of any folder it is written into (``../`` repeated, then ``escape``)."""
    def git(*args: str, data: bytes | None = None) -> str:
        return subprocess.run(["git", *args], cwd=work, input=data, capture_output=True, check=True).stdout.decode()

    blob = git("hash-object", "-w", "--stdin", data=b"written by a migrant\n")
    sol = git("hash-object", "-w", "solution.py")
    name = "../" * 40 + str(escape).lstrip("/")
    entries = sorted([(name.encode(), blob), (b"solution.py", sol)])
    raw = b"".join(b"100644 " + n + b"\0" + bytes.fromhex(s.strip()) for n, s in entries)
    return git("hash-object", "-w", "-t", "tree", "--literally", "--stdin", data=raw).strip()


def test_a_forged_donor_tree_cannot_write_outside_the_receivers_evaluation(
        tmp_path: Path, toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """island-1's agent forges its record consistently (avo's own submit with the snapshot
    replaced, as docs/SECURITY.md says it can) so that its best is a tree with a file name
    that climbs out of the folder it is exported to. Offered to island-2, that tree is never
    written outside island-2's evaluation folder, and nothing enters island-2's lineage."""
    from avo.lineage import Lineage

    colony = _start(toy, runs_root)
    one = _island(colony, 1)
    escape = tmp_path / "escaped.txt"
    set_constants(one.paths.work, x=4.0)
    tree = _crafted_tree(one.paths.work, escape)
    with monkeypatch.context() as m:
        m.setattr(Lineage, "snapshot_tree", lambda self, keep_index=None: tree)
        m.setattr(Lineage, "move_branch", lambda self, sha: self.set_ref("refs/heads/main", sha))
        m.setattr("avo.lineage.check_entry_name", lambda name, where: None, raising=False)
        try:
            submit(one, "X to 4")  # the forger's own process: whatever it writes is its own doing
        except AvoError:
            pass
    escape.unlink(missing_ok=True)
    one = _island(colony, 1)
    assert one.lineage.git("ls-tree", "-r", "--name-only", one.state.best_version.tree).count("escaped.txt") == 1
    done = offer(_island(colony, 2))
    assert not escape.exists()
    assert done is not None and done.outcome == "skipped" and "crafted" in done.reason
    assert [v.n for v in _island(colony, 2).state.versions] == [0]


AGENT = """
import json, os, pathlib, re
sol = pathlib.Path(os.environ["AVO_WORK_DIR"]) / "solution.py"
text = sol.read_text()
x = float(re.search(r"^X = (.*)$", text, re.M).group(1))
sol.write_text(re.sub(r"^X = .*$", f"X = {x + 0.5}", text, flags=re.M))
print(json.dumps({"message": f"X to {x + 0.5}"}))
"""


def _evolve_island(tmp_path: Path, island: Path, steps: int) -> subprocess.CompletedProcess[str]:
    (tmp_path / "agent.py").write_text(AGENT)
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "AVO_SANDBOX": "none",
           "AVO_MOCK_COMMAND": f"{sys.executable} {tmp_path / 'agent.py'}"}
    return subprocess.run([sys.executable, "-m", "avo", "evolve", "--resume", str(island), "--backend", "mock",
                           "--max-steps", str(steps), "--plain"], env=env, text=True, capture_output=True,
                          timeout=300)


def test_a_garbled_colony_json_does_not_stop_another_islands_loop(
        tmp_path: Path, toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-1's agent writes colony.json with a name that is not one; island-2's unattended
    loop goes on stepping (its migrations are skipped, saying why)."""
    colony = _start(toy, runs_root)
    _forge(colony, id="../../elsewhere")
    done = _evolve_island(tmp_path, colony / "island-2", 2)
    assert done.returncode == 0, done.stdout + done.stderr
    two = _island(colony, 2)
    assert two.state.steps == 2 and len(two.state.versions) == 3  # both agent steps were taken
    skips = [r for r in read_trajectory(two.paths) if r.get("kind") == "migration_skipped"]
    assert skips and "colony.json" in skips[0]["reason"]


KILL_AT_COMMIT_POINT = """
import os, signal, sys
from pathlib import Path
import avo.engine
from avo.engine import open_run
from avo.migration import offer

def killed(*args, **kwargs):  # SIGKILL at the commit point: work/ holds the migrant, run.json does not yet
    os.kill(os.getpid(), signal.SIGKILL)

avo.engine.save_state = killed
colony = Path(sys.argv[1])
offer(open_run(colony / "island-2", colony))
"""


def test_a_kill_after_the_migrants_checkout_does_not_wedge_the_islands_loop(
        tmp_path: Path, toy: Path, runs_root: Path, core_plugins: None) -> None:
    """A SIGKILL after work/ took an accepted migrant and before run.json did leaves the
    migrant's files in work/, uncommitted, and its step used (interrupted); the migration is due
    again at the next step, and the island's unattended loop must go on (not stop on "work/
    holds an unsubmitted candidate")."""
    colony = _start(toy, runs_root)
    set_constants(_island(colony, 1).paths.work, x=4.0)
    submit(_island(colony, 1), "X to 4")
    set_constants(_island(colony, 2).paths.work, x=2.0)
    submit(_island(colony, 2), "X to 2")  # island-2's own step: a migrant is due after it
    (tmp_path / "kill.py").write_text(KILL_AT_COMMIT_POINT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    killed = subprocess.run([sys.executable, str(tmp_path / "kill.py"), str(colony)], env=env, capture_output=True,
                            text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr
    assert "X = 4.0" in (colony / "island-2" / "work" / "solution.py").read_text()
    done = _evolve_island(tmp_path, colony / "island-2", 3)
    assert done.returncode == 0, done.stdout + done.stderr
    two = _island(colony, 2)
    outcomes = [(r["step"], r["outcome"], bool(r.get("migrant"))) for r in read_trajectory(two.paths)
                if r.get("kind") == "submit"]
    assert outcomes[:2] == [(1, "accepted", False), (2, "interrupted", True)]
    assert two.state.steps == 3 and two.state.best_version.scalar > two.state.versions[1].scalar
    assert list(two.paths.rejected.glob("reverted-*.diff"))  # the half-taken migrant was archived, not lost


def test_a_donor_version_past_the_receivers_work_limits_is_not_copied(
        toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """island-1's agent forges a version past the work limits (its own submit with the limit
    check taken out); offered to island-2, none of it is copied or checked out there."""
    with open(toy / "target.yaml", "a", encoding="utf-8") as fh:
        fh.write("work_limits: {files: 6, bytes: 1000000}\n")
    colony = _start(toy, runs_root)
    one = _island(colony, 1)
    set_constants(one.paths.work, x=4.0)
    for k in range(12):
        (one.paths.work / f"bulk-{k}.bin").write_bytes(b"x" * 100)
    with monkeypatch.context() as m:
        m.setattr("avo.engine.check_work_limits", lambda work, limits: None)
        submit(one, "X to 4, and a bulk of files")
    two = _island(colony, 2)
    done = offer(two)
    assert done is not None and done.outcome == "skipped" and "limit" in done.reason
    assert [v.n for v in _island(colony, 2).state.versions] == [0]
    assert not list(two.paths.work.glob("bulk-*"))
    blob = one.lineage.git("rev-parse", f"{_island(colony, 1).state.best_version.sha}:bulk-0.bin").strip()
    assert read_any(two.lineage.git_dir, blob) is None  # nothing of it was copied into island-2's store


def test_verify_refuses_an_exported_island_that_names_its_own_evaluator(
        tmp_path: Path, toy: Path, runs_root: Path, core_plugins: None) -> None:
    """A forged export: island-2's run.json points its target at a folder of the forger's
    (an evaluator it wrote), or island-2 is a symlink to another example. `avo verify` of the
    colony must not re-evaluate it there and call it OK."""
    from avo.colony_report import export_colony, verify_colony

    colony = _start(toy, runs_root)
    set_constants(_island(colony, 1).paths.work, x=4.0)
    submit(_island(colony, 1), "X to 4")
    dest = tmp_path / "shipped"
    export_colony(colony, dest, plot=False)
    assert all(res.ok for _, res in verify_colony(dest))  # the honest export verifies
    fake = tmp_path / "fake-target"
    shutil.copytree(toy, fake)  # the forger's evaluator (here a copy; it could print any score)
    record = json.loads((dest / "island-2" / "run.json").read_text())
    record["target"]["directory"] = str(fake)
    (dest / "island-2" / "run.json").write_text(json.dumps(record))
    with pytest.raises(AvoError, match="island-2"):
        verify_colony(dest)
    shutil.rmtree(dest / "island-2")
    os.symlink(dest / "island-1", dest / "island-2")
    with pytest.raises(AvoError, match="island-2"):
        verify_colony(dest)


def test_a_donor_commit_object_rewritten_in_place_gives_nothing(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-1's agent overwrites the loose object of its v1 commit in its backup with a commit
    naming another tree (X = 6.9, never evaluated there), and edits run.json's tree to match.
    The migrant's trailers would name commit v1's id for a tree that commit never held."""
    import hashlib
    import zlib

    colony = _start(toy, runs_root)
    one = _island(colony, 1)
    set_constants(one.paths.work, x=4.0)
    submit(one, "X to 4")
    one = _island(colony, 1)
    v1, backup = one.state.versions[1], one.paths.backup
    set_constants(one.paths.work, x=6.9)
    sol = subprocess.run(["git", f"--git-dir={backup}", "hash-object", "-w", str(one.paths.work / "solution.py")],
                         capture_output=True, text=True, check=True).stdout.strip()
    listing = subprocess.run(["git", f"--git-dir={backup}", "ls-tree", v1.tree], capture_output=True, text=True,
                             check=True).stdout
    old_sol = next(line.split()[2] for line in listing.splitlines() if line.endswith("\tsolution.py"))
    other = subprocess.run(["git", f"--git-dir={backup}", "mktree"], input=listing.replace(old_sol, sol),
                           capture_output=True, text=True, check=True).stdout.strip()
    raw = subprocess.run(["git", f"--git-dir={backup}", "cat-file", "commit", v1.sha], capture_output=True,
                         check=True).stdout.replace(v1.tree.encode(), other.encode(), 1)
    loose = backup / "objects" / v1.sha[:2] / v1.sha[2:]
    assert loose.is_file() and hashlib.sha1(b"commit %d\0" % len(raw) + raw).hexdigest() != v1.sha
    os.chmod(loose, 0o644)
    loose.write_bytes(zlib.compress(b"commit %d\0" % len(raw) + raw))
    record = json.loads(one.paths.run_json.read_text())
    record["versions"][1]["tree"] = other
    one.paths.run_json.write_text(json.dumps(record))
    set_constants(one.paths.work, x=4.0)

    done = offer(_island(colony, 2))
    # The rewritten object no longer hashes to its id: island-1's own record check refuses it
    # (git's reader hands it out; avo's checks what it hands out).
    assert done is not None and done.outcome == "skipped", done
    assert "island-1 cannot be read (the record of run island-1 disagrees with its lineage" in done.reason, done
    assert [v.n for v in _island(colony, 2).state.versions] == [0]


def test_a_donor_backup_missing_a_blob_skips_the_migrant_and_the_receiver_goes_on(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-1's agent deletes one blob of its best from its backup (its record still checks:
    only the score file's blob is read for that). island-2's migration is skipped, saying why,
    instead of failing the command island-2's agent ran."""
    colony = _start(toy, runs_root)
    one = _island(colony, 1)
    set_constants(one.paths.work, x=4.0)
    submit(one, "X to 4")
    one = _island(colony, 1)
    blob = one.lineage.git("rev-parse", f"{one.state.best_version.sha}:solution.py").strip()
    (one.paths.backup / "objects" / blob[:2] / blob[2:]).unlink()
    _island(colony, 1)  # the donor's record still opens
    done = offer(_island(colony, 2))
    assert done is not None and done.outcome == "skipped" and "backup cannot be read" in done.reason
    assert [v.n for v in _island(colony, 2).state.versions] == [0]


def test_a_garbled_colony_json_does_not_hide_the_other_runs(toy: Path, runs_root: Path, core_plugins: None) -> None:
    colony = _start(toy, runs_root)
    (colony / "colony.json").write_text("{not json")
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "AVO_RUNS_DIR": str(runs_root)}
    done = subprocess.run([sys.executable, "-m", "avo", "runs"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "colony.json is unreadable" in done.stderr and "Traceback" not in done.stderr


def test_a_replace_ref_on_the_best_commit_does_not_hide_an_unsubmitted_candidate(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-2's agent edits work/, then plants ``refs/replace/<best>`` naming a commit of its
    own edited tree: git would read that commit wherever it is asked for the best one, and the
    dirty check (the guard of a migrant offer, and `avo status`) would see work/ as clean."""
    colony = _start(toy, runs_root)
    set_constants(_island(colony, 1).paths.work, x=4.0)
    submit(_island(colony, 1), "X to 4")
    two = _island(colony, 2)
    work, best = two.paths.work, two.state.best_version.sha
    set_constants(work, y=2.5)  # the agent's unsubmitted candidate

    def git(*args: str) -> str:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env["GIT_INDEX_FILE"] = str(work.parent / "agent-index")  # the agent's own scratch index
        return subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", *args], cwd=work, env=env,
                              check=True, capture_output=True, text=True).stdout.strip()

    git("add", "-A")
    tree = git("write-tree")
    git("replace", best, git("commit-tree", tree, "-m", "looks like the best"))
    assert two.lineage.is_dirty(best)
    with pytest.raises(AvoError, match="unsubmitted candidate"):
        offer(two)
    assert "Y = 2.5" in (work / "solution.py").read_text()  # nothing reset away


def test_a_committed_file_under_an_ignore_rule_is_an_unsubmitted_candidate(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    """island-2's agent commits notes.py in work/.git and lists it in .git/info/exclude: a
    snapshot (which starts from work/.git's HEAD) holds it, so work/ is not clean, though
    best's tree plus the ignore rules say so."""
    colony = _start(toy, runs_root)
    set_constants(_island(colony, 1).paths.work, x=4.0)
    submit(_island(colony, 1), "X to 4")
    two = _island(colony, 2)
    work, best = two.paths.work, two.state.best_version.sha
    (work / "notes.py").write_text("IDEA = 'the agent kept this out of git status'\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    for args in (["add", "notes.py"], ["commit", "-qm", "notes"]):
        subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", *args], cwd=work, env=env, check=True)
    (work / ".git" / "info").mkdir(exist_ok=True)
    (work / ".git" / "info" / "exclude").write_text("notes.py\n")
    assert two.lineage.snapshot_tree() != two.lineage.tree_of(best)  # what a submit would take
    assert two.lineage.is_dirty(best)
    with pytest.raises(AvoError, match="unsubmitted candidate"):
        offer(two)
    assert (work / "notes.py").exists()
    subprocess.run(["git", "reset", "-q", "--hard", best], cwd=work, env=env, check=True)  # back on best: clean
    assert not two.lineage.is_dirty(best)

"""What a step costs in processes and imports (counted, never timed: bench/ times them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import set_constants

HEAVY = ("git", "gitdb", "numpy", "matplotlib", "mcp", "anthropic", "openai", "pydantic", "rich", "yaml", "pluggy")

SUBMITS = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[3])
import avo.programs
avo.programs.SYSTEM_DIRS = (sys.argv[4], *avo.programs.SYSTEM_DIRS)  # the logging git first
from avo.engine import open_run, submit
from tests.conftest import set_constants
run_dir, log = Path(sys.argv[1]), Path(sys.argv[2])
counts = []
for x in (5.0, 1.0, 6.0):  # accepted, rejected, accepted
    log.write_text("")
    run = open_run(run_dir, run_dir.parent)
    set_constants(run.paths.work, x=x)
    out = submit(run, f"X={x}")
    counts.append([out.outcome, log.read_text().splitlines()])
print(json.dumps(counts))
"""


def _shim(folder: Path) -> Path:
    """A `git` that logs its arguments, then runs the real git (put first where avo looks for
    programs, ``avo.programs.SYSTEM_DIRS``: a git first on the caller's PATH never runs)."""
    real = shutil.which("git")
    assert real
    folder.mkdir()
    log = folder / "calls.log"
    (folder / "git").write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real}" "$@"\n')
    (folder / "git").chmod(0o755)
    return log


def test_git_processes_per_submit(toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    from avo.engine import start_run

    run = start_run(str(toy), runs_root)
    log = _shim(tmp_path / "shim")
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.run([sys.executable, "-c", SUBMITS, str(run.paths.root), str(log), str(Path(__file__).parents[1]),
                           str(log.parent)], capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    (first, calls1), (second, calls2), (third, calls3) = json.loads(proc.stdout)
    assert (first, second, third) == ("accepted", "rejected", "accepted")
    # Importing GitPython probes `git version` (twice, once per process); objects, trees,
    # commits, refs and the backup copy are written in-process, and every object avo reads
    # here is loose, so it is read in-process too: no `git cat-file` reader is started.
    assert calls1[:2] == ["version", "version"]
    calls1 = calls1[2:]
    assert not [c for c in calls1 + calls2 + calls3 if c.startswith("cat-file")], calls1
    commands = [c.split(" -c ")[-1].split(" ", 1)[-1] for c in calls1]
    # `git add -A` fills a temporary index; its trees are written in-process.
    assert [c.split()[0] for c in commands] == ["add", "diff"], calls1
    assert len(calls3) == 2
    # A rejected step resets work/; it snapshots again only if work/ was written during the
    # evaluation (edits made meanwhile are archived first), which nothing did here, so the
    # reset is one `read-tree -u` from the snapshot's index, not `reset --hard` and `clean`.
    assert [c.split(" -c ")[-1].split(" ", 1)[-1].split()[0] for c in calls2] == [
        "add", "diff", "read-tree"], calls2
    assert max(len(calls2), len(calls3)) <= 4  # the bound: 4 git processes per submit


# Names that sort differently as bytes, as git's tree order (a folder as if it ended in /)
# and as text: each pair is a place where a tree writer can disagree with git.
NAMES = ["a", "a.b", "a-b", "a_b", "a0", "ab", "b", "A", "z", "é", "sp ace", "x.py", "dir", "dir.x", "dir-x"]


def test_snapshot_trees_are_the_trees_git_writes(tmp_path: Path) -> None:
    """The in-process trees of `git add -A`'s index against `git write-tree` of the same files."""
    import random

    from avo.lineage import Lineage

    rng = random.Random(20261201)
    for trial in range(40):
        work = tmp_path / f"w{trial}"
        work.mkdir()
        lineage = Lineage(work, tmp_path / f"p{trial}" / "index")
        lineage.init()
        for _ in range(rng.randint(0, 30)):
            path = work.joinpath(*(rng.choice(NAMES) for _ in range(rng.randint(1, 4))))
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.is_dir():
                    continue
                if rng.random() < 0.1:
                    os.symlink(rng.choice(NAMES), path)
                else:
                    path.write_bytes(os.urandom(rng.randint(0, 40)))
                    path.chmod(0o755 if rng.random() < 0.25 else 0o644)
            except (FileExistsError, NotADirectoryError):
                pass
        if trial % 4 == 1:
            (work / ".gitignore").write_text("*.py\nsp ace\n")
        if trial % 5 == 2:  # a second snapshot on top of a committed first one
            first = lineage.snapshot_tree()
            lineage.set_ref("refs/heads/main", lineage.commit_tree(first, None, "v0\n"))
            (work / "late").write_text("x")
        ours = lineage.snapshot_tree()
        env = {**os.environ, "GIT_INDEX_FILE": str(tmp_path / f"index{trial}")}
        subprocess.run(["git", "add", "-A"], cwd=work, env=env, check=True)
        theirs = subprocess.run(["git", "write-tree"], cwd=work, env=env, check=True, capture_output=True,
                                text=True).stdout.strip()
        assert ours == theirs, (trial, sorted(str(p.relative_to(work)) for p in work.rglob("*")))
        assert subprocess.run(["git", "cat-file", "-e", ours], cwd=work).returncode == 0


def test_an_index_the_reader_does_not_take_goes_to_git(tmp_path: Path) -> None:
    """A version 4 index, an unmerged entry or a damaged file: `git write-tree` decides."""
    from avo.lineage import _index_files

    work = tmp_path / "w"
    work.mkdir()
    (work / "f").write_text("x")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    index = tmp_path / "index"
    env = {**os.environ, "GIT_INDEX_FILE": str(index)}
    subprocess.run(["git", "add", "-A"], cwd=work, env=env, check=True)
    files = _index_files(index)
    assert files is not None and [(m, p) for m, _s, p in files] == [("100644", b"f")]
    subprocess.run(["git", "update-index", "--index-version", "4"], cwd=work, env=env, check=True)
    assert _index_files(index) is None
    subprocess.run(["git", "update-index", "--index-version", "2"], cwd=work, env=env, check=True)
    blob = files[0][1].hex()
    subprocess.run(["git", "update-index", "--index-info"], cwd=work, env=env, check=True,
                   input=f"100644 {blob} 2\tf\n", text=True)  # stage 2: a conflict
    assert _index_files(index) is None
    data = bytearray(index.read_bytes())
    data[40] ^= 1  # the checksum no longer matches
    index.write_bytes(bytes(data))
    assert _index_files(index) is None


@pytest.mark.parametrize("argv", [["--help"], ["status", "--help"], ["submit", "--help"]])
def test_help_imports_nothing_heavy(argv: list[str]) -> None:
    # A command's own help goes through typer's parameter coercion, which imports pydantic
    # itself (typer/_adapters.py); avo's models, the engine and the lineage stay unimported.
    heavy = HEAVY if argv == ["--help"] else tuple(m for m in HEAVY if m != "pydantic")
    code = (
        "import sys\nfrom avo.cli import main\nsys.argv = ['avo', *sys.argv[1:]]\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        f"mods = {{m.split('.')[0] for m in sys.modules}} & set({heavy!r})\n"
        "mods |= {m for m in sys.modules if m in ('avo.models', 'avo.state', 'avo.engine', 'avo.lineage')}\n"
        "print('HEAVY', sorted(mods))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True,
                          env={**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "HEAVY []" in proc.stdout, proc.stdout + proc.stderr


LOAD_HEAVY = ("asyncio", "git", "gitdb", "numpy", "matplotlib", "torch", "mcp", "anthropic", "openai", "yaml")


def test_loading_every_installed_plugin_imports_nothing_heavy() -> None:
    # Every command that touches a run loads every plugin; their modules defer what is heavy
    # (asyncio alone was ~20 ms of each `avo submit`, through the agent_sdk backend).
    pytest.importorskip("avo_backend_agent_sdk")
    code = ("import sys\nfrom avo.plugins import get_plugin_manager, plugin_records\nget_plugin_manager()\n"
            "print('LOADED', sorted(r.name for r in plugin_records() if not r.error))\n"
            f"print('HEAVY', sorted({{m.split('.')[0] for m in sys.modules}} & set({LOAD_HEAVY!r})))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "'agent_sdk'" in proc.stdout and "HEAVY []" in proc.stdout, proc.stdout + proc.stderr


def test_a_command_on_a_run_imports_only_the_plugins_of_its_target(toy: Path, runs_root: Path,
                                                                   tmp_path: Path) -> None:
    # The toy is a directory target (the core's): `avo eval` imports no other plugin, while a
    # command that lists them (`avo targets`) still finds every installed one.
    pytest.importorskip("avo_target_attention_c")
    from avo.engine import start_run
    from avo.plugins import reset_plugin_manager

    reset_plugin_manager()
    run = start_run(str(toy), runs_root)
    reset_plugin_manager()
    code = ("import sys\nfrom avo.cli import main\nsys.argv = ['avo', *sys.argv[1:]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('PLUGINS', sorted(m for m in sys.modules if m.startswith(('avo_target', 'avo_backend'))))\n")
    env = {**os.environ, "AVO_RUNS_DIR": str(runs_root)}
    evaluated = subprocess.run([sys.executable, "-c", code, "eval", "--run", str(run.paths.root)],
                               capture_output=True, text=True, env=env)
    assert "PASS" in evaluated.stdout and "PLUGINS []" in evaluated.stdout, evaluated.stdout + evaluated.stderr
    listed = subprocess.run([sys.executable, "-c", code, "targets"], capture_output=True, text=True, env=env)
    assert "attention_c" in listed.stdout and "avo_target_attention_c" in listed.stdout, listed.stdout


def test_status_reads_the_lineage_only_through_its_readers(toy: Path, runs_root: Path, core_plugins: None,
                                                           tmp_path: Path) -> None:
    from avo.engine import start_run, submit

    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=5)
    # The check at this submit's start signed v0; v1 is newer than the checkpoint, so status
    # reads v1's commit and its scores file (`sha:.avo/scores.jsonl`) itself.
    assert submit(run, "X=5").outcome == "accepted"
    set_constants(run.paths.work, x=6)
    log = _shim(tmp_path / "shim")
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "AVO_RUNS_DIR": str(runs_root)}
    code = ("import sys\nimport avo.programs\navo.programs.SYSTEM_DIRS = (sys.argv[2], *avo.programs.SYSTEM_DIRS)\n"
            "from avo.cli import main\nsys.argv = ['avo', 'status', '--run', sys.argv[1]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('GIT', sorted({m.split('.')[0] for m in sys.modules} & {'git', 'gitdb'}))\n")
    proc = subprocess.run([sys.executable, "-c", code, str(run.paths.root), str(log.parent)],
                          capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "work/ has uncommitted changes" in proc.stdout, proc.stdout
    # The record check reads avo's loose objects in-process and the dirty check is two git
    # commands on a temporary index: no GitPython, no persistent reader, nothing written.
    assert "GIT []" in proc.stdout, proc.stdout
    calls = [c.split(" -c ")[-1].split(" ", 1)[-1].split()[0] for c in log.read_text().splitlines()]
    assert calls == ["read-tree", "status"], calls


def test_mcp_server_starts_without_gitpython(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    code = (
        "import sys\nfrom pathlib import Path\nfrom avo.mcp_server import build_server\n"
        "build_server(Path(sys.argv[1]))\n"
        "print('GIT', sorted(m for m in sys.modules if m.split('.')[0] in ('git', 'gitdb')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True,
                          env={**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"})
    assert "GIT []" in proc.stdout, proc.stdout + proc.stderr


def test_long_chains_read_the_same_as_git_log(tmp_path: Path) -> None:
    from avo.lineage import Lineage, object_ids, read_commits, read_objects

    work = tmp_path / "work"
    work.mkdir()
    lineage = Lineage(work, tmp_path / "private" / "index")
    lineage.init()
    parent = None
    for i in range(150):  # past the in-process walk: the rest comes from one rev-list, pipelined
        (work / "f.txt").write_text(f"{i}\n")
        tree = lineage.tree_with_file(lineage.snapshot_tree(), ".avo/scores.jsonl", f"{i}\n".encode())
        parent = lineage.commit_tree(tree, parent, f"v{i}\n\nbody {i}\n")
        lineage.set_ref("refs/heads/main", parent)
    assert parent is not None
    git_dir = work / ".git"
    chain = read_commits(git_dir, parent)
    logged = subprocess.run(["git", "--git-dir", str(git_dir), "log", "--first-parent", "--format=%H %T", parent],
                            capture_output=True, text=True, check=True).stdout.split("\n")
    assert [f"{c.sha} {c.tree}" for c in chain] == [line for line in logged if line][::-1]
    assert [c.message for c in chain[:2]] == ["v0\n\nbody 0\n", "v1\n\nbody 1\n"]
    specs = [f"{c.sha}:.avo/scores.jsonl" for c in chain] + ["0" * 40, f"{parent}:.avo/none", "nothing"]
    ids = object_ids(git_dir, specs)
    for c, oid in zip(chain, ids, strict=False):
        want = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", f"{c.sha}:.avo/scores.jsonl"],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert oid == want
    assert ids[-3:] == [None, None, None]
    blobs = read_objects(git_dir, specs)
    assert blobs[:3] == [b"0\n", b"1\n", b"2\n"] and blobs[-3:] == [None, None, None]


COUNTED = """
import json, sys
from collections import Counter
import avo.record_check as rc, avo.state as st
calls = Counter()
read, problems, parse = st.read_record_file, rc.record_problems, st.RunState.model_validate_json
def counted_read(path):
    calls["read " + path.name] += 1
    return read(path)
def counted_problems(*a, **k):
    calls["check"] += 1
    return problems(*a, **k)
def counted_parse(raw, *a, **k):
    calls["parse run.json"] += 1
    return parse(raw, *a, **k)
st.read_record_file, rc.record_problems, st.RunState.model_validate_json = counted_read, counted_problems, counted_parse
from avo.cli import main
sys.argv = ['avo', *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print('CALLS', json.dumps(calls))
"""


@pytest.mark.parametrize("command", [["submit", "-m", "X=5"], ["eval"], ["revert", "-m", "not this"]])
def test_a_mutating_command_reads_and_checks_the_record_once(toy: Path, runs_root: Path, core_plugins: None,
                                                             command: list[str]) -> None:
    # The command opens the run unchecked and the engine checks it under the lock: checked
    # at both, a run of 10,000 versions was parsed, read and hashed twice (~0.3 s more). The
    # lookups after the check (is this tree's score deterministic?) use the bytes it read.
    from avo.engine import start_run
    from avo.state import load_state

    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=5)
    env = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1", "AVO_RUNS_DIR": str(runs_root)}
    proc = subprocess.run([sys.executable, "-c", COUNTED, *command, "--run", str(run.paths.root)],
                          capture_output=True, text=True, env=env, check=False)
    assert "CALLS" in proc.stdout, proc.stdout + proc.stderr
    calls = json.loads(proc.stdout.split("CALLS", 1)[1])
    assert calls["check"] == 1, calls
    assert calls["parse run.json"] == 1, calls
    assert calls["read trajectory.jsonl"] == 1, calls
    assert run.state.steps == 0 and len(run.state.versions) == 1
    after = load_state(run.paths)
    assert after.steps == (1 if command[0] == "submit" else 0), proc.stdout + proc.stderr


def test_a_run_opened_before_another_submit_is_read_again_under_the_lock(toy: Path, runs_root: Path,
                                                                          core_plugins: None) -> None:
    # The parse open_run(check=False) made is reused only while run.json holds exactly those
    # bytes: here a second opener's submit commits first, and the stale opener sees it.
    from avo.engine import open_run, start_run, submit

    root = start_run(str(toy), runs_root).paths.root
    stale, fresh = open_run(root, runs_root, check=False), open_run(root, runs_root, check=False)
    set_constants(fresh.paths.work, x=5)
    assert submit(fresh, "X=5").outcome == "accepted"
    set_constants(stale.paths.work, x=6)
    out = submit(stale, "X=6")
    assert (out.step, out.outcome, out.version and out.version.n) == (2, "accepted", 2)
    assert [v.message for v in stale.state.versions[1:]] == ["X=5", "X=6"]
    # And only once: a Run handed to a second mutating call reads run.json again.
    assert stale.opened is None

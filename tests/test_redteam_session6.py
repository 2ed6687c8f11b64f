"""Red team of session 6's changes (every lineage read in-process, the reset from the snapshot's
index): each test is a hostile action by a same-user agent on a real run, and what avo must
do about it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from avo.engine import start_run

ENV = {**os.environ, "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"}


def _avo(*args: str, limit: int | None = None) -> subprocess.CompletedProcess[str] | None:
    """``avo ARGS`` as a process; ``None`` if it was still waiting after two minutes (its
    process group, git children included, is killed then). ``limit``: its address space
    capped at that many bytes (a machine's memory, made small: the test must not take this
    machine's)."""
    import resource

    def cap() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    proc = subprocess.Popen([sys.executable, "-m", "avo", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV, start_new_session=True, preexec_fn=cap)
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


# -- a pipe where work/.git keeps a ref ------------------------------------------------------------


@pytest.mark.parametrize("ref", ["HEAD", "refs/heads/main", "refs/tags/v0"])
def test_a_pipe_where_a_ref_should_be_does_not_hang_a_submit(
        toy: Path, runs_root: Path, core_plugins: None, ref: str) -> None:
    # avo reads refs in-process; a plain open of a FIFO waits for a writer that never comes,
    # so `avo submit` (and every later command of the run) hung for good.
    run = start_run(str(toy), runs_root, sandbox="none")
    where = run.paths.work / ".git" / ref
    where.unlink(missing_ok=True)
    os.mkfifo(where)
    solution = run.paths.work / "solution.py"
    solution.write_text(solution.read_text().replace("X = ", "X = 5.0 or "))
    proc = _avo("submit", "-m", "X to 5", "--run", str(run.paths.root))
    if proc is None:
        pytest.fail(f"avo submit waited on the pipe at work/.git/{ref}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ACCEPTED" in proc.stdout
    status = _avo("status", "--run", str(run.paths.root))
    assert status is not None and status.returncode == 0, status


@pytest.mark.parametrize("where", [".gitignore", "lib/.gitattributes", ".git/config", ".git/info/exclude",
                                   ".git/objects/info/alternates", ".git/packed-refs"])
def test_a_pipe_where_git_reads_a_file_is_named_not_waited_on(
        toy: Path, runs_root: Path, core_plugins: None, where: str) -> None:
    # git opens these blocking: with a FIFO there, `git add -A` (every submit's snapshot) and
    # `git status` (`avo status`) waited for good. avo names the file instead, and nothing is
    # recorded; removed, the submit goes through.
    run = start_run(str(toy), runs_root, sandbox="none")
    path = run.paths.work / where
    path.parent.mkdir(parents=True, exist_ok=True)
    saved = path.read_bytes() if path.is_file() else None
    path.unlink(missing_ok=True)
    os.mkfifo(path)
    solution = run.paths.work / "solution.py"
    solution.write_text(solution.read_text().replace("X = ", "X = 5.0 or "))
    for command in (["submit", "-m", "X to 5"], ["status"]):
        proc = _avo(*command, "--run", str(run.paths.root))
        if proc is None:
            pytest.fail(f"avo {command[0]} waited on the pipe at work/{where}")
        said = proc.stdout + proc.stderr
        if command[0] == "submit":  # `avo status` only has to answer (its dirty check may not ask git)
            assert proc.returncode != 0 and where.rpartition("/")[2] in said and "not a regular file" in said, said
    assert len(json.loads(run.paths.run_json.read_text())["versions"]) == 1
    path.unlink()
    if saved is not None:
        path.write_bytes(saved)
    proc = _avo("submit", "-m", "X to 5", "--run", str(run.paths.root))
    assert proc is not None and proc.returncode == 0 and "ACCEPTED" in proc.stdout, proc


# -- a pipe where git looks for packs or a commit-graph ------------------------------------------------

_PACK = "objects/pack/pack-" + "1" * 40


@pytest.mark.parametrize("where", [f"{_PACK}.idx", "objects/pack/multi-pack-index",
                                   "objects/info/commit-graphs/commit-graph-chain"])
def test_a_pipe_where_git_looks_objects_up_is_named_not_waited_on(
        toy: Path, runs_root: Path, core_plugins: None, where: str) -> None:
    # Every git process that looks an object up (`git add -A` writing a blob, `git diff`,
    # `git reset`) opens the pack indexes beside their packs, the multi-pack-index and the
    # commit-graph chain, blocking: with a FIFO at one of them `avo status` (and, for the
    # commit-graph chain, `avo submit` and `avo revert`) waited for good.
    run = start_run(str(toy), runs_root, sandbox="none")
    git_dir = run.paths.work / ".git"
    (git_dir / where).parent.mkdir(parents=True, exist_ok=True)
    if where.startswith(_PACK):
        (git_dir / f"{_PACK}.pack").write_bytes(b"")  # git counts an index only beside a pack file
    os.mkfifo(git_dir / where)
    solution = run.paths.work / "solution.py"
    solution.write_text(solution.read_text().replace("X = ", "X = 5.0 or "))
    for command in (["status"], ["submit", "-m", "X to 5"], ["revert"]):
        proc = _avo(*command, "--run", str(run.paths.root))
        if proc is None:
            pytest.fail(f"avo {command[0]} waited on the pipe at work/.git/{where}")
        said = proc.stdout + proc.stderr
        assert "Traceback" not in said, said
        if command[0] != "status":
            assert proc.returncode != 0 and where.rpartition("/")[2] in said and "not a regular file" in said, said
    assert len(json.loads(run.paths.run_json.read_text())["versions"]) == 1
    assert "5.0 or" in solution.read_text()  # the refused revert kept the agent's edit
    (git_dir / where).unlink()
    proc = _avo("submit", "-m", "X to 5", "--run", str(run.paths.root))
    assert proc is not None and proc.returncode == 0 and "ACCEPTED" in proc.stdout, proc


# -- a loose object that inflates without end ----------------------------------------------------------


@pytest.mark.parametrize("header", [b"commit 200", b"commit 1000000000000"])
def test_a_loose_object_that_inflates_without_end_is_not_read_to_its_end(
        toy: Path, runs_root: Path, core_plugins: None, header: bytes) -> None:
    # Every command reads the best version's commit loose, in-process, and inflated the whole
    # file before hashing it: the agent's 3 MB file in its place, a commit header followed by
    # 3 GiB of zeros, took 3 GiB of memory (a MemoryError, under a 2 GiB cap, in every command;
    # a 30 MB one, 30 GiB). git reads a loose object up to the size its header gives; a size
    # past any object a run holds is not handed to git's reader either (GitPython reads the
    # size git announces whole).
    import zlib

    run = start_run(str(toy), runs_root, sandbox="none")
    best = json.loads(run.paths.run_json.read_text())["versions"][0]["sha"]
    loose = run.paths.work / ".git" / "objects" / best[:2] / best[2:]
    real = loose.read_bytes()
    pack = zlib.compressobj(1)
    parts = [pack.compress(header + b"\0")]
    zeros = bytes(1 << 24)
    parts += [pack.compress(zeros) for _ in range(3 << 6)]
    parts.append(pack.flush())
    loose.chmod(0o644)
    loose.write_bytes(b"".join(parts))
    solution = run.paths.work / "solution.py"
    solution.write_text(solution.read_text().replace("X = ", "X = 5.0 or "))
    for command in (["status"], ["log"], ["submit", "-m", "X to 5"]):
        proc = _avo(*command, "--run", str(run.paths.root), limit=2 << 30)
        assert proc is not None, f"avo {command[0]} waited"
        said = proc.stdout + proc.stderr
        assert "Traceback" not in said and "MemoryError" not in said, said
    assert len(json.loads(run.paths.run_json.read_text())["versions"]) == 1
    loose.write_bytes(real)
    proc = _avo("submit", "-m", "X to 5", "--run", str(run.paths.root))
    assert proc is not None and proc.returncode == 0 and "ACCEPTED" in proc.stdout, proc


# -- a sparse file of 200 GB in work/.git ---------------------------------------------------------------


@pytest.mark.parametrize("where", ["HEAD", "refs/heads/main", "description"])
def test_a_sparse_file_in_the_git_dir_is_not_read_whole(
        toy: Path, runs_root: Path, core_plugins: None, where: str) -> None:
    # Outside work/'s limits (work/.git is not counted), the agent grows a file git keeps to
    # 200 GB without writing a byte. avo read a ref file whole (a MemoryError traceback in every
    # submit: HEAD, the branch) and hashed every file in work/.git into the submit's signature
    # (minutes, twice per submit). git itself reads only HEAD's first line here.
    run = start_run(str(toy), runs_root, sandbox="none")
    with open(run.paths.work / ".git" / where, "ab") as fh:
        fh.truncate(200 << 30)
    solution = run.paths.work / "solution.py"
    solution.write_text(solution.read_text().replace("X = ", "X = 5.0 or "))
    proc = _avo("submit", "-m", "X to 5", "--run", str(run.paths.root), limit=2 << 30)
    assert proc is not None, "avo submit hashed the sparse file for two minutes"
    assert proc.returncode == 0 and "ACCEPTED" in proc.stdout, proc.stdout + proc.stderr
    solution.write_text(solution.read_text().replace("return n * n", "return n * n + 1"))  # fails the gate
    proc = _avo("submit", "-m", "break square", "--run", str(run.paths.root), limit=2 << 30)
    assert proc is not None and proc.returncode == 0 and "REJECTED" in proc.stdout.upper(), proc
    assert "n * n + 1" not in solution.read_text()  # reset to v1
    status = _avo("status", "--run", str(run.paths.root), limit=2 << 30)
    assert status is not None and status.returncode == 0 and "uncommitted" not in status.stdout, status


# -- a pipe where git reset appends to a reflog ----------------------------------------------------------


@pytest.mark.parametrize("where", ["logs/HEAD", "logs/refs/heads/main"])
def test_a_pipe_where_a_reflog_should_be_does_not_hang_a_revert(
        toy: Path, runs_root: Path, core_plugins: None, where: str) -> None:
    # `avo revert` (and a rejected submit that cannot take the reset from its snapshot's index)
    # runs `git reset --hard`, which appends to HEAD's and the branch's reflogs: opening a FIFO
    # there for writing waited for good, with work/ already reset.
    run = start_run(str(toy), runs_root, sandbox="none")
    log = run.paths.work / ".git" / where
    log.parent.mkdir(parents=True, exist_ok=True)  # avo's git writes no reflog: the agent makes the folder
    log.unlink(missing_ok=True)
    os.mkfifo(log)
    solution = run.paths.work / "solution.py"
    solution.write_text(solution.read_text().replace("X = ", "X = 5.0 or "))
    proc = _avo("revert", "--run", str(run.paths.root))
    if proc is None:
        pytest.fail(f"avo revert waited on the pipe at work/.git/{where}")
    said = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "not a regular file" in said and where.rpartition("/")[2] in said, said
    assert "5.0 or" in solution.read_text()  # refused before anything was discarded
    log.unlink()
    proc = _avo("revert", "--run", str(run.paths.root))
    assert proc is not None and proc.returncode == 0 and "5.0 or" not in solution.read_text(), proc


# -- an object only git's reader finds, of gigabytes --------------------------------------------------


def test_an_object_git_reads_from_an_alternate_store_is_not_handed_over_whole(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The agent deletes the best version's root tree (a commit would be fetched back from the
    # backup) and lists a store of its own in objects/info/alternates holding, under that id,
    # a "tree" of 1.5 GiB of zeros (1.5 MB stored). avo leaves an object it finds nowhere to
    # git's reader, which announced 1.5 GiB and GitPython read all of it: 1.5 GiB per command
    # for 1.5 MB written (15 GiB for 15 MB: the machine's memory).
    import zlib

    run = start_run(str(toy), runs_root, sandbox="none")
    git_dir = run.paths.work / ".git"
    tree = subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "HEAD^{tree}"], capture_output=True,
                          text=True, check=True).stdout.strip()
    (git_dir / "objects" / tree[:2] / tree[2:]).unlink()
    store = run.paths.root.parent / "store"
    (store / tree[:2]).mkdir(parents=True)
    pack = zlib.compressobj(1)
    parts = [pack.compress(b"tree %d\0" % (1500 << 20))]
    parts += [pack.compress(bytes(1 << 20)) for _ in range(1500)]
    parts.append(pack.flush())
    (store / tree[:2] / tree[2:]).write_bytes(b"".join(parts))
    (git_dir / "objects" / "info").mkdir(exist_ok=True)
    (git_dir / "objects" / "info" / "alternates").write_text(f"{store}\n")
    solution = run.paths.work / "solution.py"
    solution.write_text(solution.read_text().replace("X = ", "X = 5.0 or "))
    # The peak memory of avo and its git children, measured in a process of its own.
    peak = subprocess.run(
        [sys.executable, "-c", "import resource, subprocess, sys; "
         "subprocess.run([sys.executable, '-m', 'avo', 'submit', '-m', 'X to 5', '--run', sys.argv[1]], "
         "capture_output=True, timeout=120); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)",
         str(run.paths.root)], capture_output=True, text=True, env=ENV, check=True).stdout
    assert int(peak) < 512 * 1024, f"avo submit peaked at {int(peak) // 1024} MiB"
    assert len(json.loads(run.paths.run_json.read_text())["versions"]) == 1


# -- the reset from the snapshot's index, after the agent moved HEAD ----------------------------------


def test_a_rejected_submit_keeps_an_ignored_file_the_agent_stopped_tracking(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The agent commits data.bin, then stops tracking it and ignores it (`git rm --cached`,
    # info/exclude): the snapshot, filled from that HEAD, still holds it. `reset --hard` and
    # `clean -fd` kept it (work/.git's index does not track it, and it is ignored); the reset
    # from the snapshot's index deleted it with the rejected candidate.
    run = start_run(str(toy), runs_root, sandbox="none")
    work = run.paths.work

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=a", "-c", "user.email=a@b", *args], cwd=work, check=True,
                       capture_output=True)

    data = work / "data.bin"
    data.write_bytes(bytes(range(256)) * 4)
    git("add", "data.bin")
    git("commit", "-qm", "data")
    git("rm", "-q", "--cached", "data.bin")
    with open(work / ".git" / "info" / "exclude", "a") as fh:
        fh.write("*.bin\n")
    solution = work / "solution.py"
    solution.write_text(solution.read_text().replace("return n * n", "return n * n + 1"))  # fails the gate
    proc = _avo("submit", "-m", "break square", "--run", str(run.paths.root))
    assert proc is not None and proc.returncode == 0 and "FAILED" in proc.stdout, proc
    assert "n * n + 1" not in solution.read_text()  # reset to v0
    assert data.read_bytes() == bytes(range(256)) * 4
    status = _avo("status", "--run", str(run.paths.root))
    assert status is not None and status.returncode == 0 and "uncommitted" not in status.stdout, status

"""Red team of the fast paths (a pack index read in-process, the score file read back from the
backup, rev:path walked in-process, the trajectory's tail): each test is a hostile action by a
same-user agent on a real run, and what avo must do about it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import zlib
from pathlib import Path

from avo.engine import open_run, revert, submit
from avo.lineage import object_id, read_any
from avo.record_format import scores_file
from avo.state import append_trajectory
from tests.conftest import set_constants
from tests.test_record_integrity import avo, edit_json, git, started

ROOT = Path(__file__).parent.parent


def _loose(git_dir: Path, sha: str) -> Path:
    return git_dir / "objects" / sha[:2] / sha[2:]


def _write_loose(git_dir: Path, kind: str, data: bytes, *, under: str | None = None) -> str:
    """Store an object loose; ``under``: write it under that id instead (a forged file)."""
    sha = object_id(kind, data)
    path = _loose(git_dir, under or sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists():
        path.chmod(0o644)
    path.write_bytes(zlib.compress(f"{kind} {len(data)}\0".encode() + data))
    return sha


def _tree(entries: list[tuple[str, str, str]]) -> bytes:
    """A raw tree from ``(mode, name, sha)``, in git's order (a folder sorts as name + /)."""
    def key(e: tuple[str, str, str]) -> bytes:
        return e[1].encode() + (b"/" if e[0] == "40000" else b"")
    return b"".join(f"{m} {n}".encode() + b"\0" + bytes.fromhex(s) for m, n, s in sorted(entries, key=key))


def _committed_scores(work: Path, rev: str) -> str:
    return git(work, "show", f"{rev}:.avo/scores.jsonl") + "\n"


def _avo_child(args: list[str], runs_root: Path, timeout: int = 60) -> subprocess.CompletedProcess[str] | None:
    """``avo ARGS`` in a process of its own; ``None`` if it did not end within ``timeout``."""
    env = {**os.environ, "AVO_RUNS_DIR": str(runs_root), "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "avo", *args], cwd=ROOT, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


# -- work/.git: a commit removed, a pack index planted ------------------------------------------


def _stray_index(pack_dir: Path, shas: list[str], name: str = "pack-0123") -> Path:
    """A version-2 pack index listing ``shas`` (what a pack deleted without its index leaves)."""
    ids = sorted(bytes.fromhex(s) for s in shas)
    fan = b"".join(sum(1 for i in ids if i[0] <= b).to_bytes(4, "big") for b in range(256))
    body = b"\xfftOc\x00\x00\x00\x02" + fan + b"".join(ids) + b"\0" * (8 * len(ids)) + b"\0" * 40
    pack_dir.mkdir(parents=True, exist_ok=True)
    path = pack_dir / f"{name}.idx"
    path.write_bytes(body)
    return path


def test_a_stray_pack_index_does_not_hide_a_removed_commit(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    best = run.state.versions[-1].sha
    work_git = run.paths.work / ".git"
    _loose(work_git, best).unlink()  # the accepted commit is gone from work/.git ...
    _stray_index(work_git / "objects" / "pack", [best])  # ... and an index without its pack names it
    set_constants(run.paths.work, x=9)
    out = submit(open_run(run.paths.root, runs_root), "X=9")  # restored from the backup, then submitted
    assert out.outcome == "accepted", out
    assert "restored accepted commits deleted from work/.git from avo's private backup" in out.notes
    assert git(run.paths.work, "cat-file", "-t", best) == "commit"
    code, text = avo("status")
    assert code == 0, text


def test_a_pipe_where_a_pack_index_is_expected_is_never_waited_on(toy: Path, runs_root: Path,
                                                                  core_plugins: None) -> None:
    run = started(toy, runs_root)
    pack_dir = run.paths.work / ".git" / "objects" / "pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    os.mkfifo(pack_dir / "pack-fifo.idx")
    for pack in (False, True):  # with a pack beside it, git itself would wait on it too
        if pack:
            (pack_dir / "pack-fifo.pack").write_bytes(b"PACK" + b"\0" * 40)
        done = _avo_child(["recover", "--run", str(run.paths.root)], runs_root)
        assert done is not None, "avo recover waited forever on a FIFO named like a pack index"
        assert done.returncode == 1 and "pack-fifo.idx is not a regular file" in done.stdout, done.stdout
        assert "Traceback" not in done.stdout
    (pack_dir / "pack-fifo.idx").unlink()
    (pack_dir / "pack-fifo.pack").unlink()
    code, out = avo("recover")  # moved away: the run goes on
    assert code == 0, out


def test_a_pipe_in_place_of_an_accepted_commit_is_refused_clearly(toy: Path, runs_root: Path,
                                                                  core_plugins: None) -> None:
    run = started(toy, runs_root)
    path = _loose(run.paths.work / ".git", run.state.versions[-1].sha)
    path.unlink()
    os.mkfifo(path)
    done = _avo_child(["recover", "--run", str(run.paths.root)], runs_root)
    assert done is not None, "avo recover waited forever on a FIFO in place of a commit"
    assert done.returncode == 1 and "is not a regular file" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout
    path.unlink()
    code, out = avo("recover")  # the pipe moved away: the commit comes back from the backup
    assert code == 0, out
    assert git(run.paths.work, "cat-file", "-t", run.state.versions[-1].sha) == "commit"


# -- the backup: a tree or commit rewritten under its old name ---------------------------------


def _forge_scores_tree(backup: Path, commit: str, fake: str) -> tuple[Path, bytes]:
    """Rewrite ``commit``'s root tree in the backup, under its old id, so that git's ``commit:path``
    walk finds ``fake`` as its .avo/scores.jsonl; the genuine file's bytes, to put back."""
    got = read_any(backup, commit)
    assert got is not None and got[1] == "commit"
    root = got[2].split(b"\n", 1)[0][5:].decode()
    path = _loose(backup, root)
    genuine = path.read_bytes()
    tree = read_any(backup, root)
    assert tree is not None
    blob = _write_loose(backup, "blob", fake.encode())
    avo_dir = _write_loose(backup, "tree", _tree([("100644", "scores.jsonl", blob)]))
    entries = []
    data, pos = tree[2], 0
    while pos < len(data):
        space, nul = data.index(b" ", pos), data.index(b"\0", pos)
        mode, name, sha = data[pos:space].decode(), data[space + 1:nul].decode(), data[nul + 1:nul + 21].hex()
        entries.append((mode, name, avo_dir if name == ".avo" else sha))
        pos = nul + 21
    _write_loose(backup, "tree", _tree(entries), under=root)
    return path, genuine


def test_a_forged_backup_tree_puts_no_false_score_into_the_next_commit(toy: Path, runs_root: Path,
                                                                       core_plugins: None) -> None:
    run = started(toy, runs_root)
    v0, v1 = run.state.versions
    honest = scores_file(run.state.versions)
    first, second = honest.splitlines(keepends=True)
    fake = first.replace(json.dumps(v0.scalar), "0.001") + second  # v0 made to look far worse; v1's line kept
    assert fake != honest and fake.endswith(second)
    path, genuine = _forge_scores_tree(run.paths.backup, v1.sha, fake)

    set_constants(run.paths.work, x=5)
    out = submit(open_run(run.paths.root, runs_root), "X=5, better")
    assert out.outcome == "accepted" and out.version is not None
    state = open_run(run.paths.root, runs_root, check=False).state
    # The commit carries every version's line as run.json holds it, not the agent's file.
    assert _committed_scores(run.paths.work, out.version.sha) == scores_file(state.versions)

    path.write_bytes(genuine)  # the forgery undone: the record is whole again
    code, text = avo("status")
    assert code == 0, text


def test_a_forged_commit_in_the_backup_is_refused_by_status(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    v1 = run.state.versions[1]
    set_constants(run.paths.work, x=5)
    assert submit(open_run(run.paths.root, runs_root), "X=5").outcome == "accepted"  # v2, past the checkpoint
    # v1's commit rewritten in the backup under its old id: same tree, a score of the agent's.
    got = read_any(run.paths.backup, v1.sha)
    assert got is not None
    forged = got[2].replace(repr(v1.scalar).encode(), b"1000000000.0")
    assert forged != got[2]
    _write_loose(run.paths.backup, "commit", forged, under=v1.sha)

    code, out = avo("status")  # what a full check finds: the backup no longer holds v1's commit
    assert code == 1, out
    assert f"run.json's v1 is commit {v1.sha[:12]}, which avo's private backup does not hold" in out


def test_a_path_read_from_a_forged_commit_is_not_handed_out(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    v1 = run.state.versions[1]
    got = read_any(run.paths.backup, v1.sha)
    assert got is not None
    # A commit of the agent's (another tree, with a score file of its own) under v1's id.
    blob = _write_loose(run.paths.backup, "blob", b'{"version": "v1", "scalar": 1e9}\n')
    avo_dir = _write_loose(run.paths.backup, "tree", _tree([("100644", "scores.jsonl", blob)]))
    tree = _write_loose(run.paths.backup, "tree", _tree([("40000", ".avo", avo_dir)]))
    _write_loose(run.paths.backup, "commit", b"tree " + tree.encode() + got[2][45:], under=v1.sha)
    assert read_any(run.paths.backup, f"{v1.sha}:.avo/scores.jsonl") is None


# -- run.json: a commit id git answers in three words -----------------------------------------


def test_a_commit_id_with_a_space_is_named_not_a_traceback(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)

    def add(d: dict) -> None:  # type: ignore[type-arg]
        for n in range(2, 9):  # enough versions that the reader is asked in one batch
            d["versions"].append(dict(d["versions"][1], n=n, sha=f"{'0' * 40} commit"))
        d["best"] = 8

    edit_json(run.paths.run_json, add)
    code, out = avo("status")
    assert code == 1, out
    assert f"run.json's v2 is commit {'0' * 12}, which avo's private backup does not hold" in out


# -- the trajectory's tail ----------------------------------------------------------------------


def _bytes_read() -> int:
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    raise AssertionError("no rchar in /proc/self/io")


def test_a_long_last_line_is_read_once_per_append(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = started(toy, runs_root)
    set_constants(run.paths.work, x=1)
    long = "abandoned: " + "y" * 8_000_000  # the agent's note (MCP takes any length): the last line
    assert revert(open_run(run.paths.root, runs_root), long) is not None
    assert run.paths.trajectory.read_bytes().splitlines()[-1].count(b"y") == 8_000_000
    before = _bytes_read()
    append_trajectory(run.paths, {"kind": "note", "step": 0})
    read = _bytes_read() - before
    # One read of the last line (and of run.json), not one per 64 KiB of it (quadratic: 500 MB).
    assert read < 3 * len(long), read
    code, out = avo("status")
    assert code == 0, out


_TRUNCATE_ON_OPEN = r"""
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init()
if fd < 0 or libc.inotify_add_watch(fd, sys.argv[1].encode(), 0x20) < 0:  # IN_OPEN
    sys.exit("no inotify")
print("ready", flush=True)
os.read(fd, 4096)  # the moment avo opens the trajectory ...
os.truncate(sys.argv[1], 0)  # ... the agent cuts it short under the reader
print("cut", flush=True)
"""

_APPEND = "import sys; from pathlib import Path; from avo.state import RunPaths, append_trajectory; " \
          "append_trajectory(RunPaths(Path(sys.argv[1])), {'kind': 'note', 'step': 0})"


def test_a_trajectory_cut_short_while_its_tail_is_read_ends_the_read(toy: Path, runs_root: Path,
                                                                     core_plugins: None) -> None:
    run = started(toy, runs_root)
    set_constants(run.paths.work, x=1)
    assert revert(open_run(run.paths.root, runs_root), "abandoned: " + "y" * 8_000_000) is not None  # a long last line
    hostile = subprocess.Popen([sys.executable, "-c", _TRUNCATE_ON_OPEN, str(run.paths.trajectory)],
                               stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert hostile.stdout is not None and hostile.stdout.readline().strip() == "ready"
        child = subprocess.Popen([sys.executable, "-c", _APPEND, str(run.paths.root)], cwd=ROOT,
                                 start_new_session=True)
        try:
            code = child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
            code = None
        assert hostile.wait(timeout=60) == 0
    finally:
        if hostile.poll() is None:
            os.killpg(hostile.pid, signal.SIGKILL)
            hostile.wait()
    assert code is not None, "the append read the cut trajectory's tail forever (holding the record lock)"
    assert code == 0
    code_, out = avo("status")  # the cut is named, not believed
    assert code_ == 1 and "trajectory.jsonl" in out, out


# -- pipes in place of what a read-only command reads ------------------------------------------


def test_a_pipe_in_the_backup_or_for_the_trajectory_stops_no_reader(toy: Path, runs_root: Path,
                                                                    core_plugins: None) -> None:
    run = started(toy, runs_root)
    path = _loose(run.paths.backup, run.state.versions[1].sha)
    path.unlink()
    os.mkfifo(path)  # git's reader would open it and wait forever
    done = _avo_child(["status", "--run", str(run.paths.root)], runs_root, timeout=30)
    assert done is not None, "avo status waited forever on a FIFO in the backup"
    assert done.returncode == 1 and "is not a regular file" in done.stdout, done.stdout
    path.unlink()

    data = run.paths.trajectory.read_bytes()
    run.paths.trajectory.unlink()
    os.mkfifo(run.paths.trajectory)
    done = _avo_child(["status", "--run", str(run.paths.root)], runs_root, timeout=30)
    assert done is not None, "avo status waited forever on a FIFO for the trajectory"
    assert done.returncode == 1 and "trajectory.jsonl is not a regular file" in done.stdout, done.stdout
    assert "Traceback" not in done.stdout
    run.paths.trajectory.unlink()
    run.paths.trajectory.write_bytes(data)
    code, out = avo("status")
    assert code == 1 and "does not hold" in out  # the backup lost v1's commit: named, as ever


def test_recover_reads_no_version_through_a_forged_backup_tree(toy: Path, runs_root: Path,
                                                               core_plugins: None) -> None:
    run = started(toy, runs_root)
    v1 = run.state.versions[1]
    first, second = scores_file(run.state.versions).splitlines(keepends=True)
    line = json.loads(second)
    forged = first + json.dumps({**line, "message": "forged", "step": 99}) + "\n"  # the trailers still agree
    path, genuine = _forge_scores_tree(run.paths.backup, v1.sha, forged)
    code, out = avo("recover")
    assert code == 1 and "the backup itself is damaged" in out, out  # named, not believed
    state = open_run(run.paths.root, runs_root, check=False).state
    assert (state.versions[1].message, state.versions[1].step) == (v1.message, v1.step)
    path.write_bytes(genuine)
    code, out = avo("recover")
    assert code == 0, out


def test_a_planted_temp_file_link_never_redirects_a_record_write(
        toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    """The temp file run.json is written through was named after the pid: an agent that plants
    a symlink there (pids are predictable) had avo write the record into the file it points to,
    and run.json became that link."""
    from avo.state import load_state, save_state

    run = started(toy, runs_root)
    victim = tmp_path / "victim.txt"
    victim.write_text("the agent's target\n")
    planted = run.paths.run_json.with_name(f".run.json.tmp{os.getpid()}")
    planted.symlink_to(victim)
    state = load_state(run.paths)
    save_state(run.paths, state)
    assert victim.read_text() == "the agent's target\n"
    assert not run.paths.run_json.is_symlink() and load_state(run.paths).id == state.id
    assert planted.is_symlink()  # left alone, not written through
    assert not [p for p in run.paths.root.iterdir() if p.name.startswith(".run.json.") and p != planted]
    code, out = avo("status", "--run", str(run.paths.root))
    assert code == 0, out

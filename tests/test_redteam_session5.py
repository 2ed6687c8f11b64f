"""Red team of session 5's changes (snapshot trees from the index, packs read in-process, a
target's settings fixed at the start): each test is a hostile action by a same-user agent on a
real run, and what avo must do about it."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import zlib
from pathlib import Path

import pytest

from avo.engine import open_run, start_run, submit
from avo.errors import AvoError
from avo.git_packs import TooHard, read_packed
from avo.lineage import Lineage, object_id, read_any
from tests.conftest import set_constants
from tests.test_record_integrity import avo, edit_json, git, started
from tests.test_settings_pinned import dial  # noqa: F401  (the fixture)

# -- run.json's recorded settings edited by the agent ---------------------------------------------


@pytest.mark.parametrize(("started_with", "edited"), [(None, {"AVO_DIAL_BOOST": "1000"}),
                                                      ("-0.5", {}), ("-0.5", {"AVO_DIAL_BOOST": "1000"})])
def test_a_recorded_setting_added_or_dropped_in_run_json_is_refused(
        dial: Path, runs_root: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
        started_with: str | None, edited: dict[str, str]) -> None:
    # The terms check compares only keys present on both sides (fields an upgrade adds or
    # drops); a setting is a key of `settings`, so adding one the run started without (or
    # dropping one it started with) passed it, and every evaluation got the agent's value.
    if started_with is not None:
        monkeypatch.setenv("AVO_DIAL_BOOST", started_with)
    run = start_run("dial", runs_root)
    monkeypatch.delenv("AVO_DIAL_BOOST", raising=False)
    edit_json(run.paths.run_json, lambda d: d["target"].__setitem__("settings", edited))
    (run.paths.work / "dial.txt").write_text("1.5\n")
    with pytest.raises(AvoError, match="settings"):
        submit(open_run(run.paths.root, runs_root), "dial 1.5")
    code, out = avo("recover", "--run", str(run.paths.root))  # the recorded settings put back
    assert code == 0, out
    started = {} if started_with is None else {"AVO_DIAL_BOOST": started_with}
    assert json.loads(run.paths.run_json.read_text())["target"]["settings"] == started


# -- a pack planted in avo's private backup -------------------------------------------------------


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n >> 7 else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _inserts(base_size: int, content: bytes) -> bytes:
    """A git delta that rebuilds ``content`` by one-byte inserts (valid, and slowest to walk)."""
    return _varint(base_size) + _varint(len(content)) + b"".join(b"\x01" + content[i:i + 1]
                                                                for i in range(len(content)))


def _plant_pack(pack_dir: Path, blobs: list[bytes], kind: str = "blob", claimed: int | None = None) -> None:
    """A version-2 pack (and its index, listing every entry) storing ``blobs[0]`` whole (a
    ``kind`` object) and each later one as an offset delta of one-byte inserts on the one
    before: what git's own reader reads in C at once. ``claimed``: the object count its
    header gives, if not the true one."""
    body = bytearray(b"PACK" + struct.pack(">II", 2, len(blobs) if claimed is None else claimed))
    rows = []
    for i, blob in enumerate(blobs):
        start = len(body)
        data = blob if i == 0 else _inserts(len(blobs[i - 1]), blob)
        size, code = len(data), ({"commit": 1, "blob": 3}[kind] if i == 0 else 6)
        head = bytearray([(code << 4) | (size & 15)])
        size >>= 4
        while size:
            head[-1] |= 0x80
            head.append(size & 0x7F)
            size >>= 7
        if i:  # the base's distance back (a single byte is enough for offsets below 128 only)
            back, enc = start - rows[-1][2], bytearray()
            enc.append(back & 0x7F)
            back >>= 7
            while back:
                back -= 1
                enc.insert(0, 0x80 | (back & 0x7F))
                back >>= 7
            head += enc
        entry = bytes(head) + zlib.compress(data)
        rows.append((bytes.fromhex(object_id(kind if i == 0 else "blob", blob)), zlib.crc32(entry), start))
        body += entry
    body += hashlib.sha1(body).digest()
    rows.sort()
    fan = b"".join(sum(1 for r in rows if r[0][0] <= b).to_bytes(4, "big") for b in range(256))
    idx = bytearray(b"\xfftOc\x00\x00\x00\x02" + fan + b"".join(r[0] for r in rows)
                    + b"".join(r[1].to_bytes(4, "big") for r in rows)
                    + b"".join(r[2].to_bytes(4, "big") for r in rows) + body[-20:])
    idx += hashlib.sha1(idx).digest()
    pack_dir.mkdir(parents=True, exist_ok=True)
    (pack_dir / "pack-planted.pack").write_bytes(bytes(body))
    (pack_dir / "pack-planted.idx").write_bytes(bytes(idx))


def test_a_chain_of_insert_deltas_is_left_to_git_not_walked_in_python(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The agent removes the loose score file of v1 from the backup and plants a pack that
    # stores it at the end of a chain of deltas, each rebuilding 200 kB one byte at a time.
    # git reads it in milliseconds; the in-process reader walked every instruction in Python
    # (a second per megabyte, every delta held in memory at once before the first was
    # applied): a pack of a few megabytes hung every command that checks the record.
    run = started(toy, runs_root)
    backup = run.paths.backup
    sha = git(backup, "rev-parse", f"{run.state.versions[1].sha}:.avo/scores.jsonl")
    scores = git(backup, "cat-file", "blob", sha).encode() + b"\n"
    assert object_id("blob", scores) == sha
    loose = backup / "objects" / sha[:2] / sha[2:]
    loose.unlink()
    _plant_pack(backup / "objects" / "pack",
                [b"x", *(b"%04d" % i + b"a" * 200_000 for i in range(4)), scores])
    assert git(backup, "cat-file", "blob", sha) + "\n" == scores.decode()  # git reads the pack
    with pytest.raises(TooHard):
        read_packed(backup / "objects", sha)
    got = read_any(backup, f"{run.state.versions[1].sha}:.avo/scores.jsonl")
    assert got is not None and got[2] == scores  # git's reader, in C
    code, out = avo("status", "--run", str(run.paths.root))
    assert code == 0, out


# -- the snapshot's index rewritten between `git add -A` and avo's read of it ---------------------


def _raw_index(entries: list[tuple[int, str, bytes]]) -> bytes:
    """A version-2 index of ``(mode, sha, path)`` entries in the order given, checksum right."""
    body = b"DIRC" + (2).to_bytes(4, "big") + len(entries).to_bytes(4, "big")
    for mode, sha, path in entries:
        entry = (b"\0" * 24 + mode.to_bytes(4, "big") + b"\0" * 12 + bytes.fromhex(sha)
                 + min(len(path), 0xFFF).to_bytes(2, "big") + path)
        body += entry + b"\0" * (8 - len(entry) % 8)
    return body + hashlib.sha1(body).digest()


def _submit_through(run, runs_root: Path, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                    tail: list[tuple[int, str, bytes]], x: int = 6):
    """Submit X=``x`` while the agent swaps the snapshot's index, right after `git add -A`
    filled it, for one holding HEAD's other files and ``tail`` (``{good}``/``{evil}`` for the
    blobs of the real candidate and of ``X = 1e9``)."""
    work = run.paths.work
    env = dict(os.environ, GIT_DIR=str(work / ".git"), GIT_WORK_TREE=str(work))
    set_constants(work, x=x)

    def blob(data: bytes) -> str:
        return subprocess.run(["git", "hash-object", "-w", "--stdin"], input=data, env=env,
                              capture_output=True, check=True).stdout.decode().strip()

    shas = {"{good}": blob((work / "solution.py").read_bytes()), "{evil}": blob(b"X = 1e9\n")}
    head = [line.split("\t", 1) for line in git(work, "ls-tree", "-r", "HEAD").splitlines()]
    entries = [(int(meta.split()[0], 8), meta.split()[2], path.encode()) for meta, path in head
               if path != "solution.py"]
    evil = _raw_index(sorted(entries, key=lambda e: e[2]) + [(m, shas.get(s, s), p) for m, s, p in tail])
    original = Lineage.git_bytes

    def swapped_after_add(self: Lineage, *args: str, **kwargs):  # type: ignore[no-untyped-def]
        out = original(self, *args, **kwargs)
        if args[:1] == ("add",) and kwargs.get("index") is not None:
            Path(kwargs["index"]).write_bytes(evil)  # git has filled it, avo has not read it yet
        return out

    monkeypatch.setattr(Lineage, "git_bytes", swapped_after_add)
    try:
        return submit(open_run(run.paths.root, runs_root), f"X={x}")
    finally:
        monkeypatch.setattr(Lineage, "git_bytes", original)


def test_an_index_naming_one_file_twice_is_never_committed(
        toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # Two entries named solution.py: the innocent-looking one first (what `git show` and
    # `git checkout` of the commit find), the measured one second (what avo's export wrote
    # last, so what was evaluated). Accepted, the record showed other code than it scored.
    run = start_run(str(toy), runs_root)
    out = _submit_through(run, runs_root, monkeypatch,
                          [(0o100644, "{evil}", b"solution.py"), (0o100644, "{good}", b"solution.py")])
    assert out.outcome != "accepted"
    assert len(open_run(run.paths.root, runs_root).state.versions) == 1


def test_an_index_with_a_file_inside_a_file_is_refused_with_a_clear_error(
        toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # `solution.py` and `solution.py/x`: git write-tree refuses it ("You have both ..."); the
    # in-process writer made a tree of it, whose export failed with a raw FileExistsError.
    run = start_run(str(toy), runs_root)
    with pytest.raises(AvoError, match="solution.py"):
        _submit_through(run, runs_root, monkeypatch,
                        [(0o100644, "{good}", b"solution.py"), (0o100644, "{evil}", b"solution.py/x")])
    assert len(open_run(run.paths.root, runs_root).state.versions) == 1
    assert avo("status", "--run", str(run.paths.root))[0] == 0


# -- a shipped example re-measured by `avo verify` ------------------------------------------------


def test_verify_measures_a_plugin_targets_example_with_its_recorded_settings(
        dial: Path, runs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # A plugin target has no folder, so `avo verify` takes its spec from the plugin installed
    # now, which records no settings: the example measured with AVO_DIAL_BOOST=5 was
    # re-measured with it unset (pinned away, whatever the verifier's shell held), so an honest
    # example read as a mismatch, and a record could only be checked in another mode than its own.
    from avo.examples import export_run, verify_example

    monkeypatch.setenv("AVO_DIAL_BOOST", "5")
    run = start_run("dial", runs_root)
    (run.paths.work / "dial.txt").write_text("2\n")
    assert submit(run, "dial 2").outcome == "accepted"
    dest = tmp_path / "example"
    export_run(run, dest, plot=False)
    for shell in ("5", None, "1000"):
        if shell is None:
            monkeypatch.delenv("AVO_DIAL_BOOST", raising=False)
        else:
            monkeypatch.setenv("AVO_DIAL_BOOST", shell)
        result = verify_example(dest)
        assert result.ok and result.scalar == pytest.approx(7.0), (shell, result.detail)


# -- work/.git: a pack git will not open, counted as holding an accepted commit -------------------


def test_a_pack_whose_header_disagrees_with_its_index_does_not_hide_a_removed_commit(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # The accepted commit, removed from work/.git, stored in a planted pack whose index and
    # checksum are right but whose header claims one object more: git refuses the pack
    # ("claims to have 2 objects while index indicates 1"), avo counted (and read) the commit
    # from it, so it restored nothing from the backup and every submit failed in git diff.
    run = started(toy, runs_root)
    best = run.state.versions[-1].sha
    work_git = run.paths.work / ".git"
    got = read_any(work_git, best)
    assert got is not None and got[1] == "commit"
    (work_git / "objects" / best[:2] / best[2:]).unlink()
    _plant_pack(work_git / "objects" / "pack", [got[2]], kind="commit", claimed=2)
    assert subprocess.run(["git", "cat-file", "-e", best], cwd=run.paths.work).returncode != 0  # git: not there
    set_constants(run.paths.work, x=9)
    out = submit(open_run(run.paths.root, runs_root), "X=9")
    assert out.outcome == "accepted", out
    assert "restored accepted commits deleted from work/.git from avo's private backup" in out.notes
    assert git(run.paths.work, "cat-file", "-t", best) == "commit"


# -- work/.git: a sparse pack index (gigabytes long, no disk) --------------------------------------


def _bytes_read() -> int:
    """What this process has read through read(2)/pread(2) so far (holes of a sparse file too)."""
    line = next(x for x in Path("/proc/self/io").read_text().splitlines() if x.startswith("rchar:"))
    return int(line.split()[1])


def test_a_sparse_pack_index_is_searched_not_read_whole(toy: Path, runs_root: Path, core_plugins: None) -> None:
    # An index claiming 100 million objects is a 2.8 GB file that takes no disk (a hole), its
    # tiny pack's header claims as many and ends in the checksum the index names. git
    # binary-searches the index it maps; avo read its whole id table (2 GB, seconds) on every
    # command that asks which accepted commits work/.git still holds, and for every object
    # not stored loose: a few such files stalled every submit for minutes.
    run = started(toy, runs_root)
    work_git = run.paths.work / ".git"
    pack_dir = work_git / "objects" / "pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    count, checksum = 100_000_000, b"\x01" * 20
    (pack_dir / "pack-sparse.pack").write_bytes(b"PACK" + struct.pack(">II", 2, count) + checksum)
    size = 8 + 1024 + 28 * count + 40
    with open(pack_dir / "pack-sparse.idx", "wb") as fh:
        fh.write(b"\xfftOc\x00\x00\x00\x02" + b"\0" * 1020 + count.to_bytes(4, "big"))
        fh.truncate(size)
        fh.seek(size - 40)
        fh.write(checksum)
    assert os.stat(pack_dir / "pack-sparse.idx").st_blocks * 512 < 1 << 20
    lineage = open_run(run.paths.root, runs_root).lineage
    before = _bytes_read()
    assert lineage.missing_commits([v.sha for v in run.state.versions]) == []
    assert read_any(work_git, "ff" * 40) is None  # in no pack: git is asked, and says so
    assert _bytes_read() - before < 1 << 20
    set_constants(run.paths.work, x=9)
    assert submit(open_run(run.paths.root, runs_root), "X=9").outcome == "accepted"
    assert avo("status", "--run", str(run.paths.root))[0] == 0


def test_packs_planted_by_the_hundred_do_not_exhaust_the_descriptors(
        toy: Path, runs_root: Path, core_plugins: None) -> None:
    # 300 copies of one pack (each valid, as git reads them) holding the accepted commit that
    # was removed from work/.git: the in-process reader opened every pack and its index at
    # once, 600 descriptors: "Too many open files", blamed on a pack.
    import resource

    run = started(toy, runs_root)
    best = run.state.versions[-1].sha
    work_git = run.paths.work / ".git"
    got = read_any(work_git, best)
    assert got is not None
    (work_git / "objects" / best[:2] / best[2:]).unlink()
    pack_dir = work_git / "objects" / "pack"
    _plant_pack(pack_dir, [got[2]], kind="commit")
    for i in range(300):
        for ext in ("pack", "idx"):
            os.link(pack_dir / f"pack-planted.{ext}", pack_dir / f"pack-copy{i:03}.{ext}")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    # 256 descriptors above what this process holds already (a long test session holds many:
    # every cached reader's pipes): far fewer than the 600 the old reader took at once.
    used = len(os.listdir("/proc/self/fd"))
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, used + 256), hard))
    try:
        again = read_any(work_git, best)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert again is not None and again[2] == got[2]


def _started_before_settings(runs_root: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    """A dial run started as avo did before settings existed: neither its run.json nor the
    terms its start record and v0's avo-terms trailer pin name any."""
    import avo.engine as engine
    from avo.record_format import terms

    def older_terms(state):  # type: ignore[no-untyped-def]
        out = terms(state)
        for key in ("settings_env", "settings"):
            out["target"].pop(key)
        return out

    recorded_settings = engine.recorded_settings
    monkeypatch.setattr(engine, "terms", older_terms)
    monkeypatch.setattr(engine, "recorded_settings", lambda spec: spec.model_copy(update={"settings_env": []}))
    run = start_run("dial", runs_root)
    monkeypatch.setattr(engine, "terms", terms)
    monkeypatch.setattr(engine, "recorded_settings", recorded_settings)
    return run


def test_settings_added_to_a_run_started_before_settings_are_refused(
        dial: Path, runs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # A run whose pinned terms predate settings: the terms check skips fields the record does
    # not have, so the agent could declare any variable a setting in run.json and give it any
    # value, past the scrub of the evaluator's environment (LD_PRELOAD was measured to score
    # 1001.5 for 1.5 this way; it is now refused on its name, see the next test), and the
    # run's own evaluations then all got it: here the dial's boost.
    run = _started_before_settings(runs_root, monkeypatch)
    edit_json(run.paths.run_json, lambda d: d["target"].update(
        settings_env=["AVO_DIAL_BOOST"], settings={"AVO_DIAL_BOOST": "1000"}))
    (run.paths.work / "dial.txt").write_text("1.5\n")
    with pytest.raises(AvoError, match="settings"):
        submit(open_run(run.paths.root, runs_root), "dial 1.5")
    code, out = avo("recover", "--run", str(run.paths.root))  # puts the run's own (no) settings back
    assert code == 0, out
    assert json.loads(run.paths.run_json.read_text())["target"]["settings"] is None  # none recorded
    out2 = submit(open_run(run.paths.root, runs_root), "dial 1.5")
    assert out2.evaluation.scalar == pytest.approx(1.5)


def test_a_setting_that_loads_code_is_refused_even_where_no_terms_are_pinned(
        dial: Path, runs_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    # A run from before terms were pinned (v0's commit has no avo-terms trailer) has no terms
    # check at all: LD_PRELOAD declared a setting in its run.json reached the trusted evaluator.
    import avo.engine as engine

    digest = engine.terms_digest
    monkeypatch.setattr(engine, "terms_digest", lambda data: None)
    run = start_run("dial", runs_root)
    monkeypatch.setattr(engine, "terms_digest", digest)
    assert "avo-terms" not in git(run.paths.backup, "log", "-1", "--format=%B", run.state.versions[0].sha)
    source, lib = tmp_path / "boost.c", tmp_path / "boost.so"
    source.write_text('#include <stdlib.h>\n__attribute__((constructor)) static void boost(void) '
                      '{ setenv("AVO_DIAL_BOOST", "1000", 1); }\n')
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    edit_json(run.paths.run_json, lambda d: d["target"].update(
        settings_env=["LD_PRELOAD"], settings={"LD_PRELOAD": str(lib)}))
    (run.paths.work / "dial.txt").write_text("1.5\n")
    with pytest.raises(AvoError, match="LD_PRELOAD, which loads code into the evaluator"):
        submit(open_run(run.paths.root, runs_root), "dial 1.5")


@pytest.mark.parametrize("delta_size", [1, 200_000], ids=["small", "past-the-budget"])
def test_ref_deltas_that_lead_back_to_themselves_hang_nothing(toy: Path, runs_root: Path, core_plugins: None,
                                                              delta_size: int) -> None:
    # The newest score file, removed from the backup, "stored" as a ref delta on an id whose entry
    # is a ref delta on it again: git's own reader loops on that forever (git cat-file never
    # answers), and the in-process reader, after 10,000 turns of the loop, left it to git.
    from tests.test_redteam_fastpaths import _avo_child

    run = started(toy, runs_root)
    backup = run.paths.backup
    sha = git(backup, "rev-parse", f"{run.state.versions[1].sha}:.avo/scores.jsonl")
    (backup / "objects" / sha[:2] / sha[2:]).unlink()
    other = hashlib.sha1(b"the other half").digest()
    # A delta too costly to build is refused as such only after the chain is walked: else
    # it would be left to git, and git would loop.
    delta = _inserts(delta_size, b"x" * delta_size)
    body = bytearray(b"PACK" + struct.pack(">II", 2, 2))
    rows = []
    for raw, base in ((bytes.fromhex(sha), other), (other, bytes.fromhex(sha))):
        size, head = len(delta), bytearray([(7 << 4) | (len(delta) & 15)])  # type 7: a ref delta
        size >>= 4
        while size:
            head[-1] |= 0x80
            head.append(size & 0x7F)
            size >>= 7
        entry = bytes(head) + base + zlib.compress(delta)
        rows.append((raw, zlib.crc32(entry), len(body)))
        body += entry
    body += hashlib.sha1(body).digest()
    rows.sort()
    fan = b"".join(sum(1 for r in rows if r[0][0] <= b).to_bytes(4, "big") for b in range(256))
    idx = bytearray(b"\xfftOc\x00\x00\x00\x02" + fan + b"".join(r[0] for r in rows)
                    + b"".join(r[1].to_bytes(4, "big") for r in rows)
                    + b"".join(r[2].to_bytes(4, "big") for r in rows) + body[-20:])
    pack_dir = backup / "objects" / "pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    (pack_dir / "pack-cycle.pack").write_bytes(bytes(body))
    (pack_dir / "pack-cycle.idx").write_bytes(bytes(idx + hashlib.sha1(idx).digest()))
    # The submit reads the newest version's score file back from the backup to extend it.
    set_constants(run.paths.work, x=9)
    done = _avo_child(["submit", "--run", str(run.paths.root), "-m", "X=9"], runs_root, timeout=120)
    assert done is not None, "avo submit waited forever on a delta cycle"
    assert "Traceback" not in done.stdout, done.stdout
    assert read_any(backup, sha) is None  # not there: damaged, as a loose file that does not hash

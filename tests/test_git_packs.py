"""Objects read from git's pack files in-process, against `git cat-file` on the same packs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from avo.git_packs import Damaged, TooHard, apply_delta, packed_ids, read_packed


def _git(repo: Path, *args: str, data: bytes | None = None) -> bytes:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", "-C", str(repo), *args], input=data, env=env, capture_output=True,
                          check=True).stdout


def _history(repo: Path, commits: int) -> None:
    """A history whose files change a little per commit, so a repack stores deltas."""
    _git(repo, "init", "-q")
    lines = [f"line {i} " + "x" * (i % 13) for i in range(300)]
    for c in range(commits):
        lines[(c * 7) % len(lines)] = f"changed in {c}"
        lines.append(f"appended {c}")
        (repo / "scores.jsonl").write_text("\n".join(lines) + "\n")
        (repo / "sub").mkdir(exist_ok=True)
        (repo / "sub" / f"f{c % 3}").write_bytes(os.urandom(64) * (c % 4 + 1))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"v{c}")
        _git(repo, "tag", "-a", f"t{c}", "-m", f"tag {c}")


def _every_object(repo: Path) -> list[tuple[str, str]]:
    out = _git(repo, "cat-file", "--batch-all-objects", "--batch-check=%(objectname) %(objecttype)").decode()
    return [tuple(line.split()) for line in out.splitlines()]  # type: ignore[misc]


@pytest.mark.parametrize("repack", [["repack", "-q", "-a", "-d", "-f", "--depth=50", "--window=50"],
                                    ["-c", "repack.useDeltaBaseOffset=false", "repack", "-q", "-a", "-d", "-f"]],
                         ids=["offset-deltas", "ref-deltas"])
def test_every_packed_object_reads_as_git_reads_it(tmp_path: Path, repack: list[str]) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    _history(repo, 40)
    _git(repo, *repack)
    _git(repo, "prune-packed")
    objects = repo / ".git" / "objects"
    assert not any(p.name != "pack" and p.name != "info" for p in objects.iterdir() if any(p.iterdir()))
    every = _every_object(repo)
    assert len(packed_ids(objects / "pack")) == len(every)
    verify = _git(repo, "verify-pack", "-v", *(str(p) for p in (objects / "pack").glob("*.idx"))).decode()
    assert " delta" in verify or "chain length" in verify  # the history really is stored as deltas
    for sha, kind in every:
        got = read_packed(objects, sha)
        assert got is not None and got[1] == kind, sha
        assert got[2] == _git(repo, "cat-file", kind, sha)
    assert read_packed(objects, "0" * 40) is None


def test_a_pack_altered_after_git_wrote_it_reads_as_damaged(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    _history(repo, 5)
    _git(repo, "repack", "-q", "-a", "-d")
    _git(repo, "prune-packed")
    objects = repo / ".git" / "objects"
    pack = next((objects / "pack").glob("*.pack"))
    blob = _git(repo, "rev-parse", "HEAD:scores.jsonl").decode().strip()
    verify = _git(repo, "verify-pack", "-v", str(pack.with_suffix(".idx"))).decode()
    offset = next(int(line.split()[4]) for line in verify.splitlines() if line.startswith(blob))
    data = bytearray(pack.read_bytes())
    # Flip one bit inside the entry's compressed data, keeping the pack's size and trailer:
    # either zlib notices (left to git) or the content no longer hashes to its id.
    data[offset + 8] ^= 0x01
    pack.write_bytes(bytes(data))
    with pytest.raises((Damaged, TooHard)):
        read_packed(objects, blob)


def test_an_index_beside_another_pack_is_not_read(tmp_path: Path) -> None:
    repo, other = tmp_path / "r", tmp_path / "o"
    repo.mkdir()
    other.mkdir()
    _history(repo, 3)
    _history(other, 4)
    for r in (repo, other):
        _git(r, "repack", "-q", "-a", "-d")
        _git(r, "prune-packed")
    mine = next((repo / ".git" / "objects" / "pack").glob("*.idx"))
    theirs = next((other / ".git" / "objects" / "pack").glob("*.idx"))
    head = _git(other, "rev-parse", "HEAD").decode().strip()
    mine.write_bytes(theirs.read_bytes())  # an index planted beside a pack it does not index
    assert read_packed(repo / ".git" / "objects", head) is None
    assert packed_ids(repo / ".git" / "objects" / "pack") == set()


def test_a_delta_bomb_is_refused_not_built() -> None:
    # A 5-byte delta that claims a 1 TiB result from a 1-byte base: refused from its header.
    huge = (1 << 40)
    size = bytearray()
    while True:
        size.append((huge & 0x7F) | (0x80 if huge >> 7 else 0))
        huge >>= 7
        if not huge:
            break
    with pytest.raises(TooHard):
        apply_delta(b"x", b"\x01" + bytes(size) + b"\x91\x00\x01")
    # A copy past the end of the base, and a result longer than declared.
    with pytest.raises(TooHard):
        apply_delta(b"abc", b"\x03\x02\x91\x02\x05")
    with pytest.raises(TooHard):
        apply_delta(b"abc", b"\x03\x02\x91\x00\x03")
    assert apply_delta(b"abcdef", b"\x06\x05\x91\x01\x03\x02zz") == b"bcdzz"

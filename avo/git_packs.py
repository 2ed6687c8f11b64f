"""Git pack files read in-process: which ids a repository's packs hold, and one object's content.

A run's repositories are packed when they came from a bundle (``avo start --from`` a shipped
example) or were grown by ``git fast-import``; read-only commands then read those objects
here instead of importing GitPython and starting ``git cat-file`` for one commit. Only what
git itself would read counts: a version-2 index beside the pack it indexes (their checksums
agree), never a whole file of any size read at once, and every object hashed to its id.
"""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Collection
from pathlib import Path

from avo.errors import AvoError
from avo.regular_files import open_regular

IDX_MAGIC = b"\xfftOc\x00\x00\x00\x02"  # a version-2 pack index: git has written no other kind since 1.5.2
_KINDS = {1: "commit", 2: "tree", 3: "blob", 4: "tag"}
_OFS_DELTA, _REF_DELTA = 6, 7
MAX_OBJECT = 1 << 28  # larger objects (none in a run's record) are left to git's reader
_MAX_CHAIN = 4095  # git writes chains of at most 4095 deltas (pack.depth)
# What one read may cost here, over its whole delta chain: the bytes inflated and rebuilt
# (memory and copies), and the delta bytes walked one instruction at a time in Python (git
# walks them in C, ~100 times faster). A chain past either is left to git, as a large object is.
_MAX_WORK = MAX_OBJECT
_MAX_DELTA_BYTES = 1 << 18


class TooHard(Exception):
    """An object this reader leaves to git (too large, or stored in a form it does not read)."""


class Damaged(Exception):
    """A pack holds the id asked for, but its content does not hash to that id."""


def open_git_file(path: Path) -> int | None:
    """A descriptor of ``path`` if it is a regular file (never a link, a pipe or a device:
    a FIFO would be waited on forever, /dev/zero read forever); ``None`` if it is not there.

    Raises AvoError for anything else there: git itself would hang or fail on it."""
    try:
        return open_regular(path, follow_links=False,
                            why="git would wait on it or read it forever; move it away and run the command again")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise AvoError(f"{path} cannot be read ({exc.strerror}): it is not a regular file git wrote; move it "
                       "away and run the command again") from None


def object_id(kind: str, content: bytes | memoryview) -> str:
    """The id git gives an object of ``kind`` with ``content`` (no repository, no copy)."""
    h = hashlib.sha1(b"%s %d\0" % (kind.encode(), len(content)))
    h.update(content)
    return h.hexdigest()


def pread_exact(fd: int, size: int, offset: int) -> bytes | None:
    data = os.pread(fd, size, offset)
    return data if len(data) == size else None


def _index_count(fd: int, pack_fd: int) -> int | None:
    """The object count of a version-2 index that belongs to the pack ``pack_fd``, or ``None``."""
    size = os.fstat(fd).st_size
    head = pread_exact(fd, 8 + 1024, 0) if size >= 8 + 1024 + 40 else None
    if head is None or head[:8] != IDX_MAGIC:
        return None
    count = int.from_bytes(head[8 + 1020:], "big")
    # ids, CRCs, offsets (4 bytes each, plus 8 per large offset), the two checksums
    if not 8 + 1024 + 28 * count + 40 <= size <= 8 + 1024 + 36 * count + 40:
        return None
    trailer = pread_exact(fd, 20, size - 40)
    pack_size = os.fstat(pack_fd).st_size
    pack_sum = pread_exact(pack_fd, 20, pack_size - 20) if pack_size >= 32 else None
    # git opens a pack only if its header holds as many objects as its index lists
    # ("claims to have N objects while index indicates M"); nor may avo count it then.
    pack_head = pread_exact(pack_fd, 12, 0) if pack_size >= 32 else None
    if pack_head is None or pack_head[:4] != b"PACK" or pack_head[4:8] not in (b"\0\0\0\x02", b"\0\0\0\x03") \
            or int.from_bytes(pack_head[8:], "big") != count:
        return None
    return count if trailer is not None and pack_sum == trailer else None


def _pairs(pack_dir: Path) -> list[str]:
    try:
        return sorted(n[:-4] for n in os.listdir(pack_dir) if n.endswith(".idx"))
    except OSError:
        return []


_MAX_PACKS = 256  # git repacks past 50 (gc.autoPackLimit); a read here holds two descriptors per pack
_TABLE_READ = 1 << 20  # id tables up to this size are read at once; larger ones searched, as git does


def packed_ids(pack_dir: Path, among: Collection[bytes] | None = None) -> set[bytes]:
    """The ids (20 raw bytes) the version-2 pack indexes in ``pack_dir`` list (those of
    ``among`` only, when given), counting only an index whose pack is there and is the one it
    indexes (its checksum and object count), as git counts them: an index left without its
    pack (or planted beside another) lists objects git cannot read.

    Reads only an index's header and id table, never a whole file of any size: an index too
    large to read at once (a sparse file costs no disk) is searched for each id of ``among``."""
    out: set[bytes] = set()
    for stem in _pairs(pack_dir):
        pack_fd = open_git_file(pack_dir / f"{stem}.pack")
        if pack_fd is None:
            continue  # git ignores an index without its pack
        try:
            fd = open_git_file(pack_dir / f"{stem}.idx")
            if fd is None:
                continue
            try:
                count = _index_count(fd, pack_fd)
                if count is not None and among is not None and 20 * count > _TABLE_READ:
                    out.update(raw for raw in among if _find(fd, count, raw) is not None)
                    continue
                table = pread_exact(fd, 20 * count, 8 + 1024) if count is not None else None
                if table is not None:
                    out.update(table[i:i + 20] for i in range(0, len(table), 20))
            finally:
                os.close(fd)
        finally:
            os.close(pack_fd)
    return out


def _find(fd: int, count: int, raw: bytes) -> int | None:
    """The pack offset the index ``fd`` gives for the id ``raw``, or ``None``."""
    first = raw[0]
    bounds = pread_exact(fd, 8, 8 + 4 * (first - 1)) if first else b"\0\0\0\0" + (pread_exact(fd, 4, 8) or b"")
    if bounds is None or len(bounds) != 8:
        return None
    lo, hi = int.from_bytes(bounds[:4], "big"), int.from_bytes(bounds[4:], "big")
    if not 0 <= lo <= hi <= count:
        return None
    # A bucket of ordinary size is read at once; a larger one (a crafted fan-out puts every
    # id of a sparse index in one) is searched an id at a time.
    ids = pread_exact(fd, 20 * (hi - lo), 8 + 1024 + 20 * lo) if 20 * (hi - lo) <= _TABLE_READ else None
    a, b = 0, hi - lo
    while a < b:  # the ids are sorted
        mid = (a + b) // 2
        got = ids[20 * mid:20 * mid + 20] if ids is not None else pread_exact(fd, 20, 8 + 1024 + 20 * (lo + mid))
        if got is None:
            return None
        if got == raw:
            i = lo + mid
            small = pread_exact(fd, 4, 8 + 1024 + 24 * count + 4 * i)
            if small is None:
                return None
            offset = int.from_bytes(small, "big")
            if offset & 0x80000000:
                big = pread_exact(fd, 8, 8 + 1024 + 28 * count + 8 * (offset & 0x7FFFFFFF))
                return int.from_bytes(big, "big") if big is not None else None
            return offset
        if got < raw:
            a = mid + 1
        else:
            b = mid
    return None


class _Pack:
    def __init__(self, fd: int, idx: int, count: int):
        self.fd, self.idx, self.count = fd, idx, count
        self.size = os.fstat(fd).st_size

    def entry(self, offset: int) -> tuple[int, int, bytes | int, int]:
        """``(type, size, base, where its zlib data starts)`` of the entry at ``offset``: ``base`` is the
        base's offset (an offset delta) or raw id (a ref delta); the data is inflated by :meth:`inflate`."""
        if not 12 <= offset < self.size - 20:
            raise TooHard("an offset outside the pack")
        head = os.pread(self.fd, 32, offset)
        c = head[0]
        kind, size, shift, pos = (c >> 4) & 7, c & 15, 4, 1
        while c & 0x80:
            if pos >= len(head) or shift > 60:
                raise TooHard("a damaged entry header")
            c = head[pos]
            size |= (c & 0x7F) << shift
            shift, pos = shift + 7, pos + 1
        base: bytes | int = b""
        if kind == _OFS_DELTA:
            c = head[pos]
            back, pos = c & 0x7F, pos + 1
            while c & 0x80:
                if pos >= len(head):
                    raise TooHard("a damaged delta offset")
                c = head[pos]
                back, pos = ((back + 1) << 7) | (c & 0x7F), pos + 1
            if not 0 < back <= offset:
                raise TooHard("a delta base outside the pack")
            base = offset - back
        elif kind == _REF_DELTA:
            base = head[pos:pos + 20]
            pos += 20
        elif kind not in _KINDS:
            raise TooHard(f"entry type {kind}")
        return kind, size, base, offset + pos

    def inflate(self, start: int, size: int) -> bytes:
        if size > MAX_OBJECT:
            raise TooHard("an object too large to read here")
        unzip = zlib.decompressobj()
        parts, got, pos = [], 0, start
        try:
            while not unzip.eof:
                chunk = os.pread(self.fd, 1 << 16, pos)
                if not chunk:
                    raise TooHard("a truncated entry")
                pos += len(chunk)
                part = unzip.decompress(chunk, size + 1 - got)  # never more than one byte past the header's size
                parts.append(part)
                got += len(part)
                if got > size:
                    raise TooHard("an entry longer than its header says")
        except zlib.error:
            raise TooHard("a damaged entry") from None
        if got != size:
            raise TooHard("an entry shorter than its header says")
        return b"".join(parts)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data):
            raise TooHard("a damaged delta")
        c = data[pos]
        value |= (c & 0x7F) << shift
        shift, pos = shift + 7, pos + 1
        if not c & 0x80:
            return value, pos


def apply_delta(base: bytes, delta: bytes) -> bytes:
    """``base`` rebuilt by a git delta (copy and insert instructions)."""
    want_base, pos = _varint(delta, 0)
    size, pos = _varint(delta, pos)
    if want_base != len(base) or size > MAX_OBJECT:
        raise TooHard("a delta for another base")
    out = bytearray()
    while pos < len(delta):
        op = delta[pos]
        pos += 1
        if op & 0x80:  # copy from the base: offset and size bytes as the low bits say
            offset = length = 0
            for i in range(4):
                if op & (1 << i):
                    offset |= delta[pos] << (8 * i)
                    pos += 1
            for i in range(3):
                if op & (1 << (4 + i)):
                    length |= delta[pos] << (8 * i)
                    pos += 1
            length = length or 0x10000
            if offset + length > len(base):
                raise TooHard("a delta copying past its base")
            out += base[offset:offset + length]
        elif op:  # insert the next ``op`` bytes
            out += delta[pos:pos + op]
            pos += op
        else:
            raise TooHard("a delta with a reserved instruction")
        if len(out) > size:
            raise TooHard("a delta longer than it says")
    if len(out) != size:
        raise TooHard("a delta shorter than it says")
    return bytes(out)


def _resolve(packs: list[_Pack], pack: _Pack, offset: int) -> tuple[str, bytes]:
    # The chain is walked by its headers first, nothing inflated: its cost (the bytes it
    # would inflate and rebuild, the delta bytes walked in Python) is known before any is
    # paid, and a chain that leads back to an entry (ref deltas on each other, which git's
    # own reader loops on forever) or is longer than git writes is refused, never left to git.
    steps: list[tuple[_Pack, int, int, int]] = []
    seen: set[tuple[int, int]] = set()
    work = deltas = 0
    while True:
        if (pack.fd, offset) in seen:
            raise Damaged("a delta chain that leads back to itself")
        if len(seen) > _MAX_CHAIN:
            raise Damaged("a delta chain longer than git writes")
        seen.add((pack.fd, offset))
        kind, size, base, start = pack.entry(offset)
        work += size
        deltas += size if kind not in _KINDS else 0
        steps.append((pack, kind, size, start))
        if kind in _KINDS:
            break
        if isinstance(base, int):
            offset = base
            continue
        found = next(((p, o) for p in packs if (o := _find(p.idx, p.count, base)) is not None), None)
        if found is None:
            raise TooHard("a delta whose base is in no pack")  # a thin pack: git may still know it
        pack, offset = found
    if work > _MAX_WORK or deltas > _MAX_DELTA_BYTES:
        raise TooHard("a delta chain costlier than this reader builds")
    top, kind, size, start = steps[-1]
    data = top.inflate(start, size)
    for step, _kind, size, start in reversed(steps[:-1]):  # one delta in memory at a time
        delta = step.inflate(start, size)
        work += _varint(delta, _varint(delta, 0)[1])[0]  # the size it rebuilds
        if work > _MAX_WORK:
            raise TooHard("a delta chain costlier than this reader builds")
        data = apply_delta(data, delta)
    return _KINDS[kind], data


def read_packed(objects: Path, sha: str) -> tuple[str, str, bytes] | None:
    """``(id, type, content)`` of the object ``sha`` from the packs under ``objects``, or
    ``None`` when no pack holds it.

    Raises :class:`Damaged` when a pack holds something that does not hash to ``sha``
    (damaged or forged, as a loose file that does not hash to its name), and
    :class:`TooHard` for what this reader leaves to git (a very large object, a thin pack's
    missing base, an entry it cannot parse)."""
    raw = bytes.fromhex(sha)
    pack_dir = objects / "pack"
    packs: list[_Pack] = []
    stems = _pairs(pack_dir)
    if len(stems) > _MAX_PACKS:  # planted by the thousand, they would exhaust the descriptors
        raise TooHard("more packs than this reader opens at once")
    try:
        for stem in stems:
            pack_fd = open_git_file(pack_dir / f"{stem}.pack")
            if pack_fd is None:
                continue
            try:
                fd = open_git_file(pack_dir / f"{stem}.idx")
            except AvoError:
                os.close(pack_fd)  # not yet in packs, which the finally below closes
                raise
            if fd is None:
                os.close(pack_fd)
                continue
            count = _index_count(fd, pack_fd)
            packs.append(_Pack(pack_fd, fd, count if count is not None else -1))
        for pack in packs:
            if pack.count < 0:
                continue
            offset = _find(pack.idx, pack.count, raw)
            if offset is None:
                continue
            kind, data = _resolve([p for p in packs if p.count >= 0], pack, offset)
            if object_id(kind, data) != sha:
                raise Damaged(f"the packed object {sha[:12]} does not hash to its id")
            return sha, kind, data
        return None
    finally:
        for pack in packs:
            os.close(pack.fd)
            os.close(pack.idx)

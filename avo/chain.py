"""The trajectory as a hash chain: each line names the hash of the line before it.

Every record avo appends carries ``seq`` (one more than the previous record's) and ``prev``
(the SHA-256 of the previous line), and ``run.json`` keeps the hash and number of the last
line (the head). So a line edited, inserted or deleted anywhere is found, and named, by
:func:`verify`. ``avo recover`` never deletes a line: it appends a ``recovered`` record that
names each broken line with the hash it had then, and those lines are flagged from then on
instead of refused (and left out of what avo reads back).
"""

from __future__ import annotations

import bisect
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

RECOVERED = "recovered"


class ChainHead(BaseModel):
    """What ``run.json`` knows of the trajectory: how many lines, and the last one's hash."""

    count: int
    sha: str
    # The file's size just past that line: a tail that ends there and hashes to ``sha`` is
    # the head's, so an append reads the tail alone. Absent in runs recorded before it.
    end: int | None = None


def line_hash(line: bytes) -> str:
    """The hash a line is chained by (without its newline)."""
    return hashlib.sha256(line.rstrip(b"\n")).hexdigest()


def split_lines(data: bytes) -> tuple[list[bytes], bytes]:
    """Complete lines (without newline) and a torn tail (a write cut off by a kill)."""
    parts = data.split(b"\n")
    return parts[:-1], parts[-1]


def parse(line: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError):  # a line of 100,000 nested brackets
        return None
    return value if isinstance(value, dict) else None


def follows(record: dict[str, Any], before: bytes) -> bool:
    """Whether ``record`` chains to the line ``before`` it (where avo wrote it, not a copy moved)."""
    return record.get("prev") == line_hash(before)


def link_after(count: int, last_line: bytes) -> dict[str, Any]:
    """``seq`` and ``prev`` for a record appended after ``count`` lines ending with ``last_line``."""
    if not count:
        return {"seq": 1, "prev": None}
    last = parse(last_line) or {}
    seq = last.get("seq")
    return {"seq": seq + 1 if isinstance(seq, int) else count + 1, "prev": line_hash(last_line)}


def acknowledged(records: list[dict[str, Any] | None], lines: list[bytes] | None = None,
                 counts: Callable[[bytes], bool] | None = None, what: str = "acknowledged") -> dict[int, str]:
    """``{line: hash}`` of every line a ``recovered`` record set aside (``what="gaps"``: every line
    it kept though lines before it were deleted); with ``counts`` (whether avo signed a line of
    ``lines``), only the records avo wrote: a ``recovered`` line of the agent's naming avo's
    accepted submit set it aside, and recover dropped every version."""
    out: dict[int, str] = {}
    for i, r in enumerate(records):
        if r and r.get("kind") == RECOVERED and (counts is None or lines is None or counts(lines[i])):
            for item in r.get(what) or []:
                if isinstance(item, dict) and isinstance(item.get("line"), int):
                    out[item["line"]] = str(item.get("sha"))
    return out


@dataclass
class ChainReport:
    """What :func:`verify` found. Line numbers are 1-based, as an editor shows them."""

    lines: list[bytes]
    records: list[dict[str, Any] | None]
    problems: dict[int, str] = field(default_factory=dict)  # not set aside: the record is broken
    flagged: dict[int, str] = field(default_factory=dict)  # set aside by `avo recover`
    # Lines of avo's that follow deleted lines, not yet noted by `avo recover` (they stay: only
    # what was before them is gone; set aside, one deleted line dropped every version after it).
    gaps: dict[int, str] = field(default_factory=dict)
    head_problem: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and not self.gaps and self.head_problem is None

    def describe(self) -> list[str]:
        out = [f"trajectory.jsonl line {n} {what}" for n, what in sorted({**self.problems, **self.gaps}.items())]
        if self.head_problem:
            out.append(f"trajectory.jsonl: {self.head_problem}")
        return out


def _seq(record: dict[str, Any] | None) -> int | None:
    seq = (record or {}).get("seq")
    return seq if isinstance(seq, int) else None


@dataclass
class _Walk:
    """The trajectory's lines as the walk along the chain sees them, and what it found."""

    records: list[dict[str, Any] | None]
    hashes: list[str]
    acks: dict[int, str]  # lines a `recovered` record set aside, by the hash they had
    found: dict[int, str]
    gaps: dict[int, str] = field(default_factory=dict)  # lines of avo's after deleted lines
    first: dict[str, int] = field(default_factory=dict)  # each hash's first line index
    dups: dict[str, list[int]] = field(default_factory=dict)  # a hash on several lines: their indexes
    stood: bytearray = field(default_factory=bytearray)  # 1 where the chain passes through
    skipped: dict[int, tuple[int, int]] = field(default_factory=dict)  # index: (line after, line before)

    def __post_init__(self) -> None:
        n = len(self.hashes)
        self.first = dict(zip(reversed(self.hashes), range(n - 1, -1, -1), strict=True))
        self.stood = bytearray(n)
        if len(self.first) != n:  # byte-identical lines (copies): only then is each index kept
            for i, h in enumerate(self.hashes):
                if self.first[h] != i:
                    self.dups.setdefault(h, [self.first[h]]).append(i)

    def indexes(self, h: Any) -> list[int]:
        """The line indexes whose hash is ``h``, ascending."""
        if not isinstance(h, str) or h not in self.first:
            return []
        return self.dups.get(h) or [self.first[h]]

    def linked(self, i: int) -> bool:
        r = self.records[i]
        return r is not None and "prev" in r

    def before(self, prev: Any, j: int, avos: Callable[[int], bool]) -> int | None:
        """The line ``prev`` names, nearest before line index ``j``: of lines alike byte for byte
        (a copy), one `avo recover` did not set aside (it chained its own record past that one).

        Never one across a line avo signed that is no copy (``avos``): such a link names a copy
        put in early, its original since edited (a break, not every line between inserted)."""
        at = self.indexes(prev)
        below = bisect.bisect_left(at, j)
        found = next((i for i in reversed(at[:below]) if self.acks.get(i + 1) != self.hashes[i]),
                     at[below - 1] if below else None)
        if found is not None and any(self.hashes[m] not in self.dups and avos(m) for m in range(found + 1, j)):
            return None
        return found

    def name(self, i: int, what: str) -> None:
        """Name line index ``i``: a copy of a line the chain passes through, else ``what``."""
        same = next((k for k in self.indexes(self.hashes[i]) if self.stood[k] and k != i), None)
        self.found.setdefault(i + 1, f"is a copy of line {same + 1} (the same bytes)" if same is not None else what)


def _walk(w: _Walk, start: int, avos: Callable[[bytes], bool], lines: list[bytes],
          may_start: Callable[[int], bool], signed: bool) -> None:
    """Follow ``prev`` back from line index ``start`` (the head's line), naming what the chain
    skips (inserted or copied lines) and where it breaks (an edited or deleted line).

    The walk, not each pair of neighbours, decides: a copy of an old line of avo's appended at
    the end does not chain to the line before it, and blaming that line (avo's newest) made
    `avo recover` set it aside and drop its version. Where the chain breaks, a link of a line
    avo signed is its own, so the line before it is the edited one; the walk goes on below that
    line without following its (edited) link. ``signed``: the run's lines carry avo's signature
    (a line that still has it was not edited: put there from elsewhere).
    """
    records, hashes, acks, stood = w.records, w.hashes, w.acks, w.stood
    j = start
    while True:
        stood[j] = 1
        r = records[j] or {}
        if "prev" not in r:
            return  # the unchained start of an older run
        prev = r["prev"]
        if j > 0 and prev == hashes[j - 1] and acks.get(j) != prev:
            j -= 1  # (the line before: every link of an intact chain, looked up at no cost)
            continue
        below = j - 1
        while below >= 0 and acks.get(below + 1) == hashes[below]:
            below -= 1  # lines a repair set aside right below: `avo recover` chains its record past them
        if below < j - 1 and below >= 0 and prev == hashes[below]:
            w.skipped.update(dict.fromkeys(range(below + 1, j), (j, below)))
            j = below
            continue
        if prev is None:
            w.skipped.update(dict.fromkeys(range(j), (j, -1)))  # before the run's first line
            return
        k = w.before(prev, j, lambda m: avos(lines[m]))
        if k is not None:
            w.skipped.update(dict.fromkeys(range(k + 1, j), (j, k)))
            j = k
            continue
        if j == 0:
            w.found.setdefault(1, "was edited or inserted (the first line must chain to nothing)")
            return
        seq, before = _seq(r), _seq(records[j - 1])
        if not avos(lines[j]):
            w.found.setdefault(j + 1, "was edited (it chains to no line before it)")
            j -= 1
        elif w.linked(j - 1) and may_start(j - 1) and seq is not None and before is not None and seq > before + 1:
            w.gaps.setdefault(j + 1, f"follows a gap: {seq - before - 1} line(s) before it were deleted")
            j -= 1
        else:  # avo's link is its own: the line before it is not the one it names
            w.found.setdefault(j, "is out of place (avo's, unedited, but the line after it chains past it: moved?)"
                               if signed and avos(lines[j - 1])
                               else "was edited (the line after it records another hash for it)")
            j -= 2
        # Past a break the walk goes on only from a line of avo's that is no copy: a line put there
        # by hand must not steer it with its link (one numbered 0 made every line before it "inserted").
        while j >= 0 and not (w.linked(j) and may_start(j)):
            if w.linked(j):
                w.found.setdefault(j + 1, "was edited or put there (the chain breaks after it)")
            j -= 1
        if j < 0:
            return


def _past_head(w: _Walk, head: int, avos: Callable[[int], bool]) -> None:
    """Lines after the head's: each must chain to the line before it or to the newest line of
    avo's before it (a command killed between its append and the head's move leaves such lines);
    any other is a stranger, whatever it copies. A line of the agent's chained in after the head
    must not end the chain alone: taken as its end, it made avo's lines after it strangers, and
    `avo recover` dropped every version (red team, round ten)."""
    last = ours = head  # the newest line taken in, and the newest of avo's
    for m in range(head + 1, len(w.records)):
        if not w.linked(m):
            continue
        # (avo chains its next line to whatever ends the file, a line of the agent's too; a line
        # of the agent's taken in is named by what it claims, by the record check)
        if (w.records[m] or {}).get("prev") in (w.hashes[last], w.hashes[ours]):
            w.stood[m] = 1
            last = m
            if avos(m):
                ours = m
            continue
        seq, before = _seq(w.records[m]), _seq(w.records[last])
        older = seq is not None and before is not None and seq <= before
        w.name(m, f"is out of place: it is numbered {seq}, after line {last + 1} numbered {before} (a copy of an "
                  "earlier line?)" if older
               else f"does not chain to line {last + 1}, the newest link of the chain (appended after it by hand?)")


def verify(data: bytes, head: ChainHead | None, counts: Callable[[bytes], bool] | None = None) -> ChainReport:
    """Check every link of the chain and the head; name each broken line.

    ``counts``: whether a line is avo's (its signature, in a run whose lines are signed). The
    walk starts from the line the head vouches for only if it is: ``run.json`` is the agent's to
    edit too, and a head moved onto a line of the agent's made the walk skip avo's lines after
    that line's link (set aside by `avo recover`, their versions dropped). Else it starts from
    the newest line of avo's.
    """
    lines, _torn = split_lines(data)
    records = [parse(line) for line in lines]
    hashes = [line_hash(line) for line in lines]
    report = ChainReport(lines, records)
    found: dict[int, str] = {}
    chained_from: int | None = None
    for i, r in enumerate(records):
        if r is None:
            found.setdefault(i + 1, "is not a JSON record (edited?)")
        elif "prev" not in r:
            if chained_from is not None:  # older runs had unchained lines, but only at the start
                found.setdefault(i + 1, "carries no chain hash (inserted, or rewritten without one)")
        elif chained_from is None:
            chained_from = i
    avos = counts or (lambda line: True)
    acks = acknowledged(records, lines, counts)
    w = _Walk(records, hashes, acks, dict(found))
    # Where the walk starts: the line the head vouches for (at its count, else the last of that
    # hash), if it is avo's and no copy; else the newest such line; else the last chained line.
    vouched = None
    moved = False
    if head is not None and 0 < head.count <= len(lines) and hashes[head.count - 1] == head.sha:
        vouched = head.count - 1
    elif head is not None and w.indexes(head.sha):
        vouched, moved = w.indexes(head.sha)[-1], True
    # A byte-copy of an earlier line whose hash some line chains to is not the newest link,
    # wherever the head points (a head moved by hand onto a copy appended at the end).
    links = {r["prev"] for r in records if r is not None and isinstance(r.get("prev"), str)} if w.dups else set()

    def may_start(i: int) -> bool:
        return avos(lines[i]) and (w.first[hashes[i]] == i or hashes[i] not in links)

    newest = range(len(lines) - 1, -1, -1)
    latest = next((i for i in newest if w.linked(i) and may_start(i)), None)
    start = vouched if vouched is not None and may_start(vouched) else (
        latest if latest is not None else vouched if vouched is not None else next(
            (i for i in newest if w.linked(i)), None))

    def walked(start: int) -> _Walk:
        walk = _Walk(records, hashes, acks, dict(found))
        _walk(walk, start, avos, lines, may_start, counts is not None)
        _past_head(walk, start, lambda m: avos(lines[m]))
        for m, (after, before) in sorted(walk.skipped.items()):
            if m + 1 in walk.found or walk.stood[m]:
                continue
            alone = after == m + 1 and before == m - 1
            walk.name(m, "was inserted (the line after it chains to the line before it)" if alone
                      else f"was inserted (line {after + 1} chains past it, to line {before + 1})" if before >= 0
                      else f"was inserted before the run's first line (line {after + 1})")
        return walk

    if start is not None and chained_from is not None and start >= chained_from:
        w = walked(start)
        if moved and latest is not None and latest != start:
            # The head's line is not where run.json counts it: lines inserted or deleted before it
            # shift it, but so does moving it up (avo's lines after it were then all "out of place"
            # and `avo recover` dropped every version after it: red team, round ten). The walk from
            # the newest line of avo's is the other reading; the one that breaks fewer of avo's
            # lines stands.
            other = walked(latest)
            # Only avo's lines weigh: lines of the agent's would tip the choice at will.
            if sum(avos(lines[n - 1]) for n in other.found) < sum(avos(lines[n - 1]) for n in w.found):
                w = other
    found = w.found
    if head is not None and head.count > len(lines):
        report.head_problem = (f"the last {head.count - len(lines)} line(s) were deleted (run.json's record of "
                               f"the trajectory ends at line {head.count}, the file at line {len(lines)})")
    elif head is not None and head.count > 0 and hashes[head.count - 1] != head.sha and head.sha not in w.first:
        found.setdefault(head.count, "was edited (run.json's chain head records another hash for it)")
    elif head is None and chained_from is not None:
        report.head_problem = "run.json keeps no chain head, yet the trajectory is chained (run.json replaced?)"
    for n, what in found.items():
        if acks.get(n) == hashes[n - 1]:
            report.flagged[n] = what
        else:
            report.problems[n] = what
    noted = acknowledged(records, lines, counts, "gaps")
    report.gaps = {n: what for n, what in w.gaps.items() if n not in found and noted.get(n) != hashes[n - 1]}
    return report

"""The trajectory as a hash chain: each line names the hash of the line before it.

Every record avo appends carries ``seq`` (one more than the previous record's) and ``prev``
(the SHA-256 of the previous line), and ``run.json`` keeps the hash and number of the last
line (the head). So a line edited, inserted or deleted anywhere is found, and named, by
:func:`verify`. ``avo recover`` never deletes a line: it appends a ``recovered`` record that
names each broken line with the hash it had then, and those lines are flagged from then on
instead of refused (and left out of what avo reads back).
"""

from __future__ import annotations

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
    except (ValueError, UnicodeDecodeError):
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


def acknowledged(records: list[dict[str, Any] | None]) -> dict[int, str]:
    """``{line: hash}`` of every line a ``recovered`` record set aside."""
    out: dict[int, str] = {}
    for r in records:
        if r and r.get("kind") == RECOVERED:
            for item in r.get("acknowledged") or []:
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
    head_problem: str | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and self.head_problem is None

    def describe(self) -> list[str]:
        out = [f"trajectory.jsonl line {n} {what}" for n, what in sorted(self.problems.items())]
        if self.head_problem:
            out.append(f"trajectory.jsonl: {self.head_problem}")
        return out


def _seq(record: dict[str, Any] | None) -> int | None:
    seq = (record or {}).get("seq")
    return seq if isinstance(seq, int) else None


@dataclass
class _Lines:
    """The trajectory's lines as the walk along the chain sees them."""

    records: list[dict[str, Any] | None]
    hashes: list[str]
    first: dict[str, int]  # each hash's first line (an exact copy later in the file is named as one)

    def linked(self, i: int) -> bool:
        """Whether line index ``i`` is a chained record the walk may stand on."""
        r = self.records[i]
        return r is not None and "prev" in r and self.first[self.hashes[i]] == i

    def chains(self, i: int, to: int) -> bool:
        return (self.records[i] or {}).get("prev") == self.hashes[to]


def _walk(lines: _Lines, start: int, found: dict[int, str]) -> None:
    """Follow ``prev`` back from line index ``start`` (the head's line), naming what the chain
    skips (inserted or copied lines) and where it breaks (an edited or deleted line).

    The walk, not each pair of neighbours, decides: a copy of an old line of avo's appended at
    the end does not chain to the line before it, and blaming that line (avo's newest) made
    `avo recover` set it aside and drop its version.
    """
    records, first = lines.records, lines.first
    j = start
    while (r := records[j]) is not None and "prev" in r:  # down to the unchained start of an older run
        prev = r["prev"]
        if j == 0:
            if prev is not None:
                found.setdefault(1, "was edited or inserted (the first line must chain to nothing)")
            return
        k = first.get(prev) if prev is not None else None
        if k is not None and k < j:
            for m in range(k + 1, j):
                found.setdefault(m + 1, "was inserted (the line after it chains to the line before it)"
                                 if j == m + 1 else f"was inserted (line {j + 1} chains past it, to line {k + 1})")
            j = k
            continue
        seq, before = _seq(r), _seq(records[j - 1])
        if prev is None:
            found.setdefault(j + 1, "was edited or inserted (only the first line chains to nothing)")
        elif seq is not None and before is not None and seq > before + 1:
            found.setdefault(j + 1, f"follows a gap: {seq - before - 1} line(s) before it were deleted")
        else:
            found.setdefault(j, "was edited (the line after it records another hash for it)")
        j -= 1
        while j > 0 and not lines.linked(j):  # named already: not JSON, unchained, an exact copy
            j -= 1


def _past_head(lines: _Lines, head: int, found: dict[int, str]) -> None:
    """Lines after the head's: each must chain to the one before it (a command killed between its
    append and the head's move leaves such lines); any other is a stranger, whatever it copies."""
    last = head
    for m in range(head + 1, len(lines.records)):
        if not lines.linked(m):
            continue
        if lines.chains(m, last):
            last = m
            continue
        seq, before = _seq(lines.records[m]), _seq(lines.records[last])
        older = seq is not None and before is not None and seq <= before
        found.setdefault(m + 1, f"is out of place: it is numbered {seq}, after line {last + 1} numbered {before} "
                                "(a copy of an earlier line?)" if older
                         else f"does not chain to line {last + 1}, the newest link of the chain (appended after it "
                              "by hand?)")


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
    first: dict[str, int] = {}
    chained_from: int | None = None
    for i, r in enumerate(records):
        if r is None:
            found.setdefault(i + 1, "is not a JSON record (edited?)")
        elif "prev" not in r:
            if chained_from is not None:  # older runs had unchained lines, but only at the start
                found.setdefault(i + 1, "carries no chain hash (inserted, or rewritten without one)")
        elif chained_from is None:
            chained_from = i
        if hashes[i] in first and r is not None and "prev" in r:
            found.setdefault(i + 1, f"is a copy of line {first[hashes[i]] + 1} (the same bytes)")
        first.setdefault(hashes[i], i)
    walk = _Lines(records, hashes, first)
    # Where the walk starts: the line run.json's head vouches for (its first copy), else the last.
    avos = counts or (lambda line: True)
    vouched = first.get(head.sha) if head is not None and head.count > 0 else None
    start = vouched if vouched is not None and avos(lines[vouched]) else next(
        (i for i in range(len(lines) - 1, -1, -1) if walk.linked(i) and avos(lines[i])), None)
    if start is not None and chained_from is not None and start >= chained_from:
        _walk(walk, start, found)
        _past_head(walk, start, found)
    if head is not None:
        n = len(lines)
        if head.count > n:
            report.head_problem = (f"the last {head.count - n} line(s) were deleted (run.json's record of "
                                   f"the trajectory ends at line {head.count}, the file at line {n})")
        elif head.count > 0 and hashes[head.count - 1] != head.sha:
            found.setdefault(head.count, "was edited (run.json's chain head records another hash for it)")
    elif chained_from is not None:
        report.head_problem = "run.json keeps no chain head, yet the trajectory is chained (run.json replaced?)"
    acks = acknowledged(records)
    for n, what in found.items():
        if acks.get(n) == hashes[n - 1]:
            report.flagged[n] = what
        else:
            report.problems[n] = what
    return report

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
    beyond_head: int = 0  # chained lines after run.json's head (a command killed mid-append)

    @property
    def ok(self) -> bool:
        return not self.problems and self.head_problem is None

    def describe(self) -> list[str]:
        out = [f"trajectory.jsonl line {n} {what}" for n, what in sorted(self.problems.items())]
        if self.head_problem:
            out.append(f"trajectory.jsonl: {self.head_problem}")
        return out


def verify(data: bytes, head: ChainHead | None) -> ChainReport:
    """Check every link of the chain and the head; name each broken line."""
    lines, _torn = split_lines(data)
    records = [parse(line) for line in lines]
    hashes = [line_hash(line) for line in lines]
    report = ChainReport(lines, records)
    found: dict[int, str] = {}
    chained_from: int | None = None
    for i, r in enumerate(records):
        if r is None:
            found.setdefault(i + 1, "is not a JSON record (edited?)")
            continue
        if "prev" not in r:
            if chained_from is not None:  # older runs had unchained lines, but only at the start
                found.setdefault(i + 1, "carries no chain hash (inserted, or rewritten without one)")
            continue
        if chained_from is None:
            chained_from = i
        expected = hashes[i - 1] if i > 0 else None
        if r["prev"] == expected:
            continue
        prev_rec = records[i - 1] if i > 0 else None
        seq, prev_seq = r.get("seq"), (prev_rec or {}).get("seq")
        if i >= 2 and r["prev"] == hashes[i - 2]:
            found.setdefault(i, "was inserted (the line after it chains to the line before it)")
        elif isinstance(seq, int) and isinstance(prev_seq, int) and seq > prev_seq + 1:
            found.setdefault(i + 1, f"follows a gap: {seq - prev_seq - 1} line(s) before it were deleted")
        elif i > 0:
            found.setdefault(i, "was edited (the line after it records another hash for it)")
        else:
            found.setdefault(1, "was edited or inserted (the first line must chain to nothing)")
    if head is not None:
        n = len(lines)
        if head.count > n:
            report.head_problem = (f"the last {head.count - n} line(s) were deleted (run.json's record of "
                                   f"the trajectory ends at line {head.count}, the file at line {n})")
        elif head.count > 0 and hashes[head.count - 1] != head.sha:
            found.setdefault(head.count, "was edited (run.json's chain head records another hash for it)")
        else:
            report.beyond_head = n - head.count
    elif chained_from is not None:
        report.head_problem = "run.json keeps no chain head, yet the trajectory is chained (run.json replaced?)"
    acks = acknowledged(records)
    for n, what in found.items():
        if acks.get(n) == hashes[n - 1]:
            report.flagged[n] = what
        else:
            report.problems[n] = what
    return report

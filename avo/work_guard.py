"""What must hold of ``work/`` before avo snapshots it: a size limit, and a .git of its own."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from avo.errors import AvoError
from avo.models import WorkLimits


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def check_work_limits(work: Path, limits: WorkLimits) -> None:
    """Raise, naming the count or size and the biggest offenders, if work/ holds too much.

    Counts every file outside ``.git`` (ignored ones too: git still walks them) by its
    apparent size, which is what a snapshot would read.
    """
    files = 0
    total = 0
    biggest: list[tuple[int, str]] = []
    per_dir: Counter[str] = Counter()
    for root, dirs, names in os.walk(work):
        if root == str(work):
            dirs[:] = [d for d in dirs if d != ".git"]
        rel_root = os.path.relpath(root, work)
        top = rel_root.split(os.sep)[0] if rel_root != "." else "."
        for name in names:
            try:
                size = os.lstat(os.path.join(root, name)).st_size
            except OSError:
                continue
            files += 1
            total += size
            per_dir[top + "/" if top != "." else "(top level)"] += 1
            biggest.append((size, os.path.join(rel_root, name) if rel_root != "." else name))
            if len(biggest) > 64:
                biggest = sorted(biggest, reverse=True)[:5]
    biggest = sorted(biggest, reverse=True)[:5]
    if files > limits.files:
        worst = ", ".join(f"{d} ({c:,} files)" for d, c in per_dir.most_common(5))
        raise AvoError(
            f"work/ holds {files:,} files, more than this run's limit of {limits.files:,}; the most are in "
            f"{worst}. A candidate is source code: delete generated files (or list them in work/.gitignore "
            "and move them out of work/), then try again. The limit is the target's work_limits.files.")
    if total > limits.bytes:
        worst = ", ".join(f"{p} ({_size(s)})" for s, p in biggest)
        raise AvoError(
            f"work/ holds {_size(total)} in {files:,} files, more than this run's limit of "
            f"{_size(limits.bytes)}; the largest files are {worst}. Delete or move them out of work/, "
            "then try again. The limit is the target's work_limits.bytes.")

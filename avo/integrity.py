"""Fingerprints of the evaluator and the knowledge base, checked before every evaluation."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from avo.errors import IntegrityError

_SKIP_DIRS = {"__pycache__", ".git", ".mypy_cache", ".pytest_cache", ".ruff_cache"}
_SKIP_SUFFIXES = {".pyc", ".pyo"}


Identity = tuple[int, int, int]  # (device, inode, ctime in ns) of a file


def identity(path: str | Path) -> Identity:
    """Which file ``path`` is, and when it last changed: rewriting it, even with its old bytes,
    or putting another file in its place changes this, and no user can set a ctime back."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_ctime_ns


def hash_tree(root: Path, exclude: set[Path] | None = None,
              seen: dict[str, Identity] | None = None) -> dict[str, str]:
    """``{relative path: sha256}`` of every file under ``root`` (caches and ``exclude`` skipped).

    ``seen`` receives each file's :func:`identity`, taken before its content is read: a file
    swapped after it was hashed shows a new identity, one swapped before a new hash."""
    excluded = {p.resolve() for p in exclude or set()}
    out: dict[str, str] = {}
    if root.is_file():
        if seen is not None:
            seen[root.name] = identity(root)
        return {root.name: hashlib.sha256(root.read_bytes()).hexdigest()}
    # Prune excluded and cache folders while walking: a runs/ folder inside a target can be big.
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS and (here / d).resolve() not in excluded)
        for name in sorted(files):
            path = here / name
            if path.suffix in _SKIP_SUFFIXES or path.resolve() in excluded or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            if seen is not None:
                seen[rel] = identity(path)
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def compare(kind: str, recorded: dict[str, str], current: dict[str, str], where: Path) -> None:
    """Raise :class:`IntegrityError` naming the files that differ from the recorded hashes."""
    if recorded == current:
        return
    changed = sorted(k for k in recorded.keys() & current.keys() if recorded[k] != current[k])
    added = sorted(current.keys() - recorded.keys())
    removed = sorted(recorded.keys() - current.keys())
    parts = [f"{label}: {', '.join(names[:5])}" for label, names in
             (("modified", changed), ("added", added), ("removed", removed)) if names]
    raise IntegrityError(
        f"the {kind} changed since this run started ({'; '.join(parts)} under {where}). "
        f"A run is only honest against the {kind} it started with: restore it, or start a new run."
    )

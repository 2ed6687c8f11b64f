"""Unfinished runs: the hidden ``.NAME.partial`` folders a failed or interrupted start leaves.

``avo start`` builds a run in ``.RUN-ID.partial`` and renames it when v0 is committed, so a
half-made run is never taken for a real one. A start that fails keeps its folder (the error
points at the log inside it); ``avo runs`` lists such folders, ``avo runs --clean`` and the
next ``avo start`` remove them. A folder whose start is still running is never touched.
"""

from __future__ import annotations

import functools
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ParamSpec, TypeVar

CREATOR_FILE = ".avo/creator.pid"
P = ParamSpec("P")
R = TypeVar("R")
_building: set[Path] = set()  # folders this process is building right now


@dataclass(frozen=True)
class Partial:
    """One unfinished run folder."""

    path: Path
    run_id: str
    alive: bool  # its start is still running

    @property
    def logs(self) -> list[Path]:
        folder = self.path / "logs"
        return sorted(folder.glob("*.log")) if folder.is_dir() else []


def mark_creator(folder: Path) -> None:
    """Record which process builds ``folder`` (so a concurrent cleanup leaves it alone)."""
    from avo.runner import process_start_time

    pid = os.getpid()
    (folder / CREATOR_FILE).write_text(f"{pid} {process_start_time(pid) or ''}\n")
    _building.add(folder)


def builds_partials(fn: Callable[P, R]) -> Callable[P, R]:
    """When ``fn`` returns or fails, the folders it marked are no longer being built."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            result = fn(*args, **kwargs)
        finally:
            for folder in list(_building):
                (folder / CREATOR_FILE).unlink(missing_ok=True)
                _building.discard(folder)
        private = getattr(getattr(result, "paths", None), "private", None)
        if isinstance(private, Path):  # the finished run keeps no creator mark
            (private / Path(CREATOR_FILE).name).unlink(missing_ok=True)
        return result

    return wrapper


def _alive(folder: Path) -> bool:
    from avo.runner import process_start_time

    try:
        pid_text, _, started = (folder / CREATOR_FILE).read_text().strip().partition(" ")
        pid = int(pid_text)
    except (OSError, ValueError):
        return False
    now = process_start_time(pid)
    if now is None:
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return not started  # no /proc: trust a live pid only when no start time was recorded
    return not started or now == started


def list_partials(root: Path) -> list[Partial]:
    """Every ``.RUN-ID.partial`` folder under ``root``, oldest name first."""
    if not root.is_dir():
        return []
    found = []
    for p in sorted(root.iterdir()):
        if p.is_dir() and p.name.startswith(".") and p.name.endswith(".partial"):
            found.append(Partial(p, p.name[1:-len(".partial")], _alive(p)))
    return found


def remove_stale(root: Path) -> list[Partial]:
    """Delete the unfinished folders whose start is no longer running; returns them."""
    removed = []
    for partial in list_partials(root):
        if not partial.alive:
            shutil.rmtree(partial.path, ignore_errors=True)
            removed.append(partial)
    return removed

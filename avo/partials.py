"""Unfinished runs: the hidden ``.NAME.partial`` folders a failed or interrupted start leaves.

``avo start`` builds a run in ``.RUN-ID.partial`` and renames it when v0 is committed, so a
half-made run is never taken for a real one. A start that fails keeps its folder (the error
points at the log inside it); ``avo runs`` lists such folders, ``avo runs --clean`` and the
next ``avo start`` remove them. A folder whose start is still running is never touched.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

CREATOR_FILE = ".avo/creator.pid"


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

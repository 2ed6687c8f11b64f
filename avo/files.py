"""File helpers shared by the core and by target plugins (their seeds and knowledge bases)."""

from __future__ import annotations

import shutil
from pathlib import Path

_LEFT_OUT = ("__pycache__", ".git")


def copy_contents(src: Path, dest: Path) -> None:
    """Copy everything inside ``src`` into the existing folder ``dest`` (caches and .git left out)."""
    for item in sorted(src.iterdir()):
        if item.name in _LEFT_OUT:
            continue
        if item.is_dir():
            shutil.copytree(item, dest / item.name, ignore=shutil.ignore_patterns(*_LEFT_OUT))
        else:
            shutil.copy2(item, dest / item.name)

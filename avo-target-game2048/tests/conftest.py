"""Fixtures: stage a player file as a candidate directory, evaluate it in quick mode."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from avo_target_game2048 import SEED_DIR
from avo_target_game2048.harness import Settings, evaluate_dir

from avo.models import EvalOptions, EvalResult

PLAYERS = Path(__file__).parent / "players"


def stage(dest: Path, player: str | Path) -> Path:
    """A candidate dir: ``player`` as agent.py, the seed next to it as seed_agent.py."""
    dest.mkdir(parents=True, exist_ok=True)
    source = player if isinstance(player, Path) else PLAYERS / f"{player}.py"
    shutil.copy2(source, dest / "agent.py")
    shutil.copy2(SEED_DIR / "agent.py", dest / "seed_agent.py")
    return dest


def quick_eval(workdir: Path, **extra: object) -> EvalResult:
    """Evaluate ``workdir`` in quick mode (bank1, two games) with optional overrides."""
    return evaluate_dir(workdir, Settings.from_options(EvalOptions(quick=True, **extra)))


@pytest.fixture
def seed_dir(tmp_path: Path) -> Path:
    """The shipped seed as a candidate directory."""
    dest = tmp_path / "seed"
    dest.mkdir()
    shutil.copy2(SEED_DIR / "agent.py", dest / "agent.py")
    return dest

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


def quick_eval(workdir: Path, log_dir: Path | None = None, **extra: object) -> EvalResult:
    """Evaluate ``workdir`` in quick mode (bank1, two games) with optional overrides.

    ``secret=...`` is the run's secret (None: the public seeds, as in conformance suites);
    ``log_dir`` keeps the player's stderr and the games log.
    """
    options = EvalOptions(quick=True, **extra)  # type: ignore[arg-type]
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
    return evaluate_dir(workdir, Settings.from_options(options, workdir), log_dir)


def player_stderr(log_dir: Path) -> str:
    """Everything the players evaluated with ``log_dir`` wrote to stderr."""
    return "".join(p.read_text(errors="replace") for p in sorted(log_dir.glob("player-stderr-*.log")))


def sandbox_processes_with(marker: str) -> list[int]:
    """Live processes on this machine whose command line contains ``marker``."""
    import os

    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


@pytest.fixture
def bwrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evaluate at the bubblewrap level (what a run gets on Linux); fails loudly where it cannot run."""
    from avo.sandbox import probe

    ok, why = probe()
    assert ok, f"these attack tests need the bubblewrap sandbox: {why}"
    monkeypatch.setenv("AVO_SANDBOX", "bwrap")


@pytest.fixture
def no_sandbox(monkeypatch: pytest.MonkeyPatch) -> None:
    """Evaluate at level none: the controls that show an attack is real without the sandbox."""
    monkeypatch.setenv("AVO_SANDBOX", "none")


@pytest.fixture
def seed_dir(tmp_path: Path) -> Path:
    """The shipped seed as a candidate directory."""
    dest = tmp_path / "seed"
    dest.mkdir()
    shutil.copy2(SEED_DIR / "agent.py", dest / "agent.py")
    return dest

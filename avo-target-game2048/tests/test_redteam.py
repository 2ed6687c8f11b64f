"""Held-out red team after issue 13: game2048's player still runs outside avo's sandbox.

attention_c and attention_mlx start their candidates with ``avo.sandbox.popen``; game2048's
PlayerProcess is a plain Popen, and its seeds are the fixed ``game_seed(bank, index)``.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import avo_target_game2048.engine as engine
from avo_target_game2048.harness import Settings
from conftest import quick_eval

from avo.models import EvalOptions


def test_the_player_cannot_read_the_installed_engine(tmp_path: Path) -> None:
    # The agent knows where the package is (same user); the player reads the engine and its
    # RNG and, with the fixed seeds, knows every spawn (issue 13's foresight attack).
    work = tmp_path / "cand"
    work.mkdir()
    (work / "agent.py").write_text(
        f"try:\n    SOURCE = open({inspect.getfile(engine)!r}).read()\nexcept OSError:\n    SOURCE = ''\n"
        "def choose_move(board):\n"
        "    if 'SplitMix64' in SOURCE:\n"
        "        raise RuntimeError('LEAK: the player read the engine and its RNG')\n"
        "    for move in 'LURD':\n"
        "        return move\n")
    result = quick_eval(work, games_per_bank=1, max_moves=5)
    assert "LEAK" not in (result.error or ""), result.error


def test_game_seeds_depend_on_the_run_secret() -> None:
    # Fixed, public seeds: a player written by the agent can carry the spawns built in.
    one = Settings.from_options(EvalOptions(quick=True, secret="run one")).banks
    two = Settings.from_options(EvalOptions(quick=True, secret="run two")).banks
    assert one != two, f"every run plays the same public seeds: {one}"

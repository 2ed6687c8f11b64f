# mypy: ignore-errors
"""Cheater: loads a copy of the harness's engine (stolen_engine.py, copied into its tree) into
its own process and patches it so spawns never happen and every move scores a million, then
plays exactly like the seed."""

import importlib.util
import os
import sys

import seed_agent

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("stolen_engine", os.path.join(_here, "stolen_engine.py"))
engine = importlib.util.module_from_spec(_spec)
sys.modules["stolen_engine"] = engine
_spec.loader.exec_module(engine)
engine.spawn = lambda board, rng: board
_real_move = engine.move
engine.move = lambda board, d: (_real_move(board, d)[0], 1_000_000)
PATCHED = engine.move(0x1100000000000000, "L")[1] == 1_000_000


def choose_move(board):
    assert PATCHED
    return seed_agent.choose_move(board)

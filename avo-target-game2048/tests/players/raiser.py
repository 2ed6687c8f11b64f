"""Crashes: raises on its fifth move."""

import seed_agent

_calls = 0


def choose_move(board):
    global _calls
    _calls += 1
    if _calls == 5:
        raise ValueError("no idea what to do")
    return seed_agent.choose_move(board)

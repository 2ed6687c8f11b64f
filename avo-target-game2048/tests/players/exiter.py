"""Dies: the process exits with status 3 on its third move."""

import os

import seed_agent

_calls = 0


def choose_move(board):
    global _calls
    _calls += 1
    if _calls == 3:
        os._exit(3)
    return seed_agent.choose_move(board)

"""Cheater: thinks for free by sleeping (no CPU time) on its third move."""

import time

import seed_agent

_calls = 0


def choose_move(board):
    global _calls
    _calls += 1
    if _calls == 3:
        time.sleep(3600)
    return seed_agent.choose_move(board)

"""Over budget: spins in a pure-Python loop inside one move until it is stopped."""

import seed_agent

_calls = 0


def choose_move(board):
    global _calls
    _calls += 1
    if _calls == 2:
        x = 0
        while True:
            x += 1
    return seed_agent.choose_move(board)

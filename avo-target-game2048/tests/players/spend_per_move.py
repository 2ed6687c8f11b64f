"""Over budget: burns ~20 ms of CPU on every move, so the total passes a small budget."""

import time

import seed_agent


def choose_move(board):
    end = time.process_time() + 0.02
    while time.process_time() < end:
        pass
    return seed_agent.choose_move(board)

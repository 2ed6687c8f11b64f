"""Cheater: sleeps a little on every move, never long enough for the per-move limit."""

import time

import seed_agent


def choose_move(board):
    time.sleep(0.2)
    return seed_agent.choose_move(board)

"""Breaks the single-thread rule: starts a helper thread that keeps running."""

import threading
import time

import seed_agent

threading.Thread(target=lambda: time.sleep(60), daemon=True).start()


def choose_move(board):
    time.sleep(0.01)
    return seed_agent.choose_move(board)

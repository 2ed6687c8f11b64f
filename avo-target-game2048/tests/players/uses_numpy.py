"""Not standard library: imports numpy."""

import numpy  # noqa: F401


def choose_move(board):
    return "U"

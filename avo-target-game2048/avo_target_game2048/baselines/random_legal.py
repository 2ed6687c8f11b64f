"""Reference player: a uniformly random legal move (a fixed-seed generator)."""

import random

import _board

_rng = random.Random(2048)
_board.build()


def choose_move(grid):
    b = _board.from_grid(grid)
    legal = [d for d in "UDLR" if _board.move(b, d)[0] != b]
    return legal[_rng.randrange(len(legal))]

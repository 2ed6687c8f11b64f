"""Reference player: one ply, the move whose board looks best to the row heuristic
(empty cells, monotone rows and columns, mergeable neighbours: keeps big tiles in a corner)."""

import _board

_board.build()


def choose_move(grid):
    b = _board.from_grid(grid)
    best, best_v = None, None
    for d in "DLRU":
        n, _ = _board.move(b, d)
        if n != b:
            v = _board.heuristic(n)
            if best_v is None or v > best_v:
                best, best_v = d, v
    return best

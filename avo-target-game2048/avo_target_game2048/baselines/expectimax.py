"""Reference player: shallow expectimax. A move is scored by the expected value over every
tile spawn (2 with p 0.9, 4 with p 0.1, on each empty cell); on crowded boards (at most
four empty cells) each spawn is followed by the best next move before the heuristic."""

import _board

_board.build()
_heur = _board.heuristic
_move = _board.move


def _best_next(b):
    best = 0.0
    for d in "DLRU":
        n, _ = _move(b, d)
        if n != b:
            v = _heur(n)
            if v > best:
                best = v
    return best


def _expect(b):
    shifts = _board.empty_shifts(b)
    if not shifts:
        return _heur(b)
    leaf = _best_next if len(shifts) <= 4 else _heur
    total = 0.0
    for s in shifts:
        total += 0.9 * leaf(b | (1 << s)) + 0.1 * leaf(b | (2 << s))
    return total / len(shifts)


def choose_move(grid):
    b = _board.from_grid(grid)
    best, best_v = None, None
    for d in "DLRU":
        n, _ = _move(b, d)
        if n != b:
            v = _expect(n)
            if best_v is None or v > best_v:
                best, best_v = d, v
    return best

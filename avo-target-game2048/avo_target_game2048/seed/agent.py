"""x_0 of the game2048 target: a weak but legal 2048 player. Evolve it.

Interface (the whole contract with the harness):

    choose_move(board) -> "U" | "D" | "L" | "R"

``board`` is a list of 4 rows, each a list of 4 ints: the tile values (0 = empty, 2, 4,
8, ...), row 0 at the top, column 0 at the left. Return the move to make; it must change
the board (a move that changes nothing fails the evaluation, as does any other reply, an
exception or an exit). "U" slides every tile towards row 0, "L" towards column 0.

How it runs: a separate process (standard library only, one thread) imports this file
from its own directory and calls ``choose_move`` once per move, for all games of the
evaluation in a row, so module-level state (tables, caches) lives across moves and games.
Anything you print goes to a log, not to the harness. The harness owns the engine and the
random tile spawns (2 with probability 0.9, else 4); you only see the board.

Score: the sum of the values of all tiles merged during a game (merging two 64s scores
128), averaged over 12 fixed games per bank, geometric mean over 4 banks.
Budget: 120 s of this process's CPU time for the whole evaluation (48 games), measured by
the harness; past it the score is zero. Time spent in this file is the budget.

This seed looks one move ahead and scores each legal move with three weighted terms. The
weights below are a poor first guess (the empty-cell weight is negative, so it crowds its
own board); the structure (one ply, three terms) is as weak as the weights.
"""

# The evaluation of a move, one ply ahead. The only numeric literals in this file are these
# weights, so a classical hill climber (`avo evolve --backend classic`) tunes exactly them.
POINTS_WEIGHT = 0.1  # the points the move's merges score
EMPTY_WEIGHT = -1.0  # empty cells after the move (negative: it fills its own board)
CORNER_WEIGHT = 0.1  # the largest tile sitting in the top-left corner

EMPTY = int()  # noqa: UP018 - 0, spelled without a literal for the reason above


def slide_row_left(row):
    """Slide one row of tile values towards index 0, merging equal neighbours once.

    Returns the new row and the points the merges score.
    """
    tiles = [v for v in row if v]
    out, points, i = [], EMPTY, EMPTY
    while i < len(tiles):
        if i + True < len(tiles) and tiles[i] == tiles[i + True]:
            out.append(tiles[i] + tiles[i])
            points += tiles[i] + tiles[i]
            i += True + True
        else:
            out.append(tiles[i])
            i += True
    return out + [EMPTY] * (len(row) - len(out)), points


def transpose(board):
    return [list(col) for col in zip(*board, strict=True)]


def apply_move(board, move):
    """The board after ``move`` (no new tile) and the points it scores."""
    rows = board if move in ("L", "R") else transpose(board)
    if move in ("R", "D"):
        rows = [list(reversed(r)) for r in rows]
    slid, points = [], EMPTY
    for r in rows:
        new, p = slide_row_left(r)
        slid.append(new)
        points += p
    if move in ("R", "D"):
        slid = [list(reversed(r)) for r in slid]
    return (slid if move in ("L", "R") else transpose(slid)), points


def evaluate(after, points):
    """The weighted one-ply value of the board ``after`` a move that scored ``points``."""
    empty = sum(row.count(EMPTY) for row in after)
    corner = after[EMPTY][EMPTY] == max(max(row) for row in after)
    return POINTS_WEIGHT * points + EMPTY_WEIGHT * empty + CORNER_WEIGHT * corner


def choose_move(board):
    """The legal move with the highest one-ply value (ties: the first in U, D, L, R)."""
    best, best_value = None, None
    for move in "UDLR":
        after, points = apply_move(board, move)
        if after == board:
            continue
        value = evaluate(after, points)
        if best_value is None or value > best_value:
            best, best_value = move, value
    return best

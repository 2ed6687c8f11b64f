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

This seed picks a random legal move (a fixed-seed generator, so evaluations repeat).
"""

_state = 0x2545F4914F6CDD1D


def _next_random() -> int:
    """xorshift64: a tiny deterministic generator (the same sequence on every run)."""
    global _state
    x = _state
    x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
    x ^= x >> 7
    x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
    _state = x
    return x


def slide_row_left(row):
    """Slide one row of 4 tile values towards index 0, merging equal neighbours once.

    Returns the new row and the points the merges score.
    """
    tiles = [v for v in row if v]
    out, points, i = [], 0, 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1]:
            out.append(2 * tiles[i])
            points += 2 * tiles[i]
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (4 - len(out)), points


def apply_move(board, move):
    """The board after ``move`` (no new tile) and the points it scores."""
    if move in ("L", "R"):
        rows = [r if move == "L" else r[::-1] for r in board]
    else:
        cols = [[board[r][c] for r in range(4)] for c in range(4)]
        rows = [c if move == "U" else c[::-1] for c in cols]
    slid, points = [], 0
    for r in rows:
        new, p = slide_row_left(r)
        slid.append(new)
        points += p
    if move == "R" or move == "D":
        slid = [r[::-1] for r in slid]
    if move in ("U", "D"):
        slid = [[slid[c][r] for c in range(4)] for r in range(4)]
    return slid, points


def legal_moves(board):
    """The moves that change the board."""
    return [m for m in "UDLR" if apply_move(board, m)[0] != board]


def choose_move(board):
    """Pick a legal move at random."""
    moves = legal_moves(board)
    return moves[_next_random() % len(moves)]

"""The 2048 engine: a 64-bit bitboard, precomputed row tables and a portable PRNG.

Lives only in the harness process; the player never imports it.

Layout: cell ``i`` (row-major, row 0 at the top, column 0 at the left) holds the exponent
of its tile (0 = empty, 1 = 2, 2 = 4, ..., 15 = 32768) in the nibble at bit ``4 * (15 - i)``,
so ``format(board, "016x")`` spells the cells in reading order. A nibble caps exponents at
15: two 32768 tiles do not merge (unreachable under the budget, documented in the README).

Rules: a move slides every tile as far as it goes; two equal tiles that meet merge once per
move; the score grows by the value of every merged tile. A move that changes the board
spawns one tile on a uniformly chosen empty cell: 2 with probability 0.9, else 4. The game
ends when no move changes the board.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

MASK64 = (1 << 64) - 1
MOVES = ("U", "D", "L", "R")
MAX_EXPONENT = 15


class SplitMix64:
    """splitmix64 in pure Python: the same stream on every machine and Python version."""

    __slots__ = ("state",)

    def __init__(self, seed: int) -> None:
        self.state = seed & MASK64

    def next(self) -> int:
        """The next 64-bit output."""
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)


def slide_left(cells: Sequence[int]) -> tuple[list[int], int]:
    """Slide one line of exponents towards index 0; return the new line and the points."""
    tiles = [c for c in cells if c]
    out: list[int] = []
    points = 0
    i = 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1] and tiles[i] < MAX_EXPONENT:
            out.append(tiles[i] + 1)
            points += 1 << (tiles[i] + 1)
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (len(cells) - len(out)), points


def _row_cells(row: int) -> list[int]:
    return [(row >> 12) & 15, (row >> 8) & 15, (row >> 4) & 15, row & 15]


def _row_pack(cells: Sequence[int]) -> int:
    return (cells[0] << 12) | (cells[1] << 8) | (cells[2] << 4) | cells[3]


def _build_tables() -> tuple[list[int], list[int], list[int], list[int]]:
    # 65536 rows, each slid once: ~0.2 s, paid once per harness process.
    left = [0] * 65536
    left_points = [0] * 65536
    for row in range(65536):
        cells, points = slide_left(_row_cells(row))
        left[row] = _row_pack(cells)
        left_points[row] = points
    rev = [_row_pack(_row_cells(r)[::-1]) for r in range(65536)]
    right = [rev[left[rev[r]]] for r in range(65536)]
    right_points = [left_points[rev[r]] for r in range(65536)]
    return left, right, left_points, right_points


_LEFT, _RIGHT, _LEFT_POINTS, _RIGHT_POINTS = _build_tables()


def transpose(x: int) -> int:
    """Swap rows and columns of a board (a 4x4 nibble matrix)."""
    a1 = x & 0xF0F00F0FF0F00F0F
    a2 = x & 0x0000F0F00000F0F0
    a3 = x & 0x0F0F00000F0F0000
    a = a1 | (a2 << 12) | (a3 >> 12)
    b1 = a & 0xFF00FF0000FF00FF
    b2 = a & 0x00FF00FF00000000
    b3 = a & 0x00000000FF00FF00
    return b1 | (b2 >> 24) | (b3 << 24)


def _rows_move(board: int, table: list[int], points: list[int]) -> tuple[int, int]:
    r0 = (board >> 48) & 0xFFFF
    r1 = (board >> 32) & 0xFFFF
    r2 = (board >> 16) & 0xFFFF
    r3 = board & 0xFFFF
    new = (table[r0] << 48) | (table[r1] << 32) | (table[r2] << 16) | table[r3]
    return new, points[r0] + points[r1] + points[r2] + points[r3]


def move(board: int, direction: str) -> tuple[int, int]:
    """Apply a move (``U``, ``D``, ``L`` or ``R``): ``(new board, points scored)``, no spawn."""
    if direction == "L":
        return _rows_move(board, _LEFT, _LEFT_POINTS)
    if direction == "R":
        return _rows_move(board, _RIGHT, _RIGHT_POINTS)
    if direction == "U":
        new, pts = _rows_move(transpose(board), _LEFT, _LEFT_POINTS)
        return transpose(new), pts
    if direction == "D":
        new, pts = _rows_move(transpose(board), _RIGHT, _RIGHT_POINTS)
        return transpose(new), pts
    raise ValueError(f"unknown move {direction!r}; expected one of U, D, L, R")


def successors(board: int) -> dict[str, tuple[int, int]]:
    """Every move that changes the board: ``{move: (new board, points)}``, one transpose."""
    out: dict[str, tuple[int, int]] = {}
    t = transpose(board)
    for name, table, points in (("U", _LEFT, _LEFT_POINTS), ("D", _RIGHT, _RIGHT_POINTS)):
        new, pts = _rows_move(t, table, points)
        if new != t:
            out[name] = (transpose(new), pts)
    for name, table, points in (("L", _LEFT, _LEFT_POINTS), ("R", _RIGHT, _RIGHT_POINTS)):
        new, pts = _rows_move(board, table, points)
        if new != board:
            out[name] = (new, pts)
    return out


def legal_moves(board: int) -> list[str]:
    """The moves that change the board, in ``U, D, L, R`` order."""
    return [d for d in MOVES if move(board, d)[0] != board]


def empty_cells(board: int) -> list[int]:
    """Indices (row-major) of the empty cells."""
    return [i for i in range(16) if not (board >> (4 * (15 - i))) & 15]


def spawn(board: int, rng: SplitMix64) -> int:
    """Put a 2 (p = 0.9) or a 4 on a uniformly chosen empty cell.

    Two draws per spawn: the first picks the cell (``draw % empties``), the second the
    value (``draw % 10 == 0`` means a 4).
    """
    empties = empty_cells(board)
    if not empties:
        return board
    cell = empties[rng.next() % len(empties)]
    exponent = 2 if rng.next() % 10 == 0 else 1
    return board | (exponent << (4 * (15 - cell)))


def to_grid(board: int) -> list[list[int]]:
    """The board as 4 rows of 4 tile values (0 = empty)."""
    cells = [(board >> (4 * (15 - i))) & 15 for i in range(16)]
    return [[(1 << e) if e else 0 for e in cells[r * 4:r * 4 + 4]] for r in range(4)]


def from_exponents(cells: Sequence[int]) -> int:
    """A board from 16 exponents in reading order."""
    if len(cells) != 16 or any(not 0 <= c <= MAX_EXPONENT for c in cells):
        raise ValueError("a board is 16 exponents between 0 and 15")
    board = 0
    for c in cells:
        board = (board << 4) | c
    return board


def max_tile(board: int) -> int:
    """The value of the largest tile."""
    top = max((board >> (4 * i)) & 15 for i in range(16))
    return 1 << top if top else 0


@dataclass
class Game:
    """One game from a seed: the board, the score, the number of moves made."""

    seed: int
    board: int = 0
    score: int = 0
    moves: int = 0
    rng: SplitMix64 = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = SplitMix64(self.seed)
        self.board = spawn(spawn(0, self.rng), self.rng)

    def over(self) -> bool:
        """True when no move changes the board."""
        return not legal_moves(self.board)

    def play(self, direction: str) -> bool:
        """Make a move; ``False`` (and nothing changes) when it would not change the board."""
        new, points = move(self.board, direction)
        if new == self.board:
            return False
        self.board = spawn(new, self.rng)
        self.score += points
        self.moves += 1
        return True

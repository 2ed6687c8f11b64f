"""Board helpers shared by the reference players (copied next to each one as _board.py).

Player-side code, standard library only: a 64-bit board with one nibble per cell (cell i in
reading order at bit 4 * (15 - i)), row tables for the four moves, and a row-table
heuristic (empty cells, monotonicity, mergeable neighbours, tile mass).
"""

_rows_built = False
LEFT: list = []
RIGHT: list = []
LEFT_PTS: list = []
RIGHT_PTS: list = []
HEUR: list = []


def _slide(cells):
    tiles = [c for c in cells if c]
    out, pts, i = [], 0, 0
    while i < len(tiles):
        if i + 1 < len(tiles) and tiles[i] == tiles[i + 1] and tiles[i] < 15:
            out.append(tiles[i] + 1)
            pts += 1 << (tiles[i] + 1)
            i += 2
        else:
            out.append(tiles[i])
            i += 1
    return out + [0] * (4 - len(out)), pts


def _row_heuristic(c):
    empty = c.count(0)
    merges, prev, run = 0, 0, 0
    for v in c:
        if v == 0:
            continue
        if v == prev:
            run += 1
        elif run:
            merges += 1 + run
            run = 0
        prev = v
    if run:
        merges += 1 + run
    left = right = 0.0
    for i in range(3):
        a, b = c[i] ** 4, c[i + 1] ** 4
        if c[i] > c[i + 1]:
            left += a - b
        else:
            right += b - a
    mass = sum(v ** 3.5 for v in c)
    return 200000.0 + 270.0 * empty + 700.0 * merges - 47.0 * min(left, right) - 11.0 * mass


def build():
    """Build the row tables once (about a second of the player's budget)."""
    global _rows_built, LEFT, RIGHT, LEFT_PTS, RIGHT_PTS, HEUR
    if _rows_built:
        return
    cells = [[(r >> 12) & 15, (r >> 8) & 15, (r >> 4) & 15, r & 15] for r in range(65536)]
    LEFT, LEFT_PTS = [0] * 65536, [0] * 65536
    for r in range(65536):
        new, pts = _slide(cells[r])
        LEFT[r] = (new[0] << 12) | (new[1] << 8) | (new[2] << 4) | new[3]
        LEFT_PTS[r] = pts
    rev = [(c[3] << 12) | (c[2] << 8) | (c[1] << 4) | c[0] for c in cells]
    RIGHT = [rev[LEFT[rev[r]]] for r in range(65536)]
    RIGHT_PTS = [LEFT_PTS[rev[r]] for r in range(65536)]
    HEUR = [_row_heuristic(c) for c in cells]
    _rows_built = True


def from_grid(grid):
    """The 64-bit board of a grid of tile values."""
    b = 0
    for row in grid:
        for v in row:
            b = (b << 4) | (v.bit_length() - 1 if v else 0)
    return b


def transpose(x):
    a1 = x & 0xF0F00F0FF0F00F0F
    a2 = x & 0x0000F0F00000F0F0
    a3 = x & 0x0F0F00000F0F0000
    a = a1 | (a2 << 12) | (a3 >> 12)
    b1 = a & 0xFF00FF0000FF00FF
    b2 = a & 0x00FF00FF00000000
    b3 = a & 0x00000000FF00FF00
    return b1 | (b2 >> 24) | (b3 << 24)


def _rows(b, t, p):
    r0, r1, r2, r3 = (b >> 48) & 0xFFFF, (b >> 32) & 0xFFFF, (b >> 16) & 0xFFFF, b & 0xFFFF
    return (t[r0] << 48) | (t[r1] << 32) | (t[r2] << 16) | t[r3], p[r0] + p[r1] + p[r2] + p[r3]


def move(b, d):
    """(board after move d without a spawn, points scored)."""
    if d == "L":
        return _rows(b, LEFT, LEFT_PTS)
    if d == "R":
        return _rows(b, RIGHT, RIGHT_PTS)
    n, p = _rows(transpose(b), LEFT if d == "U" else RIGHT, LEFT_PTS if d == "U" else RIGHT_PTS)
    return transpose(n), p


def heuristic(b):
    """Row-table heuristic over rows and columns (higher is better)."""
    h = HEUR
    t = transpose(b)
    return (h[(b >> 48) & 0xFFFF] + h[(b >> 32) & 0xFFFF] + h[(b >> 16) & 0xFFFF] + h[b & 0xFFFF]
            + h[(t >> 48) & 0xFFFF] + h[(t >> 32) & 0xFFFF] + h[(t >> 16) & 0xFFFF] + h[t & 0xFFFF])


def empty_shifts(b):
    """Bit shifts of the empty cells."""
    return [s for s in range(0, 64, 4) if not (b >> s) & 15]

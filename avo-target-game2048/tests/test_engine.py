"""The engine against a naive list-of-lists reference, over random boards."""

from __future__ import annotations

import random

from avo_target_game2048.engine import (
    MOVES,
    Game,
    SplitMix64,
    empty_cells,
    from_exponents,
    legal_moves,
    move,
    spawn,
    successors,
    to_grid,
    transpose,
)


def naive_move(grid: list[list[int]], d: str) -> tuple[list[list[int]], int]:
    """Slide a grid of exponents the obvious way: take each line in travel order."""
    lines: list[list[tuple[int, int]]] = []
    for k in range(4):
        if d == "L":
            lines.append([(k, c) for c in range(4)])
        elif d == "R":
            lines.append([(k, c) for c in range(3, -1, -1)])
        elif d == "U":
            lines.append([(r, k) for r in range(4)])
        else:
            lines.append([(r, k) for r in range(3, -1, -1)])
    out = [[0] * 4 for _ in range(4)]
    points = 0
    for cells in lines:
        values = [grid[r][c] for r, c in cells if grid[r][c]]
        merged: list[int] = []
        while values:
            if len(values) > 1 and values[0] == values[1] and values[0] < 15:
                merged.append(values[0] + 1)
                points += 2 ** (values[0] + 1)
                values = values[2:]
            else:
                merged.append(values[0])
                values = values[1:]
        for (r, c), v in zip(cells, merged + [0] * 4, strict=False):
            out[r][c] = v
    return out, points


def random_board(rng: random.Random) -> list[list[int]]:
    fill = rng.random()
    top = rng.randint(1, 15)
    return [[rng.randint(1, top) if rng.random() < fill else 0 for _ in range(4)] for _ in range(4)]


def to_board(grid: list[list[int]]) -> int:
    return from_exponents([v for row in grid for v in row])


def exps(board: int) -> list[list[int]]:
    return [[(board >> (4 * (15 - (r * 4 + c)))) & 15 for c in range(4)] for r in range(4)]


def test_moves_and_points_match_the_naive_reference_on_random_boards() -> None:
    rng = random.Random(7)
    for _ in range(3000):
        grid = random_board(rng)
        board = to_board(grid)
        for d in MOVES:
            new, points = move(board, d)
            want, want_points = naive_move(grid, d)
            assert exps(new) == want, (grid, d)
            assert points == want_points, (grid, d)


def test_known_merges() -> None:
    # 2 2 4 4 -> 4 8 . . scoring 12; 2 2 2 2 -> 4 4 . . scoring 8; 4 . . 4 -> 8 scoring 8.
    board = from_exponents([1, 1, 2, 2, 1, 1, 1, 1, 2, 0, 0, 2, 0, 0, 0, 0])
    new, points = move(board, "L")
    assert exps(new)[:3] == [[2, 3, 0, 0], [2, 2, 0, 0], [3, 0, 0, 0]]
    assert points == 12 + 8 + 8
    new, points = move(board, "R")
    assert exps(new)[0] == [0, 0, 2, 3] and exps(new)[1] == [0, 0, 2, 2]


def test_two_32768_tiles_do_not_merge_past_the_nibble() -> None:
    board = from_exponents([15, 15] + [0] * 14)
    assert move(board, "L") == (board, 0)


def test_transpose_swaps_rows_and_columns() -> None:
    rng = random.Random(3)
    for _ in range(200):
        grid = random_board(rng)
        assert exps(transpose(to_board(grid))) == [list(col) for col in zip(*grid, strict=True)]


def test_game_over_means_no_move_changes_the_board() -> None:
    rng = random.Random(11)
    for _ in range(2000):
        grid = random_board(rng)
        board = to_board(grid)
        naive_legal = [d for d in MOVES if naive_move(grid, d)[0] != grid]
        assert legal_moves(board) == naive_legal
        assert successors(board) == {d: move(board, d) for d in naive_legal}
    stuck = from_exponents([1, 2, 1, 2, 2, 1, 2, 1, 1, 2, 1, 2, 2, 1, 2, 1])
    assert legal_moves(stuck) == []


def test_splitmix64_matches_the_published_reference_stream() -> None:
    rng = SplitMix64(0)
    assert [rng.next() for _ in range(3)] == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


def test_spawn_is_uniform_over_empty_cells_and_four_one_time_in_ten() -> None:
    rng = SplitMix64(12345)
    board = from_exponents([3, 0, 3, 0, 0, 3, 0, 3, 3, 0, 3, 0, 0, 3, 0, 3])
    empties = empty_cells(board)
    counts = dict.fromkeys(empties, 0)
    fours = 0
    n = 40000
    for _ in range(n):
        diff = spawn(board, rng) ^ board  # exactly one nibble changes: the new tile
        shift = (diff.bit_length() - 1) // 4 * 4
        assert diff == ((diff >> shift) & 15) << shift
        cell = 15 - shift // 4
        counts[cell] += 1
        fours += (diff >> shift) == 2
    expected = n / len(empties)
    # ~4.5 standard deviations: a biased or broken spawn fails, a fair one never does here.
    assert all(abs(c - expected) < 4.5 * (expected * (1 - 1 / len(empties))) ** 0.5 for c in counts.values())
    assert abs(fours / n - 0.1) < 4.5 * (0.09 / n) ** 0.5


def test_a_game_is_a_pure_function_of_its_seed_and_moves() -> None:
    def replay(seed: int) -> list[int]:
        game = Game(seed)
        boards = [game.board]
        order = "LURD"
        i = 0
        while not game.over():
            while not game.play(order[i % 4]):
                i += 1
            i += 1
            boards.append(game.board)
        return boards + [game.score]

    assert replay(99) == replay(99)
    assert replay(99) != replay(100)
    start = Game(0x20481001)
    assert sum(1 for row in to_grid(start.board) for v in row if v) == 2


def test_illegal_move_leaves_the_game_unchanged() -> None:
    game = Game(5)
    game.board = from_exponents([1] + [0] * 15)
    assert game.play("U") is False and game.play("L") is False
    assert game.moves == 0 and game.score == 0

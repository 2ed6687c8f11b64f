# mypy: ignore-errors
"""Hostile: foresight. The agent copied the harness's engine into its tree (stolen_engine.py,
read from the package during its step) and built the public seed formula in. At the first
board of every game it looks for a seed whose game starts with that board; on a hit it
replays the harness's random number generator, sees every spawn coming and plays a 3-move
search over the exact future. It reports on stderr how many spawns it predicted."""

import atexit
import sys

import seed_agent
import stolen_engine as E

GUESSES = {}
for _bank in range(1, 5):
    for _i in range(12):
        _seed = 0x20480000 + 1000 * _bank + _i
        GUESSES.setdefault(E.Game(_seed).board, _seed)
STATS = {"games": 0, "recognised": 0, "predicted": 0, "missed": 0}
_now = {"rng": None, "expected": None}


def _bits(board):
    out = 0
    for row in board:
        for value in row:
            out = (out << 4) | (value.bit_length() - 1 if value else 0)
    return out


def _copy(rng):
    twin = E.SplitMix64(0)
    twin.state = rng.state
    return twin


def _future(board, rng, depth):
    """Best points reachable in ``depth`` moves when every spawn is known."""
    if depth == 0:
        return 0
    best = -1
    for new, points in E.successors(board).values():
        twin = _copy(rng)
        best = max(best, points + _future(E.spawn(new, twin), twin, depth - 1))
    return best if best >= 0 else -100000


def _report():
    print(f"foresight: {STATS['recognised']} of {STATS['games']} games recognised, "
          f"predicted {STATS['predicted']} spawns, missed {STATS['missed']}", file=sys.stderr, flush=True)


atexit.register(_report)


def choose_move(board):
    b = _bits(board)
    if sum(1 for row in board for v in row if v) == 2 and b != _now["expected"]:
        STATS["games"] += 1  # a fresh board: a new game
        _now["rng"] = None
        if b in GUESSES:
            STATS["recognised"] += 1
            _now["rng"] = E.Game(GUESSES[b]).rng
        _report()
    elif _now["rng"] is not None:
        if b == _now["expected"]:
            STATS["predicted"] += 1
        else:
            STATS["missed"] += 1
            _now["rng"] = None
    rng = _now["rng"]
    if rng is None:
        _now["expected"] = None
        return seed_agent.choose_move(board)
    options = E.successors(b)
    best_move, best_value = None, -1
    for move, (new, points) in options.items():
        twin = _copy(rng)
        value = points + _future(E.spawn(new, twin), twin, 2)
        if value > best_value:
            best_move, best_value = move, value
    _now["expected"] = E.spawn(options[best_move][0], rng)
    return best_move

"""Local screening: play an agent.py at a fixed search level on fixed seeds (own seeds,
not the evaluator's), through the target's engine. Reports score, tiles, moves, agent CPU.

    python bench.py AGENT.py LEVEL FIRST_SEED GAMES [MAX_MOVES]
LEVEL < 0: keep the agent's own clock pacing (backstops disabled).
"""
import importlib.util
import sys
import time

sys.path.insert(0, "/work/wt/g2048r4/avo-target-game2048")
from avo_target_game2048 import engine  # noqa: E402


def load(path):
    spec = importlib.util.spec_from_file_location("agent_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main():
    path, level, first, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    max_moves = int(sys.argv[5]) if len(sys.argv) > 5 else 100000
    mod = load(path)
    if hasattr(mod, "SOFT_S"):
        mod.SOFT_S = mod.LAST_S = 1e9
    import os
    if os.environ.get("LV"):
        mod.LEVELS = (tuple(int(x) for x in os.environ["LV"].split(",")),)
        level = 0
    if level >= 0:
        mod._level = lambda cpu, L=level: L
    scores, tiles, cpu_all, moves_all = [], [], 0.0, 0
    for g in range(n):
        game = engine.Game(seed=0x5EED0000 + first + g)
        cpu = 0.0
        while game.moves < max_moves and not game.over():
            grid = engine.to_grid(game.board)
            t = time.process_time()
            m = mod.choose_move(grid)
            cpu += time.process_time() - t
            if not game.play(m):
                raise SystemExit(f"illegal {m} game {g} move {game.moves}")
        scores.append(game.score)
        tiles.append(engine.max_tile(game.board))
        cpu_all += cpu
        moves_all += game.moves
        print(f"game {first + g} score {game.score} tile {tiles[-1]} moves {game.moves} "
              f"cpu {cpu:.1f} ms/move {1000 * cpu / max(game.moves, 1):.3f}", flush=True)
    big = sum(t >= 8192 for t in tiles)
    print(f"SUMMARY {path} level {level} games {n} mean {sum(scores) / n:.0f} "
          f"8192+ {big} <=1024 {sum(t <= 1024 for t in tiles)} moves {moves_all} "
          f"cpu {cpu_all:.1f} ms/move {1000 * cpu_all / max(moves_all, 1):.3f}", flush=True)


if __name__ == "__main__":
    main()

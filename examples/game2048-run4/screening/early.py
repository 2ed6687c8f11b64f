import sys, importlib.util, time
sys.path.insert(0, "/work/wt/g2048r4/avo-target-game2048")
from avo_target_game2048 import engine
spec = importlib.util.spec_from_file_location("a", sys.argv[1]); mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
mod.SOFT_S = mod.LAST_S = 1e9
L = int(sys.argv[2]); mod._level = lambda cpu: L
n = [0]; f = mod._spawn_avg
def g(*a):
    n[0] += 1; return f(*a)
mod._spawn_avg = g
first, count, cap = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
deaths = 0; mv = 0; t = time.process_time()
for s in range(first, first + count):
    game = engine.Game(seed=0x5EED0000 + s); hist = []
    while game.moves < cap and not game.over():
        hist.append(game.board)
        game.play(mod.choose_move(engine.to_grid(game.board)))
    mv += game.moves
    if game.over():
        deaths += 1
        print("DEATH", s, "moves", game.moves, "tile", engine.max_tile(game.board), "score", game.score)
        for back in (30, 10):
            if len(hist) > back:
                print("  %d before:" % back, engine.to_grid(hist[-back]))
        print("  end:", engine.to_grid(game.board))
print("SUM", sys.argv[1], "level", L, "games", count, "deaths", deaths, "moves", mv, "leaf/move %.2f" % (n[0] / mv), "ms %.3f" % (1000 * (time.process_time() - t) / mv), flush=True)

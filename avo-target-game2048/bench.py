"""Benchmark of the game2048 target: ``python bench.py REPORT.md`` appends a markdown section.

Measures engine moves per second (harness side: legality, move, spawn), protocol round
trips per second (one request and one reply through the real runner), and the wall time
of full evaluations of the seed and of every baseline. Takes about a minute on 2 cores.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from avo_target_game2048 import BASELINES, SEED_DIR
from avo_target_game2048.baselines_run import stage
from avo_target_game2048.engine import Game, spawn, successors
from avo_target_game2048.harness import Settings, evaluate_dir
from avo_target_game2048.player import PlayerProcess

from avo.models import EvalOptions


def engine_moves_per_second(seconds: float = 3.0) -> float:
    """Moves per second of the harness loop: all four moves tried, one applied, a spawn."""
    n = 0
    seed = 1
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        game = Game(seed)
        board, rng, k = game.board, game.rng, 0
        while True:
            options = list(successors(board).values())
            if not options:
                break
            board = spawn(options[k % len(options)][0], rng)
            k += 1
            n += 1
        seed += 1
    return n / (time.perf_counter() - start)


def round_trips_per_second(count: int = 20000) -> float:
    """Request/reply pairs per second through the real runner with a trivial player."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "agent.py").write_text("def choose_move(board):\n    return 'L'\n")
        player = PlayerProcess(work, work / "stderr.log", cpu_budget_s=120)
        try:
            assert player.read_line(20) == "ready"
            start = time.perf_counter()
            for _ in range(count):
                player.send("1200000000000000 0")
                player.read_line(20)
            return count / (time.perf_counter() - start)
        finally:
            player.close()


def full_evaluation(workdir: Path, label: str) -> tuple[float, float, float, str]:
    """Wall seconds, player CPU seconds and geometric-mean score of a full evaluation."""
    start = time.perf_counter()
    result = evaluate_dir(workdir, Settings.from_options(EvalOptions()), label=label)
    wall = time.perf_counter() - start
    if not result.correct:
        return wall, 0.0, 0.0, f"FAILED: {result.error}"
    values = list(result.metrics.values())
    geo = 1.0
    for v in values:
        geo *= v ** (1 / len(values))
    notes = result.notes or ""
    cpu = float(notes.split("player CPU ")[1].split(" s")[0]) if "player CPU " in notes else 0.0
    return wall, cpu, geo, notes.split(". ")[0]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python bench.py REPORT.md", file=sys.stderr)
        return 2
    out = Path(argv[0])
    eng = engine_moves_per_second()
    rt = round_trips_per_second()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:  # never run a player inside the package itself
        shutil.copy2(SEED_DIR / "agent.py", Path(tmp) / "agent.py")
        wall, cpu, geo, what = full_evaluation(Path(tmp), "bench-seed")
    rows.append(("seed x_0 (agent.py)", wall, cpu, geo, what))
    for name in BASELINES:
        with tempfile.TemporaryDirectory() as tmp:
            wall, cpu, geo, what = full_evaluation(stage(name, Path(tmp)), f"bench-{name}")
        rows.append((f"baseline {name}", wall, cpu, geo, what))
    lines = [
        "## game2048 target",
        "",
        f"- engine (harness side: four moves tried, one applied, spawn): {eng:,.0f} moves/s",
        f"- protocol round trips through the runner (trivial player): {rt:,.0f} per second "
        f"({1e6 / rt:.0f} µs each)",
        "",
        "Full evaluations (4 banks x 12 games, 120 s player CPU budget):",
        "",
        "| player | score (geomean) | wall s | player CPU s | games |",
        "| --- | --- | --- | --- | --- |",
    ]
    lines += [f"| {name} | {geo:,.0f} | {wall:.1f} | {cpu:.1f} | {what} |" for name, wall, cpu, geo, what in rows]
    lines.append("")
    with open(out, "a") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

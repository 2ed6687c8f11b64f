"""Benchmark of the game2048 target: ``python bench.py REPORT.md`` appends a markdown section.

Measures engine moves per second (harness side: legality, move, spawn), protocol round
trips per second (one request and one reply through the real runner), the wall time of
full evaluations of the seed and of every baseline, and the sandbox's cost: the same
full evaluations without a sandbox and inside bubblewrap, interleaved, side by side with
their ratio. Takes a few minutes on 2 cores.

``python bench.py compare OLD REPORT.md`` puts the harness as it is side by side with an older
one (``OLD`` holds its ``avo_target_game2048`` package, e.g. from ``git archive REV
avo-target-game2048``): full evaluations of the seed and three baselines, each in its own
process, interleaved old/new, with the ratio of their wall times.

``python bench.py spread DIR N REPORT.md`` evaluates the candidate in ``DIR`` under ``N``
different run secrets (so ``N`` different sets of 48 games) and appends the spread of its
scalar: what per-candidate seeds do to the comparability of two versions.
"""

from __future__ import annotations

import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from avo_target_game2048 import BASELINES, SEED_DIR
from avo_target_game2048.baselines_run import stage
from avo_target_game2048.engine import Game, spawn, successors
from avo_target_game2048.harness import Settings, evaluate_dir, stage_scratch
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
        work = Path(tmp) / "work"
        work.mkdir()
        (work / "agent.py").write_text("def choose_move(board):\n    return 'L'\n")
        (Path(tmp) / "scratch").mkdir()
        player_dir, runner = stage_scratch(work, Path(tmp) / "scratch")  # as an evaluation runs it
        player = PlayerProcess(player_dir, Path(tmp) / "stderr.log", cpu_budget_s=120, runner=runner)
        try:
            assert player.read_line(20) == "ready"
            start = time.perf_counter()
            for _ in range(count):
                player.send("1200000000000000 0")
                player.read_line(20)
            return count / (time.perf_counter() - start)
        finally:
            player.close()


def full_evaluation(workdir: Path, label: str, options: EvalOptions | None = None,
                    log_dir: Path | None = None) -> tuple[float, float, float, str]:
    """Wall seconds, player CPU seconds and geometric-mean score of a full evaluation."""
    options = options or EvalOptions()
    start = time.perf_counter()
    result = evaluate_dir(workdir, Settings.from_options(options, workdir), log_dir, label=label)
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


def sandbox_overhead(players: list[tuple[str, Path]], repeats: int = 3) -> list[str]:
    """Full evaluations at sandbox level ``none`` and ``bwrap``, interleaved: rows with the ratio."""
    rows = []
    saved = os.environ.get("AVO_SANDBOX")
    try:
        full_evaluation(players[0][1], "bench-warm-up")  # the first evaluation pays one-off imports
        for name, workdir in players:
            walls: dict[str, list[float]] = {"none": [], "bwrap": []}
            cpus: dict[str, list[float]] = {"none": [], "bwrap": []}
            scores: dict[str, set[float]] = {"none": set(), "bwrap": set()}
            for _ in range(repeats):
                for level in ("none", "bwrap"):
                    os.environ["AVO_SANDBOX"] = level
                    wall, cpu, geo, _what = full_evaluation(workdir, f"bench-{level}")
                    walls[level].append(wall)
                    cpus[level].append(cpu)
                    scores[level].add(round(geo, 3))
            w0, w1 = statistics.median(walls["none"]), statistics.median(walls["bwrap"])
            same = "same" if scores["none"] == scores["bwrap"] and len(scores["none"]) == 1 else "DIFFER"
            rows.append(f"| {name} | {w0:.2f} | {w1:.2f} | {w1 / w0:.3f} | {statistics.median(cpus['none']):.1f} | "
                        f"{statistics.median(cpus['bwrap']):.1f} | {same} |")
    finally:
        if saved is None:
            os.environ.pop("AVO_SANDBOX", None)
        else:
            os.environ["AVO_SANDBOX"] = saved
    return [
        f"Sandbox cost (full evaluations, medians of {repeats}, interleaved none/bwrap):",
        "",
        "| player | wall s, no sandbox | wall s, bwrap | ratio | CPU s, none | CPU s, bwrap | scores |",
        "| --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]


_TIMED = """
import inspect, json, sys, time
from pathlib import Path
from avo.models import EvalOptions
from avo_target_game2048.harness import Settings, evaluate_dir
work = Path(sys.argv[1])
takes_dir = "workdir" in inspect.signature(Settings.from_options).parameters
settings = Settings.from_options(EvalOptions(), work) if takes_dir else Settings.from_options(EvalOptions())
start = time.perf_counter()
result = evaluate_dir(work, settings)
print(json.dumps({"wall": time.perf_counter() - start, "metrics": result.metrics, "error": result.error}))
"""


def _timed(package_root: Path, workdir: Path) -> tuple[float, dict[str, float]]:
    """Wall seconds and metrics of one full evaluation by the harness under ``package_root``."""
    import json
    import subprocess

    env = {**os.environ, "PYTHONPATH": str(package_root)}
    proc = subprocess.run([sys.executable, "-c", _TIMED, str(workdir)], env=env, capture_output=True, text=True,
                          check=True)
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    if data["error"]:
        raise RuntimeError(f"{workdir.name} failed under {package_root}: {data['error']}")
    return data["wall"], data["metrics"]


def compare(old_root: Path, players: list[tuple[str, Path]], repeats: int = 3) -> list[str]:
    """The harness here against the one under ``old_root``: interleaved full evaluations."""
    new_root = Path(__file__).resolve().parent
    rows = []
    for name, workdir in players:
        walls: dict[str, list[float]] = {"old": [], "new": []}
        same = True
        for _ in range(repeats):
            w_old, m_old = _timed(old_root, workdir)
            w_new, m_new = _timed(new_root, workdir)
            walls["old"].append(w_old)
            walls["new"].append(w_new)
            same = same and m_old == m_new
        a, b = statistics.median(walls["old"]), statistics.median(walls["new"])
        rows.append(f"| {name} | {a:.2f} | {b:.2f} | {b / a:.3f} | {'same' if same else 'DIFFER'} |")
    return [
        f"Harness here vs `{old_root.name}` (full evaluations without a run secret, medians of {repeats}, "
        "interleaved, each in its own process):",
        "",
        "| player | wall s, old | wall s, new | ratio | metrics |",
        "| --- | --- | --- | --- | --- |",
        *rows,
        "",
    ]


def game_scores(log_dir: Path) -> list[int]:
    """Per-game scores from the games logs the harness wrote into ``log_dir``."""
    out = []
    for path in sorted(log_dir.glob("games-*.log")):
        for line in path.read_text().splitlines():
            if ": score " in line:
                out.append(int(line.split(": score ")[1].split(",")[0]))
    return out


def spread(workdir: Path, count: int) -> list[str]:
    """The candidate's scalar under ``count`` run secrets (different games), and its spread."""
    scalars, cpus, games = [], [], []
    for i in range(count):
        with tempfile.TemporaryDirectory() as logs:
            wall, cpu, geo, what = full_evaluation(workdir, f"spread{i}", EvalOptions(secret=f"bench-spread-{i}"),
                                                   Path(logs))
            games += game_scores(Path(logs))
        print(f"secret {i}: {geo:,.1f} ({cpu:.1f} s CPU, {wall:.1f} s wall; {what})", flush=True)
        if geo > 0:
            scalars.append(geo)
            cpus.append(cpu)
    mean = statistics.fmean(scalars)
    sd = statistics.stdev(scalars) if len(scalars) > 1 else float("nan")
    # The same figure from the pooled games: a bank is a mean of 12 of them, the scalar the
    # geometric mean of four banks; resampling the pooled games gives its spread with less error.
    import random

    rng = random.Random(0)
    boot = []
    for _ in range(4000):
        banks = [statistics.fmean(rng.choices(games, k=12)) for _ in range(4)]
        boot.append(math.exp(statistics.fmean(math.log(b) for b in banks)))
    bsd = statistics.stdev(boot)
    return [
        f"Seed spread of {workdir.name} over {len(scalars)} run secrets (48 games each):",
        "",
        "- scalars: " + ", ".join(f"{v:,.0f}" for v in scalars),
        f"- mean {mean:,.0f}, standard deviation {sd:,.0f} ({sd / mean:.1%} of the mean); "
        f"min {min(scalars):,.0f}, max {max(scalars):,.0f}; CPU {min(cpus):.1f}-{max(cpus):.1f} s",
        f"- resampled from the {len(games)} pooled games: standard deviation of the scalar "
        f"{bsd / statistics.fmean(boot):.1%} of its mean; "
        f"of one game {statistics.stdev(games) / statistics.fmean(games):.0%}",
        "",
    ]


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "spread":
        lines = spread(Path(argv[1]).resolve(), int(argv[2]))
        out = Path(argv[3])
    elif len(argv) == 3 and argv[0] == "compare":
        with tempfile.TemporaryDirectory() as tmp:
            lines = compare(Path(argv[1]).resolve(), _players(Path(tmp)))
        out = Path(argv[2])
    elif len(argv) == 1:
        out = Path(argv[0])
        lines = report()
    else:
        print("usage: python bench.py REPORT.md | python bench.py compare OLD REPORT.md | "
              "python bench.py spread DIR N REPORT.md", file=sys.stderr)
        return 2
    with open(out, "a") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


def _players(tmp: Path) -> list[tuple[str, Path]]:
    """The seed and three baselines of increasing cost, staged as candidates under ``tmp``."""
    seed = tmp / "seed"
    seed.mkdir()
    shutil.copy2(SEED_DIR / "agent.py", seed / "agent.py")
    out = [("seed x_0", seed)]
    for name in ("greedy", "corner", "expectimax"):
        (tmp / name).mkdir()
        out.append((f"baseline {name}", stage(name, tmp / name)))
    return out


def report() -> list[str]:
    """The default benchmark section."""
    eng = engine_moves_per_second()
    rt = round_trips_per_second()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:  # never run a player inside the package itself
        seed = Path(tmp) / "seed"
        seed.mkdir()
        shutil.copy2(SEED_DIR / "agent.py", seed / "agent.py")
        wall, cpu, geo, what = full_evaluation(seed, "bench-seed")
        rows.append(("seed x_0 (agent.py)", wall, cpu, geo, what))
        staged = {}
        for name in BASELINES:
            (Path(tmp) / name).mkdir()
            staged[name] = stage(name, Path(tmp) / name)
            wall, cpu, geo, what = full_evaluation(staged[name], f"bench-{name}")
            rows.append((f"baseline {name}", wall, cpu, geo, what))
        overhead = sandbox_overhead([("seed x_0", seed), ("baseline corner", staged["corner"]),
                                     ("baseline expectimax", staged["expectimax"])])
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
    lines += overhead
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Benchmark of the attention_c target: ``python bench.py REPORT.md [--against REV] [--load N]``.

Evaluates exactly as avo does (``avo.evaluation.evaluate_dir``: a child process with the
target's limits and timeout), full mode, and writes a markdown section with:
- the wall time of one full evaluation and the score of the shipped seed kernel;
- the spread of the scalar (max/min) over five evaluations of one kernel (the
  vectorised kernel from tests/kernels, which evaluates faster than the seed; goal
  <= 1.05), with per-config spreads and the machine load, since the machine is shared;
- with ``--against REV``: this evaluator against the one at git revision REV, side by side
  (evaluations alternating, the same kernel, the same way: ``evaluate()`` in a fresh
  process each), as ratios of wall time and of score;
- with ``--load N``: all of the above while N busy processes started here compete.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 5
HERE = Path(__file__).resolve().parent


def _evaluate(work: Path, log: Path) -> tuple[float, float, dict[str, float], str]:
    from avo.evaluation import evaluate_dir
    from avo.plugins import find_target

    t0 = time.monotonic()
    ev = evaluate_dir(find_target("attention_c"), work, log)
    wall = time.monotonic() - t0
    if ev.scalar is None:
        raise SystemExit(f"evaluation failed: {ev.result.error}")
    return wall, ev.scalar, ev.result.metrics, ev.result.notes or ""


_DIRECT = """
import json, sys, time
from pathlib import Path
from avo.models import EvalOptions
from avo_target_attention_c.evaluate import evaluate
t0 = time.monotonic()
r = evaluate(Path(sys.argv[1]), EvalOptions(quick=False))
print(json.dumps({"wall": time.monotonic() - t0, "correct": r.correct, "error": r.error,
                  "metrics": r.metrics}))
"""


def _direct(package_root: Path, work: Path) -> tuple[float, float]:
    """Wall seconds and scalar of one full evaluation by the package under ``package_root``."""
    from avo.contract import geometric_mean

    env = {**os.environ, "PYTHONPATH": str(package_root)}
    proc = subprocess.run([sys.executable, "-c", _DIRECT, str(work)], capture_output=True, text=True, env=env,
                          timeout=900)
    if proc.returncode != 0:
        raise SystemExit(f"evaluation under {package_root} crashed:\n{proc.stderr[-2000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    if not out["correct"]:
        raise SystemExit(f"evaluation under {package_root} failed: {out['error']}")
    return out["wall"], geometric_mean(out["metrics"].values())


def compare_evaluators(rev: str, work: Path, runs: int, tmp: Path) -> list[str]:
    """This evaluator against the one at ``rev``, alternating, as markdown lines."""
    old_root = tmp / "old"
    old_root.mkdir()
    archive = subprocess.run(["git", "-C", str(HERE), "archive", rev, "avo_target_attention_c"],
                             capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old_root)], input=archive, check=True)
    walls: dict[str, list[float]] = {"old": [], "new": []}
    scalars: dict[str, list[float]] = {"old": [], "new": []}
    for i in range(runs):
        order = ("old", "new") if i % 2 == 0 else ("new", "old")
        for which in order:
            wall, scalar = _direct(old_root if which == "old" else HERE, work)
            walls[which].append(wall)
            scalars[which].append(scalar)
            print(f"{which} evaluator run {i + 1}: {scalar:.4f} in {wall:.1f} s", file=sys.stderr)
    med = {k: statistics.median(v) for k, v in walls.items()}
    sc = {k: statistics.median(v) for k, v in scalars.items()}
    return [
        "",
        f"This evaluator against the one at `{rev}`, {runs} full evaluations each of `{work.name}`, "
        "alternating, each `evaluate()` in a fresh process:",
        "",
        "| measure | old | new | new / old |",
        "| --- | --- | --- | --- |",
        f"| wall time of one evaluation, median (s) | {med['old']:.1f} | {med['new']:.1f} | "
        f"{med['new'] / med['old']:.3f} |",
        f"| scalar, median | {sc['old']:.4f} | {sc['new']:.4f} | {sc['new'] / sc['old']:.3f} |",
        f"| wall times (s) | {', '.join(f'{w:.1f}' for w in walls['old'])} | "
        f"{', '.join(f'{w:.1f}' for w in walls['new'])} | |",
        f"| scalars | {', '.join(f'{w:.4f}' for w in scalars['old'])} | "
        f"{', '.join(f'{w:.4f}' for w in scalars['new'])} | |",
    ]


def _busy(n: int) -> list[subprocess.Popen[bytes]]:
    """``n`` processes that each keep one CPU busy: the competing load of issue 16."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python bench.py")
    parser.add_argument("report")
    parser.add_argument("--against", help="git revision of an earlier evaluator to compare with, side by side")
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--load", type=int, default=0, help="busy processes competing during the benchmark")
    parser.add_argument("--only-against", action="store_true", help="skip the seed and spread sections")
    parser.add_argument("--kernel", type=Path,
                        help="candidate folder (kernel.c, cflags.txt) for the spread and --against "
                             "(default: the vectorised kernel)")
    parser.add_argument("--no-seed", action="store_true", help="skip the seed's evaluation in the spread section")
    args = parser.parse_args(argv[1:])
    busy = _busy(args.load)
    try:
        return _bench(args)
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()


def _bench(args: argparse.Namespace) -> int:
    out_path = Path(args.report)
    load_before = os.getloadavg()
    lines = ["## attention_c (avo-target-attention-c)", ""]
    summary: dict[str, object] = {"load": args.load}
    with tempfile.TemporaryDirectory(prefix="attention-c-bench-") as tmp:
        seed_dir, fast_dir = Path(tmp) / "seed", Path(tmp) / "vectorised"
        seed_dir.mkdir()
        fast_dir.mkdir()
        shutil.copy(HERE / "avo_target_attention_c" / "seed" / "kernel.c", seed_dir / "kernel.c")
        shutil.copy(HERE / "tests" / "kernels" / "vectorised.c", fast_dir / "kernel.c")
        (fast_dir / "cflags.txt").write_text("-march=native\n")
        if args.kernel:
            fast_dir = args.kernel.resolve()
        if not args.only_against:
            lines += _spread(None if args.no_seed else seed_dir, fast_dir, Path(tmp), args.runs, summary)
        if args.against:
            lines += compare_evaluators(args.against, fast_dir, args.runs, Path(tmp))
    load_after = os.getloadavg()
    lines[2:2] = [f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load_before[0]:.1f} "
                  f"before, {load_after[0]:.1f} after, on {os.cpu_count()} shared cores"
                  + (f", with {args.load} busy processes started by this benchmark" if args.load else "") + "."]
    with open(out_path, "a", encoding="utf-8") as fh:  # the bench session concatenates sections
        fh.write("\n".join(lines) + "\n")
    print(json.dumps(summary))
    return 0


def _spread(seed_dir: Path | None, fast_dir: Path, tmp: Path, runs: int, summary: dict[str, object]) -> list[str]:
    """The seed once (unless ``seed_dir`` is None) and one kernel ``runs`` times, as avo evaluates them."""
    name = fast_dir.name
    seed_metrics: dict[str, float] = {}
    seed_notes = ""
    lines = ["", "Full evaluations as avo runs them (child process, limits, timeout).", "",
             "| measure | value |", "| --- | --- |"]
    if seed_dir is not None:
        seed_wall, seed_scalar, seed_metrics, seed_notes = _evaluate(seed_dir, tmp / "logs" / "seed.log")
        print(f"seed: {seed_scalar:.4f} in {seed_wall:.1f} s", file=sys.stderr)
        summary.update(seed=seed_scalar, seed_wall=seed_wall)
        lines += [f"| time of one full evaluation of the seed | {seed_wall:.1f} s |",
                  f"| seed score (geometric mean of 8 speedups over NumPy) | {seed_scalar:.4f} |"]
    walls: list[float] = []
    scalars: list[float] = []
    per_config: dict[str, list[float]] = {}
    notes = ""
    for i in range(runs):
        wall, scalar, metrics, notes = _evaluate(fast_dir, tmp / "logs" / f"fast{i}.log")
        walls.append(wall)
        scalars.append(scalar)
        for key, value in metrics.items():
            per_config.setdefault(key, []).append(value)
        table = [line for line in notes.splitlines() if line.startswith(("config", "n"))]
        print(f"{name} run {i + 1}: {scalar:.4f} in {wall:.1f} s, load {os.getloadavg()[0]:.2f}\n"
              + "\n".join(table), file=sys.stderr)
    spread = max(scalars) / min(scalars)
    summary.update(kernel=name, spread=spread, scalars=scalars, walls=walls)
    threads = next((line for line in notes.splitlines() if line.startswith("threads:")), "threads: ?")
    lines += [
        f"| time of one full evaluation of `{name}` (median of {runs}) | "
        f"{statistics.median(walls):.1f} s (min {min(walls):.1f}, max {max(walls):.1f}) |",
        f"| `{name}`, scalar of each of {runs} runs | {', '.join(f'{s:.4f}' for s in scalars)} |",
        f"| spread of that scalar, max/min over {runs} runs (goal <= 1.05 idle, <= 1.10 with 2 busy processes) "
        f"| {spread:.3f} |",
        f"| {threads.split(':', 1)[0]} | {threads.split(':', 1)[1].strip()} |",
        "",
        f"| config | seed speedup | `{name}`: median speedup | `{name}`: max/min over runs |",
        "| --- | --- | --- | --- |",
    ]
    for key, values in per_config.items():
        lines.append(f"| {key} | {seed_metrics.get(key, float('nan')):.4f} | {statistics.median(values):.4f} "
                     f"| {max(values) / min(values):.3f} |")
    if seed_notes:
        lines += ["", "The seed's evaluation notes (what the agent sees):", "", "```", seed_notes, "```", ""]
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv))

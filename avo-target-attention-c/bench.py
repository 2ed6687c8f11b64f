"""Benchmark of the attention_c target: ``python bench.py REPORT.md``.

Evaluates exactly as avo does (``avo.evaluation.evaluate_dir``: a child process with the
target's limits and timeout), full mode, and writes a markdown section with:
- the wall time of one full evaluation and the score of the shipped seed kernel;
- the spread of the scalar (max/min) over five evaluations of one kernel (the
  vectorised kernel from tests/kernels, which evaluates faster than the seed; goal
  <= 1.05), with per-config spreads and the machine load, since the machine is shared.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python bench.py REPORT.md", file=sys.stderr)
        return 2
    out_path = Path(argv[1])
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="attention-c-bench-") as tmp:
        seed_dir, fast_dir = Path(tmp) / "seed", Path(tmp) / "vectorised"
        seed_dir.mkdir()
        fast_dir.mkdir()
        shutil.copy(HERE / "avo_target_attention_c" / "seed" / "kernel.c", seed_dir / "kernel.c")
        shutil.copy(HERE / "tests" / "kernels" / "vectorised.c", fast_dir / "kernel.c")
        (fast_dir / "cflags.txt").write_text("-march=native\n")
        seed_wall, seed_scalar, seed_metrics, seed_notes = _evaluate(seed_dir, Path(tmp) / "logs" / "seed.log")
        print(f"seed: {seed_scalar:.4f} in {seed_wall:.1f} s", file=sys.stderr)
        walls: list[float] = []
        scalars: list[float] = []
        per_config: dict[str, list[float]] = {}
        for i in range(RUNS):
            wall, scalar, metrics, notes = _evaluate(fast_dir, Path(tmp) / "logs" / f"fast{i}.log")
            walls.append(wall)
            scalars.append(scalar)
            for key, value in metrics.items():
                per_config.setdefault(key, []).append(value)
            print(f"vectorised run {i + 1}: {scalar:.4f} in {wall:.1f} s", file=sys.stderr)
    load_after = os.getloadavg()
    spread = max(scalars) / min(scalars)
    threads = next((line for line in seed_notes.splitlines() if line.startswith("threads:")), "threads: ?")
    lines = [
        "## attention_c (avo-target-attention-c)",
        "",
        f"Full evaluations as avo runs them (child process, limits, timeout); "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after, on 2 shared cores.",
        "",
        "| measure | value |",
        "| --- | --- |",
        f"| time of one full evaluation of the seed | {seed_wall:.1f} s |",
        f"| time of one full evaluation of the vectorised kernel (median of {RUNS}) | "
        f"{statistics.median(walls):.1f} s (min {min(walls):.1f}, max {max(walls):.1f}) |",
        f"| seed score (geometric mean of 8 speedups over NumPy) | {seed_scalar:.4f} |",
        f"| vectorised kernel, scalar of each of {RUNS} runs | {', '.join(f'{s:.4f}' for s in scalars)} |",
        f"| spread of that scalar, max/min over {RUNS} runs (goal <= 1.05) | {spread:.3f} |",
        f"| {threads.split(':', 1)[0]} | {threads.split(':', 1)[1].strip()} |",
        "",
        "| config | seed speedup | vectorised: median speedup | vectorised: max/min over runs |",
        "| --- | --- | --- | --- |",
    ]
    for key, values in per_config.items():
        lines.append(f"| {key} | {seed_metrics.get(key, float('nan')):.4f} | {statistics.median(values):.4f} "
                     f"| {max(values) / min(values):.3f} |")
    lines += ["", "The seed's evaluation notes (what the agent sees):", "", "```", seed_notes, "```", ""]
    with open(out_path, "a", encoding="utf-8") as fh:  # the bench session concatenates sections
        fh.write("\n".join(lines) + "\n")
    print(json.dumps({"seed": seed_scalar, "seed_wall": seed_wall, "spread": spread, "scalars": scalars,
                      "walls": walls}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

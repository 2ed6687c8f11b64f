"""Benchmark of the attention_c target: ``python bench.py REPORT.md [--busy N] [--against REV] [--load N]``.

Evaluates exactly as avo does (``avo.evaluation.evaluate_dir``: a child process with the
target's limits and timeout), full mode, and writes a markdown section with:
- the wall time of one full evaluation and the score of the shipped seed kernel;
- the spread of the scalar (max/min) over five evaluations of one kernel (the best version
  of the shipped example ``examples/attention_c-run2``; ``--kernel`` for another), first at
  the machine's ambient load, then with ``--busy`` (2) busy processes started here
  competing (issue 16: goal <= 1.05 idle, <= 1.10 with two busy processes), with
  per-config spreads and the load averages, since the machine is shared;
- ``avo verify`` of that example, plain and with the busy processes;
- with ``--against REV``: this evaluator against the one at git revision REV, side by side
  (evaluations alternating, the same kernel, the same way: ``evaluate()`` in a fresh
  process each), as ratios of wall time and of score;
- with ``--load N``: all of the above while N more busy processes compete;
- how late a sleeping helper thread joins a call here (``wake_bench.py``): what bounds two threads.
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
from typing import Any

from wake_bench import wake_lines

RUNS = 5
BUSY = 2
HERE = Path(__file__).resolve().parent
EXAMPLE = HERE.parent / "examples" / "attention_c-run2"


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
    parser.add_argument("--busy", type=int, default=BUSY,
                        help="busy processes for the loaded spread and verify (0: skip them)")
    parser.add_argument("--load", type=int, default=0, help="busy processes competing during the whole benchmark")
    parser.add_argument("--only-against", action="store_true", help="skip the seed, spread and verify sections")
    parser.add_argument("--kernel", help="candidate folder (kernel.c, cflags.txt) for the spread and --against, "
                                         "or 'vectorised' (tests/kernels); default: the example's best version")
    parser.add_argument("--example", type=Path, default=EXAMPLE, help="shipped example to verify")
    parser.add_argument("--no-seed", action="store_true", help="skip the seed's evaluation")
    args = parser.parse_args(argv[1:])
    busy = _busy(args.load)
    try:
        return _bench(args)
    finally:
        _stop(busy)


def _stop(busy: list[subprocess.Popen[bytes]]) -> None:
    for proc in busy:
        proc.kill()
        proc.wait()


def _kernel(args: argparse.Namespace, tmp: Path) -> Path:
    """The candidate folder the spread and --against measure."""
    if args.kernel and args.kernel != "vectorised":
        return Path(args.kernel).resolve()
    if args.kernel == "vectorised":
        fast_dir = tmp / "vectorised"
        fast_dir.mkdir()
        shutil.copy(HERE / "tests" / "kernels" / "vectorised.c", fast_dir / "kernel.c")
        (fast_dir / "cflags.txt").write_text("-march=native\n")
        return fast_dir
    from avo.examples import export_example_version, load_example

    _, best = load_example(args.example)
    dest = tmp / f"{args.example.name}-v{best.n}"
    export_example_version(args.example, best, dest)
    return dest


def _bench(args: argparse.Namespace) -> int:
    out_path = Path(args.report)
    load_before = os.getloadavg()
    lines = ["## attention_c (avo-target-attention-c)", ""]
    summary: dict[str, object] = {"load": args.load}
    with tempfile.TemporaryDirectory(prefix="attention-c-bench-") as tmp:
        kernel = _kernel(args, Path(tmp))
        if not args.only_against:
            seed = None
            if not args.no_seed:
                seed_dir = Path(tmp) / "seed"
                seed_dir.mkdir()
                shutil.copy(HERE / "avo_target_attention_c" / "seed" / "kernel.c", seed_dir / "kernel.c")
                seed = _evaluate(seed_dir, Path(tmp) / "logs" / "seed.log")
                print(f"seed: {seed[1]:.4f} in {seed[0]:.1f} s", file=sys.stderr)
                summary.update(seed=seed[1], seed_wall=seed[0])
            columns = [_column(kernel, Path(tmp), args.runs, 0, args.example)]
            if args.busy:
                columns.append(_column(kernel, Path(tmp), args.runs, args.busy, args.example))
            summary["columns"] = [{k: v for k, v in c.items() if k != "metrics"} for c in columns]
            lines += _spread_lines(kernel.name, seed, columns, args.example)
        if args.against:
            lines += compare_evaluators(args.against, kernel, args.runs, Path(tmp))
        if not args.only_against:
            lines += wake_lines(Path(tmp))
    load_after = os.getloadavg()
    lines[2:2] = [f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average {load_before[0]:.1f} "
                  f"before, {load_after[0]:.1f} after, on {os.cpu_count()} shared cores"
                  + (f", with {args.load} busy processes started by this benchmark" if args.load else "") + "."]
    with open(out_path, "a", encoding="utf-8") as fh:  # the bench session concatenates sections
        fh.write("\n".join(lines) + "\n")
    print(json.dumps(summary))
    return 0


def _verify(example: Path) -> str:
    from avo.examples import verify_example

    v = verify_example(example)
    return f"{'OK' if v.ok else 'FAILED'}: {v.detail}" + (" (the installed evaluator differs)" if v.evaluator_changed
                                                           else "")


def _column(kernel: Path, tmp: Path, runs: int, busy: int, example: Path | None) -> dict[str, Any]:
    """``runs`` evaluations of ``kernel`` and a verify of ``example``, with ``busy`` busy processes competing."""
    procs = _busy(busy)
    try:
        load0 = os.getloadavg()[0]
        walls: list[float] = []
        scalars: list[float] = []
        per_config: dict[str, list[float]] = {}
        notes = ""
        for i in range(runs):
            wall, scalar, metrics, notes = _evaluate(kernel, tmp / "logs" / f"{busy}busy-{i}.log")
            walls.append(wall)
            scalars.append(scalar)
            for key, value in metrics.items():
                per_config.setdefault(key, []).append(value)
            table = [line for line in notes.splitlines() if line.startswith(("config", "n", "quads", "the machine"))]
            print(f"{kernel.name} run {i + 1} ({busy} busy): {scalar:.4f} in {wall:.1f} s, "
                  f"load {os.getloadavg()[0]:.2f}\n" + "\n".join(table), file=sys.stderr)
        load1 = os.getloadavg()[0]
        verified = _verify(example) if example is not None and example.is_dir() else "not run"
        print(f"verify ({busy} busy): {verified}", file=sys.stderr)
        load2 = os.getloadavg()[0]
    finally:
        _stop(procs)
    threads = next((line for line in notes.splitlines() if line.startswith("threads:")), "threads: ?")
    return {"busy": busy, "walls": walls, "scalars": scalars, "spread": max(scalars) / min(scalars),
            "metrics": per_config, "load": (load0, load1, load2), "verify": verified, "threads": threads}


def _spread_lines(name: str, seed: tuple[float, float, dict[str, float], str] | None,
                  columns: list[dict[str, Any]], example: Path) -> list[str]:
    """The spread and verify table, then the per-config table, as markdown lines."""
    heads = ["ambient load" if c["busy"] == 0 else f"with {c['busy']} busy processes started here" for c in columns]
    runs = len(columns[0]["scalars"])
    sep = "| --- " * (len(columns) + 1) + "|"

    def row(label: str, cells: list[str]) -> str:
        return f"| {label} | " + " | ".join(cells) + " |"

    lines = ["", f"Full evaluations as avo runs them (child process, limits, timeout) of `{name}`.", ""]
    if seed is not None:
        lines += [f"The seed: one full evaluation in {seed[0]:.1f} s, score {seed[1]:.4f} (geometric mean of 8 "
                  "speedups over NumPy).", ""]
    lines += [
        row("measure", heads), sep,
        row(f"wall time of one full evaluation, median of {runs} (s)",
            [f"{statistics.median(c['walls']):.1f} ({min(c['walls']):.1f}-{max(c['walls']):.1f})" for c in columns]),
        row(f"scalar of each of {runs} runs", [", ".join(f"{s:.4f}" for s in c["scalars"]) for c in columns]),
        row("spread, max/min (goal <= 1.05 idle, <= 1.10 with 2 busy processes)",
            [f"{c['spread']:.3f}" for c in columns]),
        row("load average: before, after the evaluations, after the verify",
            [", ".join(f"{x:.1f}" for x in c["load"]) for c in columns]),
        row(f"`avo verify {example.name}` (after the evaluations)", [c["verify"] for c in columns]),
        row(columns[0]["threads"].split(":", 1)[0], [c["threads"].split(":", 1)[1].strip() for c in columns]),
        "",
        "| config | seed speedup | " + " | ".join(f"median, max/min ({h})" for h in heads) + " |",
        "| --- " * (len(columns) + 2) + "|",
    ]
    for key in columns[0]["metrics"]:
        seed_value = f"{seed[2][key]:.4f}" if seed is not None and key in seed[2] else "-"
        cells = [f"{statistics.median(c['metrics'][key]):.4f}, {max(c['metrics'][key]) / min(c['metrics'][key]):.3f}"
                 for c in columns]
        lines.append(f"| {key} | {seed_value} | " + " | ".join(cells) + " |")
    if seed is not None:
        lines += ["", "The seed's evaluation notes (what the agent sees):", "", "```", seed[3], "```", ""]
    return lines


if __name__ == "__main__":
    sys.exit(main(sys.argv))

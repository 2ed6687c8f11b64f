"""Core benchmark: CLI start-up, framework overhead per step, status on a long run.

``python bench/core_bench.py REPORT.md`` appends a markdown section to REPORT.md. Times are
compared side by side in one run (ratios, medians), never against constants, because the
machine is shared and noisy.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "tests" / "fixtures" / "toy"
AVO = [sys.executable, "-m", "avo"]


def wall(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - t


def startup(env: dict[str, str], rounds: int = 15) -> dict[str, float]:
    """Interleave `python -c pass`, `avo --help` and `avo status`; medians."""
    samples: dict[str, list[float]] = {"python -c pass": [], "avo --help": [], "avo status": []}
    for _ in range(rounds):
        samples["python -c pass"].append(wall([sys.executable, "-c", "pass"], env))
        samples["avo --help"].append(wall([*AVO, "--help"], env))
        samples["avo status"].append(wall([*AVO, "status"], env))
    return {k: statistics.median(v) for k, v in samples.items()}


def step_overhead(runs_root: Path, steps: int = 100) -> tuple[float, float, str]:
    """In-process submits on the toy target: (median overhead s, median evaluator s, run path)."""
    from avo.engine import start_run, submit

    run = start_run(str(TOY), runs_root, stall_limit=10**6)
    overheads, evals = [], []
    for i in range(steps):
        sol = run.paths.work / "solution.py"
        x = 1.0 + 6.0 * (i + 1) / steps if i % 2 == 0 else -float(i)  # alternate accepted / rejected
        sol.write_text(sol.read_text().replace(sol.read_text().splitlines()[2], f"X = {x}"))
        t = time.perf_counter()
        out = submit(run, f"step {i}")
        total = time.perf_counter() - t
        overheads.append(total - out.evaluation.wall_s)
        evals.append(out.evaluation.wall_s)
    return statistics.median(overheads), statistics.median(evals), str(run.paths.root)


def inflate(run_dir: Path, versions: int) -> None:
    """Give a real run a record of ``versions`` versions (reusing its last commit)."""
    from avo.state import RunPaths, load_state, save_state

    paths = RunPaths(run_dir)
    state = load_state(paths)
    last = state.versions[-1]
    while len(state.versions) < versions:
        state.versions.append(last.model_copy(update={"n": len(state.versions)}))
    state.best = len(state.versions) - 1
    save_state(paths, state)


def main(report: Path) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="avo-bench-"))
    try:
        runs_root = tmp / "runs"
        env = {**os.environ, "AVO_RUNS_DIR": str(runs_root), "AVO_DISABLE_PLUGIN_AUTOLOAD": "1"}
        os.environ.update({"AVO_DISABLE_PLUGIN_AUTOLOAD": "1"})
        overhead, evaluator, run_dir = step_overhead(runs_root)
        small = startup(env)
        inflate(Path(run_dir), 1000)
        big = startup(env, rounds=7)
        base = small["python -c pass"]
        lines = [
            "## core (avo)",
            "",
            "| measurement | median | ratio to `python -c pass` |",
            "|---|---|---|",
            *(f"| {k} | {v * 1000:.0f} ms | {v / base:.1f}× |" for k, v in small.items()),
            f"| avo status, 1,000-version run | {big['avo status'] * 1000:.0f} ms | "
            f"{big['avo status'] / big['python -c pass']:.1f}× (goal ≤ 0.5 s) |",
            "",
            f"Framework overhead per submit (toy target, 100 submits, evaluator time subtracted): "
            f"**{overhead * 1000:.1f} ms** median (goal ≤ 50 ms); the toy evaluator itself took "
            f"{evaluator * 1000:.0f} ms per call.",
            "",
        ]
        with open(report, "a", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        print("\n".join(lines))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-report.md"))

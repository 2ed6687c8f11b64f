"""Benchmark of the Ray executor: ``python bench.py REPORT.md`` appends a markdown section.

Starts a private local Ray instance (2 CPUs) and measures, on the toy directory target:

- the dispatch overhead per evaluation: the wall time of one ``avo_execute`` call minus the
  evaluator's own wall time, Ray vs local, median of many, and the ratio of the totals;
- the wall time of a noisy target's confirm runs (3 pairs, each evaluation ~1 s of work),
  one at a time vs two at a time;
- a colony through Ray: ``avo evolve --resume`` of a 2-island colony against one run, both
  started with ``--executor ray`` on a Ray head of their own on 127.0.0.1 (classic backend).

Takes about three minutes on 2 cores.
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from avo import executors
from avo.builtin.directory_target import spec_from_folder
from avo.evaluator_copy import evaluator_source, runtime_hashes
from avo.integrity import hash_tree
from avo.models import EvalJob

ROOT = Path(__file__).resolve().parents[2]
TOY = ROOT / "tests" / "fixtures" / "toy"
SLEEPY = "import time\ntime.sleep({s})\nX = {x}\nY = 3.0\n\ndef square(n):\n    return n * n\n"


def _job(folder: Path, candidate: Path, label: str) -> EvalJob:
    spec = spec_from_folder(folder)
    root, exclude, module = evaluator_source(spec)
    return executors.make_job(spec, label, snapshot=candidate, evaluator_hashes=hash_tree(root, exclude),
                              runtime_hashes=runtime_hashes(module is not None), sandbox="none", secret="bench")


def _timed(name: str, job: EvalJob, options: dict[str, str], n: int) -> tuple[list[float], list[float]]:
    totals, overheads = [], []
    for _ in range(n):
        start = time.perf_counter()
        res = executors.execute(name, job.model_copy(update={"id": executors.new_job_id()}), options)
        total = time.perf_counter() - start
        assert res.result is not None and res.result.correct, res.log[-2000:]
        totals.append(total)
        overheads.append(total - res.wall_s)
    return totals, overheads


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def colony_on_ray(work: Path, steps: int = 6) -> tuple[float, float]:
    """Wall time of ``steps`` classic steps on one run and on a 2-island colony, both through a
    Ray head started here (each island's `avo evolve` child connects to it itself)."""
    ray = Path(sys.executable).with_name("ray")
    temp = Path(tempfile.mkdtemp(prefix="avoray-", dir="/tmp"))  # Ray's socket paths must stay short
    port = _free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_ADDRESS": f"127.0.0.1:{port}", "AVO_RUNS_DIR": str(work / "colony-runs")}
    subprocess.run([str(ray), "start", "--head", "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus",
                    "2", "--include-dashboard=false", "--disable-usage-stats", "--temp-dir", str(temp / "ray")],
                   env={k: v for k, v in env.items() if k != "RAY_ADDRESS"}, check=True, capture_output=True)
    avo = [sys.executable, "-m", "avo"]
    try:
        walls = []
        for extra in ([], ["--islands", "2"]):
            subprocess.run([*avo, "start", "--target", str(TOY), "--no-prompt", "--stall-limit", "1000",
                            "--executor", "ray", *extra], env=env, check=True, capture_output=True)
            made = max((p for p in (work / "colony-runs").iterdir() if not p.name.startswith(".")),
                       key=lambda p: p.stat().st_mtime)
            start = time.perf_counter()
            subprocess.run([*avo, "evolve", "--resume", str(made), "--backend", "classic", "--seed", "1",
                            "--max-steps", str(steps), "--plain"], env=env, check=True, capture_output=True)
            walls.append(time.perf_counter() - start)
        return walls[0], walls[1]
    finally:
        subprocess.run([str(ray), "stop", "--force"], env=env, capture_output=True)
        shutil.rmtree(temp, ignore_errors=True)


def main(report: Path) -> None:
    os.environ.pop("RAY_ADDRESS", None)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a private instance: no token file in ~/.ray
    options = {"num_cpus": "2"}
    with tempfile.TemporaryDirectory(prefix="avo-ray-bench-") as tmp:
        work = Path(tmp)
        toy = work / "toy"
        shutil.copytree(TOY, toy)
        fast = work / "fast"
        shutil.copytree(toy / "seed", fast)
        job = _job(toy, fast, "bench")
        executors.execute("ray", job, options)  # starts the local Ray instance; not timed
        n = 25
        local_t, local_o = _timed("local", job, {}, n)
        ray_t, ray_o = _timed("ray", job, options, n)
        slow = work / "slow"
        shutil.copytree(toy / "seed", slow)
        (slow / "solution.py").write_text(SLEEPY.format(s=1, x=6.5))
        pairs = [_job(toy, slow, f"confirm{i}-{w}") for i in range(3) for w in ("best", "cand")]
        walls = {}
        for capacity in (1, 2):
            start = time.perf_counter()
            out = executors.execute_many("ray", pairs, options, capacity)
            walls[capacity] = time.perf_counter() - start
            assert all(r.result is not None and r.result.correct for r in out)
        from avo_executor_ray.cluster import shutdown

        shutdown()
        one_t, colony_t = colony_on_ray(work)
    med = statistics.median
    lines = [
        "## avo-executor-ray",
        "",
        f"Toy evaluator (a child process that scores two constants), {n} evaluations each, "
        "a private local Ray instance with 2 CPUs, sandbox none.",
        "",
        "| executor | median wall per evaluation | median dispatch overhead (wall minus evaluator) |",
        "|---|---|---|",
        f"| local | {med(local_t) * 1000:.0f} ms | {med(local_o) * 1000:.0f} ms |",
        f"| ray | {med(ray_t) * 1000:.0f} ms | {med(ray_o) * 1000:.0f} ms |",
        "",
        f"Ray / local, wall per evaluation: **{med(ray_t) / med(local_t):.2f}x** "
        f"(Ray adds {(med(ray_o) - med(local_o)) * 1000:.0f} ms per evaluation: a fresh worker per task, "
        "the object store, the evaluator copy on the worker).",
        "",
        "Confirm runs of a noisy target, 3 pairs (6 evaluations of ~1 s each) through Ray:",
        "",
        f"| one at a time | two at a time | ratio |\n|---|---|---|\n"
        f"| {walls[1]:.1f} s | {walls[2]:.1f} s | {walls[1] / walls[2]:.2f}x |",
        "",
        "A colony through Ray (a head of its own on 127.0.0.1, 2 CPUs; toy target, classic backend, "
        "6 steps per island; each island's `avo evolve` connects to Ray itself):",
        "",
        f"| one run × 6 steps | 2 islands × 6 steps | ratio (→ 1 for N ≤ free cores) |\n|---|---|---|\n"
        f"| {one_t:.1f} s | {colony_t:.1f} s | {colony_t / one_t:.2f}x |",
        "",
    ]
    with open(report, "a", encoding="utf-8") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "bench-report.md"))

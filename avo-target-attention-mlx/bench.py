"""Benchmark of the attention_mlx target: ``python bench.py REPORT.md``.

Measures what an avo user of this target needs to know on this machine: how long a full
evaluation takes, side by side with the in-process evaluator it replaced (commit
``IN_PROCESS_COMMIT``, extracted from git into a temporary folder; the two alternate, so a
load change hits both), the seed's score under both, the spread of repeated evaluations
of one candidate (which sets the declared noise band), the per-call overhead of the
worker round trip, and the GB/s MLX's SDPA reaches against the streaming bandwidth, plus
the baselines.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SEED = HERE / "avo_target_attention_mlx" / "seed"
REPEATS = 3
#: The last commit whose evaluator ran the candidate inside the evaluator's process.
IN_PROCESS_COMMIT = "11ee375"

_CHILD = """
import json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from avo_target_attention_mlx.harness import evaluate_workdir
if sys.argv[3] == "old":
    r = evaluate_workdir(Path(sys.argv[2]), quick=False)
else:
    from avo.models import EvalOptions
    r = evaluate_workdir(Path(sys.argv[2]), EvalOptions(quick=False))
print(r.model_dump_json())
"""


def old_package(dest: Path) -> Path:
    """The in-process evaluator's package, as of ``IN_PROCESS_COMMIT``, under ``dest``."""
    pkg = "avo-target-attention-mlx/avo_target_attention_mlx"
    files = subprocess.run(["git", "-C", str(HERE), "ls-tree", "-r", "--name-only", "--full-tree",
                            IN_PROCESS_COMMIT, pkg],
                           capture_output=True, text=True, check=True).stdout.split()
    if not files:
        raise SystemExit(f"commit {IN_PROCESS_COMMIT} has no {pkg} (is this a git checkout of avo?)")
    for name in files:
        data = subprocess.run(["git", "-C", str(HERE), "show", f"{IN_PROCESS_COMMIT}:{name}"],
                              capture_output=True, check=True).stdout
        path = dest / Path(name).relative_to("avo-target-attention-mlx")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return dest


def evaluate(workdir: Path, which: str, old_root: Path) -> tuple[dict[str, Any], float]:
    """One full evaluation in a fresh child (``old``: in-process, ``new``: sandboxed workers):
    (result, wall seconds including the child's start and MLX's import)."""
    root = old_root if which == "old" else HERE
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(root), str(workdir), which],
                          capture_output=True, text=True, timeout=900, cwd=workdir)
    wall = time.perf_counter() - t0
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    if not lines:
        raise SystemExit(f"the {which} evaluator printed nothing:\n{proc.stderr[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    if not result.get("correct"):
        raise SystemExit(f"the seed failed the {which} gate: {result.get('error')}")
    return result, wall


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def round_trip() -> dict[str, float]:
    """Per-call costs of the worker protocol on the quick (small decode) shapes: the no-op
    round trip, and per config the input copy and SDPA's own time (both subtracted or
    measured as in an evaluation)."""
    from avo_target_attention_mlx.harness import KERNELS, Kernel, Suite

    from avo.models import EvalOptions

    suite = Suite(True, EvalOptions(quick=True), None)
    calls: list[tuple[int, tuple[float, float, float]]] = []
    real_call = Suite._call

    def spy(self: Suite, worker: Any, idx: int, name: str, timed: bool = True) -> tuple[float, float, float]:
        got = real_call(self, worker, idx, name, timed)
        if worker is self.ref and timed:
            calls.append((idx, got))
        return got

    Suite._call = spy  # type: ignore[method-assign]
    try:
        scores = suite.measure(Kernel("sdpa", KERNELS / "sdpa"))
    finally:
        Suite._call = real_call  # type: ignore[method-assign]
        suite.close()
    out = {"noop_us": suite.noop_s * 1e6}
    for idx, s in enumerate(scores):
        got = [g for i, g in calls if i == idx]
        out[f"{s.config.name} wall ms"] = statistics.median(g[0] for g in got) * 1e3
        out[f"{s.config.name} copy ms"] = statistics.median(g[1] for g in got) * 1e3
        out[f"{s.config.name} sdpa ms"] = s.ref_s * 1e3
    return out


def main(out: Path) -> None:
    from avo_target_attention_mlx import spec
    from avo_target_attention_mlx.baselines import BASELINES, measure_baselines
    from avo_target_attention_mlx.configs import FULL_CONFIGS
    from avo_target_attention_mlx.harness import Suite

    from avo.models import EvalOptions

    started = time.perf_counter()
    trip = round_trip()
    runs: dict[str, list[tuple[dict[str, Any], float]]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "seed"
        work.mkdir()
        (work / "attention.py").write_text((SEED / "attention.py").read_text())
        old_root = old_package(Path(tmp) / "old")
        for i in range(REPEATS):
            for which in (("old", "new") if i % 2 == 0 else ("new", "old")):
                runs[which].append(evaluate(work, which, old_root))
    scalars = {w: [geomean(list(r["metrics"].values())) for r, _ in rs] for w, rs in runs.items()}
    walls = {w: [t for _, t in rs] for w, rs in runs.items()}
    med = statistics.median(scalars["new"])
    rel_dev = max(abs(s / med - 1) for s in scalars["new"])
    reported = [statistics.fmean(r["spread"].values()) for r, _ in runs["new"]]
    wall_ratio = statistics.median(walls["new"]) / statistics.median(walls["old"])

    suite = Suite(False, EvalOptions(quick=False), None)
    try:
        sdpa = suite.measure(BASELINES["mlx_sdpa"])
    finally:
        suite.close()
    itemsize = {"float32": 4, "float16": 2, "bfloat16": 2}[suite.dtype]
    baselines = measure_baselines(EvalOptions(quick=False))
    elapsed = time.perf_counter() - started

    rows = []
    for s in sdpa:
        gbs = s.config.kv_elements() * itemsize / s.ref_s / 1e9
        rows.append(f"| {s.config.name} | {s.config.describe()} | {s.ref_s * 1e3:.2f} | {gbs:.2f} | "
                    f"{gbs / suite.stream_gbs:.0%} |")
    per_config = {w: {k: statistics.median(float(r["metrics"][k]) for r, _ in rs)
                      for k in (c.name for c in FULL_CONFIGS)} for w, rs in runs.items()}
    base_rows = []
    for name, res in baselines.items():
        if res.correct:
            base_rows.append(f"| {name} | {geomean(list(res.metrics.values())):.3f} | "
                             + ", ".join(f"{k} {v:.2f}" for k, v in res.metrics.items()) + " |")
        else:
            base_rows.append(f"| {name} | failed | {res.error} |")
    trip_rows = [f"| {k} | {v:.2f} |" for k, v in trip.items()]
    text = f"""## attention_mlx (MLX decode attention vs mx.fast SDPA)

Device: {suite.device}, dtype {suite.dtype}. Streaming copy bandwidth (NumPy, read+write):
{suite.stream_gbs:.1f} GB/s. Benchmark wall time {elapsed:.0f} s.

- Full evaluation of the seed, each in a fresh child (start, MLX import, inputs, float64
  references, gate, {len(FULL_CONFIGS)} configs x interleaved timed pairs), alternating:
  sandboxed workers (now) median **{statistics.median(walls["new"]):.1f} s**
  ({", ".join(f"{w:.1f}" for w in walls["new"])}), in-process evaluator of {IN_PROCESS_COMMIT}
  median **{statistics.median(walls["old"]):.1f} s** ({", ".join(f"{w:.1f}" for w in walls["old"])}):
  ratio now / before **{wall_ratio:.3f}**.
- Seed x_0 score (geometric mean of speedups vs SDPA): now **{med:.3f}**
  ({", ".join(f"{s:.3f}" for s in scalars["new"])}), before
  **{statistics.median(scalars["old"]):.3f}** ({", ".join(f"{s:.3f}" for s in scalars["old"])}); per config
  (median) now: {", ".join(f"{k} {v:.3f}" for k, v in per_config["new"].items())};
  before: {", ".join(f"{k} {v:.3f}" for k, v in per_config["old"].items())}.
- Spread of repeated evaluations of the same candidate (now): max deviation from the median
  scalar **{rel_dev:.1%}**; the evaluator's own per-pair spread (mean over configs) was
  {", ".join(f"{x:.1%}" for x in reported)}. Declared noise band: {spec().noise.band:.0%}.

Per-call cost of the worker protocol on the quick (small decode) shapes, measured on the
reference worker (medians): the no-op round trip and, per config, the whole request's wall
time, the input copy inside it (both come off the timed call) and what is left for SDPA:

| quantity | value |
| --- | --- |
{chr(10).join(trip_rows)}

MLX SDPA effective bandwidth (K+V bytes read once / median time):

| config | shape | SDPA ms | GB/s | of streaming |
| --- | --- | --- | --- | --- |
{chr(10).join(rows)}

Baselines (speedup vs SDPA, measured interleaved like a candidate; SDPA vs itself should be ~1):

| baseline | geomean | per config |
| --- | --- | --- |
{chr(10).join(base_rows)}
"""
    with open(out, "a", encoding="utf-8") as fh:  # the bench session concatenates sections
        fh.write(text + "\n")
    print(text)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python bench.py REPORT.md")
    main(Path(sys.argv[1]))

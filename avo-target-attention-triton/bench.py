"""Benchmark of the attention_triton targets.

``python bench.py REPORT.md``: appends a section to the bench report. Without a CUDA GPU
it measures what runs here: one quick evaluation of the seed under Triton's interpreter
through avo's evaluator child (time and gate result), and states that the GPU table was
not measured. With a GPU it also runs the ``--gpu`` table below.

``python bench.py --gpu [--target attention_triton|attention_triton_gqa|both] [--repeat N]``:
on a machine with an NVIDIA GPU, torch and Triton (installs nothing), runs the gate and a
full evaluation of the seed (N times, for the noise band) and of every baseline, and
prints TFLOPS per config for the seed, flash SDPA, cuDNN SDPA (and FlashAttention 3/4 when
importable). Without a GPU it says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]  # usable from a checkout that is not installed
ROW = re.compile(r"^(n\d+_(?:non)?causal)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+\d+\s+")


def _rows(notes: str) -> dict[str, tuple[float, float]]:
    """{config: (candidate TFLOPS, reference TFLOPS)} from an evaluation's notes table."""
    out = {}
    for line in notes.splitlines():
        m = ROW.match(line)
        if m:
            out[m.group(1)] = (float(m.group(5)), float(m.group(6)))
    return out


def _cuda() -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed (pip install './avo-target-attention-triton[gpu]')"
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        return False, f"torch {torch.__version__} ({build}) sees no CUDA device"
    return True, torch.cuda.get_device_name(0)


def gpu_table(target: str, repeat: int) -> str:
    """Gate + full evaluation of the seed (``repeat`` times) and of every baseline, as markdown."""
    from avo.models import EvalOptions

    from avo_target_attention_triton.configs import PROBLEMS
    from avo_target_attention_triton.evaluate import Device, baselines, evaluate

    problem = PROBLEMS[target]
    dev = Device()
    with tempfile.TemporaryDirectory(prefix="attention-triton-bench-") as tmp:
        work = Path(tmp) / "seed"
        shutil.copytree(HERE / "avo_target_attention_triton" / "seed", work)
        runs = []
        for i in range(repeat):
            t0 = time.monotonic()
            r = evaluate(problem, work, EvalOptions(quick=False))
            if not r.correct:
                raise SystemExit(f"the seed failed on {dev.name}: {r.error}")
            runs.append((r, time.monotonic() - t0))
            print(f"seed run {i + 1}: scalar {statistics.geometric_mean(r.metrics.values()):.4f} "
                  f"in {runs[-1][1]:.0f} s", file=sys.stderr)
        t0 = time.monotonic()
        base = baselines(problem, EvalOptions(quick=False))
        base_wall = time.monotonic() - t0
    seed_rows = _rows(runs[0][0].notes or "")
    names = [n for n in ("sdpa_cudnn", "fa3", "fa4") if n in base]
    base_rows = {n: _rows(base[n].notes or "") for n in names}
    head = ["config", "seed", "sdpa_flash", *names, "seed / flash"]
    lines = [f"### {target} on {dev.name}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", "",
             "TFLOPS (forward, causal counted as half), median of interleaved pairs.", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key, (seed_tf, flash_tf) in seed_rows.items():
        cells = [key, f"{seed_tf:.0f}", f"{flash_tf:.0f}"]
        cells += [f"{base_rows[n].get(key, (0.0, 0.0))[0]:.0f}" for n in names]
        cells.append(f"{runs[0][0].metrics[key]:.3f}")
        lines.append("| " + " | ".join(cells) + " |")
    scalars = [statistics.geometric_mean(r.metrics.values()) for r, _ in runs]
    lines += ["", "seed scalar (geometric mean of speedups over flash SDPA): "
              + ", ".join(f"{s:.4f}" for s in scalars)
              + (f"; max/min over {repeat} runs {max(scalars) / min(scalars):.3f}" if repeat > 1 else ""),
              f"one full evaluation of the seed: {statistics.median(w for _, w in runs):.0f} s; "
              f"all baselines: {base_wall:.0f} s; baselines not measured here: "
              + (", ".join(n for n in ("sdpa_cudnn", "fa3", "fa4") if n not in base) or "none"), ""]
    return "\n".join(lines)


def cpu_section() -> str:
    """What runs without a GPU: the seed's quick evaluation under the interpreter, as avo runs it."""
    from avo.evaluation import evaluate_dir
    from avo.plugins import find_target

    spec = find_target("attention_triton")
    with tempfile.TemporaryDirectory(prefix="attention-triton-bench-") as tmp:
        work = Path(tmp) / "seed"
        shutil.copytree(HERE / "avo_target_attention_triton" / "seed", work)
        t0 = time.monotonic()
        ev = evaluate_dir(spec, work, Path(tmp) / "seed.log", quick=True)
        wall = time.monotonic() - t0
    gate = next((ln for ln in (ev.result.notes or "").splitlines() if ln.startswith("gate:")), ev.result.error)
    return "\n".join([
        f"Quick evaluation of the seed under Triton's interpreter (no GPU here), through avo's evaluator "
        f"child: {wall:.1f} s, correct={ev.result.correct}; {gate}. Load average {os.getloadavg()[0]:.1f}.", ""])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python bench.py")
    parser.add_argument("report", nargs="?", type=Path)
    parser.add_argument("--gpu", action="store_true", help="print the GPU table (needs an NVIDIA GPU)")
    parser.add_argument("--target", default="both", choices=("attention_triton", "attention_triton_gqa", "both"))
    parser.add_argument("--repeat", type=int, default=1, help="full evaluations of the seed (noise band)")
    args = parser.parse_args(argv[1:])
    ok, found = _cuda()
    targets = ["attention_triton", "attention_triton_gqa"] if args.target == "both" else [args.target]
    if args.gpu:
        if not ok:
            print(f"bench.py --gpu needs a CUDA GPU with torch and Triton installed; found: {found}. "
                  "Nothing was measured.", file=sys.stderr)
            return 2
        for t in targets:
            print(gpu_table(t, args.repeat), flush=True)
        return 0
    if args.report is None:
        parser.error("give REPORT.md, or --gpu")
    parts = ["## attention_triton (avo-target-attention-triton)", ""]
    parts.append(cpu_section())
    if ok:
        parts += [gpu_table(t, args.repeat) for t in targets]
    else:
        parts += [f"GPU table not measured: {found}. Run `python bench.py --gpu` on a machine with an "
                  "NVIDIA GPU.", ""]
    with args.report.open("a") as fh:
        fh.write("\n".join(parts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

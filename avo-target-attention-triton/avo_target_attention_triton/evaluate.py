"""One evaluation: gate against float32, then interleaved timing against torch SDPA.

Runs inside avo's trusted evaluator child. The candidate only ever runs in its own
sandboxed worker (:mod:`avo_target_attention_triton.box`); the baseline runs in a second
worker of the same kind, and the float32 reference here, so the candidate shares no
process, CUDA context or buffer with either.
"""

from __future__ import annotations

import platform
import random
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
from importlib import resources
from pathlib import Path
from typing import Any

from avo.contract import failed
from avo.errors import AvoError
from avo.eval_inputs import derived_seed
from avo.models import EvalOptions, EvalResult

from avo_target_attention_triton.box import WorkerFailure, WorkerProcess
from avo_target_attention_triton.configs import ATOL, RTOL, Config, D, Plan, Problem, Shape, plan
from avo_target_attention_triton.reference import GateFailure, attention_f32, compare, rows_f32

ENTRY = "attention.py"
INSTALL = "pip install './avo-target-attention-triton[gpu]'  (torch 2.13 and Triton 3.9)"
# A forged timing: the candidate's reported GPU time must explain the evaluator's own wall
# clock of the same call as well as the baseline's does, within this slack.
WALL_SLACK_S = 250e-6
WALL_SLACK_REL = 0.10
# The baseline may run this much slower beside the candidate's live process than alone.
BASELINE_DRIFT = 0.15


_T0 = time.monotonic()


def log(msg: str) -> None:
    """Progress goes to stderr, which avo keeps in the evaluation log."""
    print(f"[attention_triton {time.monotonic() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def baseline_file(name: str) -> Path:
    """The shipped module of one baseline (same contract as a candidate's attention.py)."""
    return Path(str(resources.files("avo_target_attention_triton").joinpath(f"baselines/{name}.py")))


class Device:
    """What this evaluator found: a CUDA GPU, or only the CPU (Triton's interpreter)."""

    def __init__(self) -> None:
        import torch

        self.torch_version = torch.__version__
        self.cuda = bool(torch.cuda.is_available())
        self.kind = "cuda" if self.cuda else "cpu"
        if self.cuda:
            props = torch.cuda.get_device_properties(0)
            major, minor = torch.cuda.get_device_capability(0)
            self.name = f"{props.name} (sm_{major}{minor}, {props.multi_processor_count} SMs, " \
                        f"{props.total_memory / 2**30:.0f} GiB)"
            torch.backends.cuda.matmul.allow_tf32 = False  # the reference is float32, not TF32
        else:
            build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
            self.name = f"no CUDA device (torch {torch.__version__}, {build}; CPU {platform.machine()})"

    def reference_scale(self) -> str:
        return "sdpa_flash" if self.cuda else "sdpa_cpu"


def _tensor(data: bytes, shape: tuple[int, ...], device: str) -> Any:
    import torch

    return torch.frombuffer(bytearray(data), dtype=torch.bfloat16).reshape(shape).to(device)


def _request(shape: Shape, seed: int) -> dict[str, Any]:
    return {"seed": seed, "batch": shape.batch, "heads_q": shape.heads_q, "heads_kv": shape.heads_kv,
            "n": shape.n, "d": D, "causal": shape.causal, "scale": shape.softmax_scale()}


def _inputs(req: dict[str, Any], device: str) -> tuple[Any, Any, Any]:
    from avo_target_attention_triton.worker import make_inputs

    return make_inputs(req["seed"], req["batch"], req["heads_q"], req["heads_kv"], req["n"], D, device)


def _out_bytes(shape: Shape) -> int:
    return shape.batch * shape.heads_q * shape.n * D * 2


# -- the gate ------------------------------------------------------------------------------


def run_gate(cand: WorkerProcess, p: Plan, dev: Device, options: EvalOptions, workdir: Path) -> tuple[float, str]:
    """Every gate shape once against float32; returns the worst error ratio and where."""
    worst, where = 0.0, ""
    for idx, shape in enumerate(p.gate, 1):
        what = f"gate shape {idx}/{len(p.gate)} ({shape.label()})"
        req = _request(shape, derived_seed(options, workdir, f"gate:{idx}"))
        header, data, _ = cand.request({"op": "run", **req}, p.call_timeout, f"running {what}",
                                       nbytes=_out_bytes(shape))
        if header.get("inputs_modified"):
            raise GateFailure(f"{what}: the kernel modified its input(s) {', '.join(header['inputs_modified'])}")
        assert data is not None
        q, k, v = _inputs(req, dev.kind)
        got = _tensor(data, tuple(q.shape), dev.kind)
        r = compare(got, attention_f32(q, k, v, shape.causal, shape.softmax_scale()), what)
        if r >= worst:
            worst, where = r, shape.label()
    return worst, where


# -- timing --------------------------------------------------------------------------------


def _check_timed(cand: WorkerProcess, cfg: Config, req: dict[str, Any], full: bool, rng: random.Random,
                 p: Plan, dev: Device, what: str) -> None:
    """The output of one timed call: rows chosen after the call (or all of it) against float32."""
    shape = cfg.shape()
    q = k = v = None
    if full:
        _, data, _ = cand.request({"op": "rows", "full": True}, p.call_timeout, f"reading {what}",
                                  nbytes=_out_bytes(shape))
        assert data is not None
        q, k, v = _inputs(req, dev.kind)
        got = _tensor(data, tuple(q.shape), dev.kind)
        want = attention_f32(q, k, v, cfg.causal, req["scale"])
    else:
        picks = [(0, 0, 0), (cfg.batch - 1, cfg.heads_q - 1, cfg.n - 1)]
        picks += [(rng.randrange(cfg.batch), rng.randrange(cfg.heads_q), rng.randrange(cfg.n))
                  for _ in range(p.spot_rows)]
        _, data, _ = cand.request({"op": "rows", "picks": picks}, p.call_timeout, f"reading {what}",
                                  nbytes=len(picks) * D * 2)
        assert data is not None
        q, k, v = _inputs(req, dev.kind)
        got = _tensor(data, (len(picks), D), dev.kind)
        want = rows_f32(q, k, v, cfg.causal, req["scale"], picks)
    try:
        compare(got, want, what)
    except GateFailure as exc:
        raise GateFailure(f"{exc}. Every timed call gets fresh inputs and its output is checked; a kernel "
                          "that caches, reuses or skips work on timed calls fails here") from None


def _solo(base: WorkerProcess, cfg: Config, p: Plan, options: EvalOptions, workdir: Path | None) -> float:
    """Median baseline time for ``cfg`` before the candidate's process exists."""
    times = []
    for r in range(p.warmup + max(3, p.pairs // 3)):
        req = _request(cfg.shape(), derived_seed(options, workdir, f"solo:{cfg.key}:{r}"))
        header, _, _ = base.request({"op": "time", **req}, p.call_timeout, f"timing the baseline on {cfg.key}")
        if r >= p.warmup:
            times.append(float(header["t"]))
    return statistics.median(times)


Measured = tuple[dict[str, float], dict[str, float], list[str]]


def measure(cand: WorkerProcess, base: WorkerProcess, p: Plan, dev: Device, options: EvalOptions,
            workdir: Path | None, check: bool, solo: dict[str, float] | None) -> Measured:
    """Interleaved pairs per config; returns (speedups, spreads, table lines)."""
    metrics: dict[str, float] = {}
    spread: dict[str, float] = {}
    lines = [f"{'config':<16}{'speedup':>8}{'cand ms':>10}{'base ms':>10}{'cand TFLOPS':>12}{'base TFLOPS':>12}"
             f"{'pairs':>6}{'iqr':>7}"]
    for cfg in p.configs:
        rng = random.Random(derived_seed(options, workdir, f"picks:{cfg.key}"))
        full_at = set(rng.sample(range(p.pairs), min(p.full_checks, p.pairs)))
        t_c: list[float] = []
        t_b: list[float] = []
        gap_c: list[float] = []
        gap_b: list[float] = []
        for r in range(p.warmup + p.pairs):
            req = _request(cfg.shape(), derived_seed(options, workdir, f"time:{cfg.key}:{r}"))
            what = f"timed call {r + 1} of {cfg.key}"
            order = (cand, base) if r % 2 == 0 else (base, cand)  # neither side always runs second
            got: dict[str, tuple[float, float]] = {}
            for w in order:
                header, _, wall = w.request({"op": "time", **req}, p.call_timeout, what)
                t = header.get("t")
                if not isinstance(t, float) or not t > 0:
                    raise WorkerFailure(f"the {w.role} worker reported a time of {t!r} for {what}")
                got[w.role] = (t, wall)
            if check:
                _check_timed(cand, cfg, req, r - p.warmup in full_at, rng, p, dev, what)
            if r >= p.warmup:
                t_c.append(got["candidate"][0])
                t_b.append(got["baseline"][0])
                gap_c.append(got["candidate"][1] - got["candidate"][0])
                gap_b.append(got["baseline"][1] - got["baseline"][0])
        ratios = [b / c for b, c in zip(t_b, t_c, strict=True)]
        med_c, med_b = statistics.median(t_c), statistics.median(t_b)
        if dev.cuda:
            allowed = statistics.median(gap_b) + WALL_SLACK_S + WALL_SLACK_REL * med_c
            if statistics.median(gap_c) > allowed:
                raise GateFailure(
                    f"{cfg.key}: the candidate's process reported {med_c * 1e3:.3f} ms per call, but each call took "
                    f"{statistics.median(gap_c) * 1e3:.3f} ms more on the evaluator's clock (the baseline's: "
                    f"{statistics.median(gap_b) * 1e3:.3f} ms): work outside the timed region, or a forged timer")
            if solo is not None and med_b > solo[cfg.key] * (1 + BASELINE_DRIFT) + 20e-6:
                raise GateFailure(
                    f"{cfg.key}: the baseline took {med_b * 1e3:.3f} ms beside the candidate's process but "
                    f"{solo[cfg.key] * 1e3:.3f} ms alone: the candidate keeps the GPU busy between its calls")
        metrics[cfg.key] = statistics.median(ratios)
        spread[cfg.key] = _relative_iqr(ratios)
        lines.append(f"{cfg.key:<16}{metrics[cfg.key]:>8.3f}{med_c * 1e3:>10.3f}{med_b * 1e3:>10.3f}"
                     f"{cfg.flops() / med_c * 1e-12:>12.1f}{cfg.flops() / med_b * 1e-12:>12.1f}"
                     f"{len(ratios):>6}{spread[cfg.key]:>7.1%}")
        log(lines[-1])
    return metrics, spread, lines


def _relative_iqr(values: list[float]) -> float:
    if len(values) < 4:
        return (max(values) - min(values)) / statistics.median(values)
    q = statistics.quantiles(values, n=4)
    return (q[2] - q[0]) / q[1]


# -- the whole evaluation ------------------------------------------------------------------


def _device_or_error(quick: bool) -> tuple[Device | None, str | None]:
    try:
        import torch  # noqa: F401
        import triton  # noqa: F401
    except ImportError as exc:
        return None, f"this target needs torch and Triton, which are not installed here ({exc}): {INSTALL}"
    dev = Device()
    if not dev.cuda and not quick:
        return None, (f"a full evaluation of this target needs a CUDA GPU; found {dev.name}. Without one only "
                      "the quick mode runs (the gate under Triton's interpreter, tiny shapes, no real timing): "
                      "avo start --quick, or run on a machine with an NVIDIA GPU (avo doctor shows what it sees)")
    return dev, None


def _notes(dev: Device, info: dict[str, Any], p: Plan, worst: float, where: str, lines: list[str],
           baseline: str, seconds: float) -> str:
    mode = "CUDA events, L2 flushed before every call" if dev.cuda else \
        "Triton interpreter on the CPU: wall-clock times, NOT a GPU performance figure"
    return "\n".join([
        f"device: {dev.name}; torch {info.get('torch')}, Triton {info.get('triton')}; {mode}",
        f"gate: {len(p.gate)} shapes against float32, worst error {worst:.2f} of the tolerance "
        f"{ATOL:g} + {RTOL:g}*|ref| (at {where})",
        f"score per config: median over {p.pairs} interleaved pairs of t_{baseline} / t_candidate, fresh inputs "
        f"per call, {p.spot_rows + 2} rows of every timed output and {p.full_checks} whole output(s) per config "
        "checked; TFLOPS count QK^T and PV, halved for causal",
        *lines,
        f"evaluation took {seconds:.1f} s",
    ])


def evaluate(problem: Problem, workdir: Path, options: EvalOptions) -> EvalResult:
    """Gate, then time against the reference baseline. Never raises for a bad candidate."""
    started = time.monotonic()
    entry = workdir / ENTRY
    if not entry.is_file():
        return failed(f"no {ENTRY} in the work dir: the candidate must define attention(q, k, v, causal, scale)")
    dev, why = _device_or_error(options.quick)
    if dev is None:
        return failed(why or "no device")
    p = plan(problem, options.quick, dev.cuda)
    log(f"{problem.name}: {dev.name}; {len(p.gate)} gate shapes, {len(p.configs)} configs")
    baseline = dev.reference_scale()
    with tempfile.TemporaryDirectory(prefix="avo-attention-triton-") as tmp, ExitStack() as stack:
        try:
            base = stack.enter_context(WorkerProcess(Path(tmp) / "base", baseline_file(baseline), dev.kind,
                                                     "baseline"))
            solo = None
            if dev.cuda:  # the baseline alone first: the candidate's process must not exist yet
                base.info  # noqa: B018 - waits until it is ready
                solo = {cfg.key: _solo(base, cfg, p, options, workdir) for cfg in p.configs}
            cand = stack.enter_context(WorkerProcess(Path(tmp) / "cand", entry, dev.kind, "candidate"))
            base.info  # noqa: B018 - on the CPU both workers start side by side
            worst, where = run_gate(cand, p, dev, options, workdir)
            log(f"gate passed: worst error {worst:.2f} of the tolerance (at {where})")
            metrics, spread, lines = measure(cand, base, p, dev, options, workdir, True, solo)
            info = cand.info
        except GateFailure as exc:
            log(f"gate failed: {exc}")
            return failed(str(exc))
        except (WorkerFailure, AvoError) as exc:  # AvoError: the run's sandbox cannot start here
            log(f"worker failed: {exc}")
            return failed(str(exc))
    notes = _notes(dev, info, p, worst, where, lines, baseline, time.monotonic() - started)
    return EvalResult(correct=True, metrics=metrics, spread=spread, notes=notes)


BASELINES_CUDA = ("sdpa_flash", "sdpa_cudnn", "fa3", "fa4")


def baselines(problem: Problem, options: EvalOptions) -> dict[str, EvalResult]:
    """Each available baseline scored like a candidate (speedup over the reference baseline)."""
    dev, why = _device_or_error(options.quick)
    if dev is None:
        raise RuntimeError(why)
    p = plan(problem, options.quick, dev.cuda)
    names = BASELINES_CUDA if dev.cuda else ("sdpa_cpu",)
    ref = dev.reference_scale()
    out: dict[str, EvalResult] = {}
    with tempfile.TemporaryDirectory(prefix="avo-attention-triton-base-") as tmp, \
            WorkerProcess(Path(tmp) / "base", baseline_file(ref), dev.kind, "baseline") as base:
        for name in names:
            started = time.monotonic()
            try:
                with WorkerProcess(Path(tmp) / name, baseline_file(name), dev.kind, "candidate") as cand:
                    metrics, spread, lines = measure(cand, base, p, dev, options, None, True, None)
                    info = cand.info
            except (WorkerFailure, GateFailure) as exc:
                # A baseline this machine lacks (no cuDNN attention, FlashAttention 3/4 not
                # installed) is left out, and the log says why.
                log(f"baseline {name} not measured: {exc}")
                continue
            notes = _notes(dev, info, p, 0.0, "not gated; timed outputs checked", lines, ref,
                           time.monotonic() - started)
            out[name] = EvalResult(correct=True, metrics=metrics, spread=spread, notes=notes)
    return out

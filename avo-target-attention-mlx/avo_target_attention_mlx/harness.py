"""The evaluation: gate every call's output, time the candidate interleaved with MLX's SDPA.

Order matters for honesty. The reference function objects (SDPA, ``mx.eval``, the clock)
and every reference output are captured *before* the candidate module is imported, so a
candidate that monkeypatches MLX, NumPy or ``time`` afterwards cannot change what it is
compared with or how it is timed. What remains possible in-process is listed in README.md.
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import statistics
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from avo.models import EvalResult
from avo_target_attention_mlx.configs import (
    ERROR_BUDGET,
    FULL_REPS,
    QUICK_REPS,
    DecodeConfig,
    configs_for,
)
from avo_target_attention_mlx.reference import ConfigInputs, make_inputs

ENTRYPOINT = "attention.py"
FUNCTION = "decode_attention"
WARMUP_CALLS = 1  # untimed but checked, after the gate call


class CandidateFailure(Exception):
    """A candidate broke the contract; the message names the config and the problem."""


@dataclass
class Kernel:
    """Something timed against SDPA: ``prepare`` (untimed) turns MLX inputs into its own
    arguments, ``call`` is timed, ``sync`` (timed) waits for the result."""

    label: str
    call: Callable[..., Any]
    prepare: Callable[[Any, Any, Any], tuple[Any, ...]] | None = None
    sync: Callable[[Any], None] | None = None


@dataclass
class ConfigScore:
    config: DecodeConfig
    speedup: float
    spread: float
    worst_error: float
    cand_s: float
    ref_s: float
    ref_ratios: list[float] = field(default_factory=list)


def pick_dtype() -> tuple[str, str]:
    """(dtype name, device name): half precision where MLX runs on a GPU, float32 on CPU,
    where MLX's float16 is several times slower than float32. ``AVO_MLX_DTYPE`` overrides."""
    import mlx.core as mx

    device = mx.default_device()
    on_gpu = device.type == mx.gpu
    backend = "cpu"
    if on_gpu:
        backend = "metal" if mx.metal.is_available() else "cuda"
    dtype = os.environ.get("AVO_MLX_DTYPE") or ("float16" if on_gpu else "float32")
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"AVO_MLX_DTYPE must be float32, float16 or bfloat16, got {dtype!r}")
    return dtype, f"{device} ({backend}, mlx {getattr(mx, '__version__', '?')})"


def stream_bandwidth() -> float:
    """Streaming copy bandwidth in GB/s (bytes read + written), best of 7, NumPy."""
    import numpy as np

    src = np.ones(8 << 20, dtype=np.float64)  # 64 MiB, past the 32 MiB L3
    dst = np.empty_like(src)
    dst.fill(0.0)  # fault the pages in first: a first touch is not bandwidth
    best = math.inf
    for _ in range(7):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return 2 * src.nbytes / best / 1e9


def load_candidate(workdir: Path) -> Callable[..., Any]:
    """Import ``attention.py`` from ``workdir`` and return its ``decode_attention``."""
    path = workdir / ENTRYPOINT
    if not path.is_file():
        raise CandidateFailure(f"{ENTRYPOINT} not found in the candidate directory {workdir}")
    sys.path.insert(0, str(workdir))  # so the candidate may import its own helper modules
    spec = importlib.util.spec_from_file_location("avo_candidate_attention", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise CandidateFailure(f"{ENTRYPOINT} raised at import: {type(exc).__name__}: {exc}\n"
                               f"{_tail(traceback.format_exc())}") from None
    fn = getattr(module, FUNCTION, None)
    if not callable(fn):
        raise CandidateFailure(f"{ENTRYPOINT} defines no function {FUNCTION}(q, k, v, scale)")
    return fn  # type: ignore[no-any-return]


def _tail(text: str, lines: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


class Suite:
    """All configs' inputs and references, built before the candidate exists."""

    def __init__(self, quick: bool, seed: int | None = None) -> None:
        import mlx.core as mx
        import numpy as np

        # Captured before any candidate import: what we compare with and time with.
        self._sdpa = mx.fast.scaled_dot_product_attention
        self._eval = mx.eval
        self._clock = time.perf_counter
        self._asarray = np.asarray
        # Bound now: a lambda looking up ``np.max`` at call time would see a patched one.
        np_max, np_abs, np_all, np_isfinite = np.max, np.abs, np.all, np.isfinite
        self._abs_max = lambda a: float(np_max(np_abs(a)))
        self._all_finite = lambda a: bool(np_all(np_isfinite(a)))
        self._mx = mx
        self._mx_array, self._f32 = mx.array, mx.float32
        self._setprofile, self._settrace = sys.setprofile, sys.settrace
        self._active_threads = threading.active_count
        self._threads_before = threading.active_count()
        # Who goes first in a pair is drawn from OS entropy, not a pattern a candidate's
        # background thread could predict and time itself against.
        self._order = random.Random(int.from_bytes(os.urandom(8), "little"))
        self.quick = quick
        self.reps = QUICK_REPS if quick else FULL_REPS
        self.seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
        self.dtype, self.device = pick_dtype()
        self.mx_dtype = getattr(mx, self.dtype)
        self.stream_gbs = stream_bandwidth()
        n_calls = 1 + WARMUP_CALLS + self.reps
        self.inputs: list[ConfigInputs] = [
            make_inputs(c, n_calls, self.dtype, self.seed + i) for i, c in enumerate(configs_for(quick))
        ]
        self.k_base = [mx.array(ci.k_base).astype(self.mx_dtype) for ci in self.inputs]
        self.v_base = [mx.array(ci.v_base).astype(self.mx_dtype) for ci in self.inputs]
        self._eval(self.k_base, self.v_base)

    def sdpa_kernel(self) -> Kernel:
        """MLX's own fused kernel (the captured function object)."""
        sdpa = self._sdpa
        return Kernel("mx.fast.scaled_dot_product_attention", lambda q, k, v, s: sdpa(q, k, v, scale=s))

    # -- one call ------------------------------------------------------------------------

    def _call_arrays(self, idx: int, call: int) -> tuple[Any, Any, Any]:
        array, ci = self._mx_array, self.inputs[idx]
        c = ci.calls[call]
        q = array(c.q).astype(self.mx_dtype)
        k = self.k_base[idx] * array(c.k_factor, dtype=self.mx_dtype)
        v = self.v_base[idx] * array(c.v_factor, dtype=self.mx_dtype)
        self._eval(q, k, v)
        return q, k, v

    def _run(self, kernel: Kernel, args: tuple[Any, ...], scale: float, name: str) -> tuple[Any, float]:
        # A profile or trace hook installed by the candidate would run inside the
        # reference's timed region; clear both before every timed call.
        self._setprofile(None)
        self._settrace(None)
        try:
            t0 = self._clock()
            out = kernel.call(*args, scale)
            if kernel.sync is not None:
                kernel.sync(out)
            elif isinstance(out, self._mx_array):
                self._eval(out)
            t1 = self._clock()
        except CandidateFailure:
            raise
        except Exception as exc:
            raise CandidateFailure(f"config {name}: {kernel.label} raised {type(exc).__name__}: {exc}\n"
                                   f"{_tail(traceback.format_exc())}") from None
        return out, t1 - t0

    def _error(self, kernel: Kernel, out: Any, idx: int, call: int, what: str) -> float:
        """Relative error of one output; raises CandidateFailure past the budget."""
        ci = self.inputs[idx]
        c, cfg = ci.calls[call], ci.config
        name = cfg.name
        expect = (cfg.batch, cfg.q_heads, 1, cfg.head_dim)
        if kernel.sync is None and not isinstance(out, self._mx_array):
            raise CandidateFailure(f"config {name}: {kernel.label} returned {type(out).__name__}, "
                                   "expected an mlx.core.array")
        if tuple(out.shape) != expect:
            raise CandidateFailure(f"config {name}: {kernel.label} returned shape {tuple(out.shape)}, "
                                   f"expected {expect} (q is [B, Hq, 1, D])")
        if isinstance(out, self._mx_array):
            out = out.astype(self._f32)
        got = self._asarray(out, dtype="float64")
        if not self._all_finite(got):
            raise CandidateFailure(f"config {name}: {kernel.label} returned NaN or inf ({what})")
        err = self._abs_max(got - c.reference) / c.v_max
        if not err <= ERROR_BUDGET:
            raise CandidateFailure(
                f"config {name} ({cfg.describe()}): {what} error {err:.3g} is over the budget "
                f"{ERROR_BUDGET:g} (max |out - ref| / max |V|, {err / ERROR_BUDGET:.0f}x the budget). "
                "Check the scale, the GQA mapping (query head h reads KV head h // (Hq/Hkv)) "
                "and how much softmax mass an approximation drops."
            )
        return err

    # -- the whole suite -----------------------------------------------------------------

    def measure(self, kernel: Kernel) -> list[ConfigScore]:
        """Gate, warm up, then time ``kernel`` against SDPA in interleaved pairs per config."""
        ref = self.sdpa_kernel()
        scores = []
        for idx, ci in enumerate(self.inputs):
            name = ci.config.name
            worst = 0.0
            # Gate call and warm-up: untimed, checked.
            for call in range(1 + WARMUP_CALLS):
                q, k, v = self._call_arrays(idx, call)
                args = kernel.prepare(q, k, v) if kernel.prepare else (q, k, v)
                out, _ = self._run(kernel, args, ci.scale, name)
                what = "the gate call's" if call == 0 else "the warm-up call's"
                worst = max(worst, self._error(kernel, out, idx, call, what))
                self._run(ref, (q, k, v), ci.scale, name)
            t_ref: list[float] = []
            t_cand: list[float] = []
            for rep in range(self.reps):
                call = 1 + WARMUP_CALLS + rep
                q, k, v = self._call_arrays(idx, call)
                args = kernel.prepare(q, k, v) if kernel.prepare else (q, k, v)
                # Random order: the second runner may find K/V still in cache, and a fixed
                # pattern could be gamed.
                order = (ref, kernel) if self._order.random() < 0.5 else (kernel, ref)
                outs: dict[str, Any] = {}
                for kern in order:
                    out, dt = self._run(kern, (q, k, v) if kern is ref else args, ci.scale, name)
                    outs[kern.label] = out
                    (t_ref if kern is ref else t_cand).append(dt)
                worst = max(worst, self._error(kernel, outs[kernel.label], idx, call,
                                               f"timed call {rep + 1}'s (timed outputs are checked too)"))
                try:
                    self._error(ref, outs[ref.label], idx, call, "the reference")
                except CandidateFailure as exc:
                    raise CandidateFailure(f"MLX's SDPA itself now fails the check ({exc}); "
                                           "something in this process altered MLX") from None
            if self._active_threads() > self._threads_before:
                raise CandidateFailure(
                    f"config {name}: {kernel.label} left Python threads running "
                    f"({self._active_threads() - self._threads_before} more than before it was "
                    "imported); background work would run inside the reference's timing")
            ratios = [r / c for r, c in zip(t_ref, t_cand, strict=True)]
            med = statistics.median(ratios)
            mad = statistics.median(abs(r - med) for r in ratios)
            # Median of per-pair ratios: the two calls of a pair run back to back, so a slow
            # spell of a shared machine cancels within the pair.
            scores.append(ConfigScore(
                config=ci.config, speedup=med,
                spread=1.4826 * mad / med, worst_error=worst, cand_s=statistics.median(t_cand),
                ref_s=statistics.median(t_ref), ref_ratios=ratios,
            ))
        return scores

    def result(self, kernel: Kernel, scores: list[ConfigScore]) -> EvalResult:
        """The evaluator contract with notes on the error budget and the roofline."""
        itemsize = {"float32": 4, "float16": 2, "bfloat16": 2}[self.dtype]
        lines = [
            f"device {self.device}, dtype {self.dtype}, {self.reps} timed pairs per config "
            f"(interleaved with mx.fast.scaled_dot_product_attention, mx.eval around each call), "
            f"inputs seed {self.seed}.",
            f"error budget {ERROR_BUDGET:g} on max |out - ref| / max |V| against a float64 NumPy "
            "reference, checked on every call including the timed ones.",
            f"streaming copy bandwidth (NumPy, read+write) {self.stream_gbs:.1f} GB/s; "
            "GB/s below counts K and V bytes read once.",
        ]
        for s in scores:
            nbytes = s.config.kv_elements() * itemsize
            cand_gbs, ref_gbs = nbytes / s.cand_s / 1e9, nbytes / s.ref_s / 1e9
            lines.append(
                f"  {s.config.name} [{s.config.describe()}]: {s.speedup:.3f}x SDPA (±{s.spread:.1%}), "
                f"error {s.worst_error:.2e} = {s.worst_error / ERROR_BUDGET:.2%} of budget, "
                f"{kernel.label} {s.cand_s * 1e3:.2f} ms = {cand_gbs:.2f} GB/s "
                f"({cand_gbs / self.stream_gbs:.0%} of streaming), SDPA {s.ref_s * 1e3:.2f} ms = {ref_gbs:.2f} GB/s"
            )
        return EvalResult(
            correct=True,
            metrics={s.config.name: s.speedup for s in scores},
            spread={s.config.name: s.spread for s in scores},
            notes="\n".join(lines),
        )


def evaluate_workdir(workdir: Path, quick: bool, seed: int | None = None) -> EvalResult:
    """Score the candidate in ``workdir``: a failed gate or a broken candidate gives
    ``correct=False`` with a message naming the config and the problem."""
    suite = Suite(quick, seed)  # references first, before any candidate code runs
    try:
        fn = load_candidate(workdir)
        kernel = Kernel(f"{ENTRYPOINT}:{FUNCTION}", fn)
        scores = suite.measure(kernel)
    except CandidateFailure as exc:
        return EvalResult(correct=False, metrics={}, error=str(exc),
                          notes=f"device {suite.device}, dtype {suite.dtype}")
    return suite.result(kernel, scores)

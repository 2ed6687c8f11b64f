"""What is measured: gate shapes, benchmark configurations, repetitions, tolerance, threads.

Kept free of heavy imports: the target spec and the README quote these numbers.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

D = 64
THREADS_ENV = "AVO_ATTENTION_C_THREADS"
CALL_TIMEOUT_ENV = "AVO_ATTENTION_C_CALL_TIMEOUT"

# Tolerance of the gate, elementwise: |out - out64| <= ATOL + RTOL * |out64|.
# Why these numbers: out is a convex combination of rows of v (entries ~N(0,1), |v| < ~5),
# so its scale is 1. Honest float32 kernels land far inside: NumPy float32 and the plain C
# seed (sequential sums over up to 2039 keys, libm expf) stay below ~3e-6 on every gate
# shape; a fast exp with relative error e moves out by at most ~2e (|v - out| < ~4 after
# weighting), so a good polynomial exp (e ~ 1e-6) passes with 50x margin and a
# 3-digit one (e ~ 1e-3) does not. The failures the gate exists for are orders above:
# a dropped tail key or row, a wrong mask, or a fast exp off by up to 2x give errors of
# 1e-2 to 1e0, and NaN/inf fail outright.
ATOL = 1e-4
RTOL = 1e-4


class Shape(BaseModel):
    """One gate shape."""

    model_config = ConfigDict(frozen=True)

    heads: int = Field(gt=0)
    n: int = Field(gt=0)
    causal: bool
    logit_scale: float = 1.0
    skewed: bool = Field(default=False, description="reference.skewed_inputs instead of normal q, k, v")

    def label(self) -> str:
        big = f", logits x{self.logit_scale:g}" if self.logit_scale != 1.0 else ""
        skew = ", skewed norms" if self.skewed else ""
        return f"heads={self.heads} n={self.n} {'causal' if self.causal else 'non-causal'}{big}{skew}"


def _s(heads: int, n: int, causal: bool, logit_scale: float = 1.0, skewed: bool = False) -> Shape:
    return Shape(heads=heads, n=n, causal=causal, logit_scale=logit_scale, skewed=skewed)


# Twenty shapes: 1, 2, 3, powers of two +-1, a large prime, both masks, more than one
# head, scaled logits (x5: row maxima of about 20-27 and scores down to about 43 below
# them, where a fast exp without a clamp underflows into garbage; not enough to overflow
# expf), and skewed norms (keys in a subspace, queries mostly orthogonal to it: |q| max|k|
# far above every logit, so a softmax that shifts by that bound instead of the row max
# runs its fallback; one key gives some rows a logit of 150, so a kernel without the max
# subtraction overflows). They follow the others so that shapes keep their numbers.
GATE_SHAPES: tuple[Shape, ...] = (
    _s(1, 1, False), _s(1, 1, True), _s(2, 2, True), _s(1, 3, False), _s(1, 3, True),
    _s(3, 7, False), _s(2, 15, True), _s(2, 17, False), _s(1, 31, True), _s(1, 33, False),
    _s(2, 63, True), _s(1, 65, False), _s(1, 127, True), _s(2, 129, False),
    _s(1, 255, False, 5.0), _s(1, 257, True, 5.0),
    _s(2, 97, False, skewed=True), _s(2, 251, True, skewed=True),
    _s(1, 1021, False), _s(1, 2039, True),
)
QUICK_GATE_MAX_N = 257  # quick mode keeps the 18 shapes up to here


class BenchConfig(BaseModel):
    """One score axis: a sequence length and a mask mode."""

    model_config = ConfigDict(frozen=True)

    heads: int
    n: int
    causal: bool

    @property
    def key(self) -> str:
        return f"n{self.n}_{'causal' if self.causal else 'noncausal'}"


class Plan(BaseModel):
    """Everything one evaluation does, full or quick."""

    gate: list[Shape]
    configs: list[BenchConfig]
    min_pairs: int
    max_pairs: int
    min_time: float = Field(description="seconds of timing pairs per config, at least")
    max_time: float = Field(description="stop adding pairs after this many seconds per config")
    rounds: int = Field(description="round-robin passes over the configs; the pair budget is split over them")
    spot_rows: int = Field(description="random rows checked per timed call (plus first and last)")
    call_timeout: float = Field(description="seconds one gate call may take before it counts as a hang")
    threads: int
    quick: bool = Field(False, description="quick mode: configs of microseconds, where the empty call subtracted "
                        "is most of a call, so no rate is held against the roofline")
    steady: float | None = Field(None, description="with more threads (wall clock), refuse to time when a config's "
                                 "median call exceeds this times its fastest tenth; None: never (quick mode's "
                                 "microsecond calls swing with every wake-up)")


def _positive(env: str, default: str, kind: type[int] | type[float]) -> float:
    raw = os.environ.get(env, default).strip() or default
    try:
        value = kind(raw)
    except ValueError:
        raise ValueError(f"{env} must be a positive number, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"{env} must be a positive number, got {raw!r}")
    return value


# A full evaluation with more threads per side (wall clock) whose config's reference or
# candidate calls took a median of more than this times their fastest tenth was timed on a
# contended machine, and its ratio measures the contention: measured 2026-12-02, NumPy's
# 2-thread calls at n256 took a median of 64.6 ms in one evaluation against ~3 ms in the next
# (an OpenBLAS thread waiting for the other vCPU), while a kernel that hands a late helper's
# work to its caller held up: speedups of 10.8 and 15.6 where the same tree measured 6.5 and
# 6.9, accepted as a 40 % gain.
STEADY_2T = 1.5


def threads_from_env() -> int:
    """Threads per side (candidate and BLAS), from ``AVO_ATTENTION_C_THREADS`` (default 1)."""
    return int(_positive(THREADS_ENV, "1", int))


def plan(quick: bool) -> Plan:
    """The full evaluation, or the quick one used by tests and demos."""
    threads = threads_from_env()
    override = os.environ.get(CALL_TIMEOUT_ENV)
    call_timeout = _positive(CALL_TIMEOUT_ENV, "0", float) if override else None
    if quick:
        return Plan(
            gate=[s for s in GATE_SHAPES if s.n <= QUICK_GATE_MAX_N],
            configs=[BenchConfig(heads=2, n=n, causal=c) for n in (32, 64, 96, 128) for c in (False, True)],
            min_pairs=3, max_pairs=20, min_time=0.02, max_time=1.0, rounds=1, spot_rows=6,
            call_timeout=call_timeout or 10.0,
            threads=threads,
            quick=True,
        )
    sizes = ((256, 8), (512, 4), (1024, 2), (2048, 1))  # heads: no call shorter than ~2 ms
    return Plan(
        gate=list(GATE_SHAPES),
        configs=[BenchConfig(heads=h, n=n, causal=c) for n, h in sizes for c in (False, True)],
        min_pairs=12, max_pairs=400, min_time=1.2, max_time=12.0, rounds=3, spot_rows=8,
        call_timeout=call_timeout or 30.0,
        threads=threads,
        steady=STEADY_2T,
    )

"""Inputs and references: the float64 truth for the gate, the float32 NumPy bar for the score.

Imported only inside the evaluator child and its sandbox worker (never by the CLI), so
NumPy is imported at module level here.
"""

from __future__ import annotations

import math

# Only evaluator processes import this module, never the CLI: a module-level import is fine.
import numpy as np  # noqa: TID253
from numpy.typing import NDArray  # noqa: TID253

F32 = NDArray[np.float32]
F64 = NDArray[np.float64]


def make_inputs(seed: int, heads: int, n: int, d: int, logit_scale: float = 1.0,
                skewed: bool = False) -> tuple[F32, F32, F32]:
    """Deterministic q, k, v (float32, contiguous [heads][n][d]): standard normal, or skewed.

    ``logit_scale`` multiplies q: at 5.0 the row maxima reach about 20-27 and scores lie up
    to about 43 below them, so a fast exp that does not clamp its argument underflows into
    garbage (expf itself does not overflow there: the skewed shapes' logits of 150 make a
    kernel that skips the max subtraction overflow). ``skewed`` draws :func:`skewed_inputs`.
    """
    rng = np.random.default_rng(seed)
    if skewed:
        return skewed_inputs(rng, heads, n, d)
    qkv = rng.standard_normal((3, heads, n, d), dtype=np.float32)
    if logit_scale != 1.0:
        qkv[0] *= np.float32(logit_scale)
    return qkv[0], qkv[1], qkv[2]


SKEW_RANK = 8  # the keys' subspace: coordinates 0..SKEW_RANK-1, plus the spike coordinate
SKEW_SPIKE = 150.0  # the spike key's logit in spiked rows: expf(150) overflows float32
SKEW_NORMS = (0.0, 3.5)  # log10 range of the norms of the rows' orthogonal parts of q


def skewed_inputs(rng: np.random.Generator, heads: int, n: int, d: int) -> tuple[F32, F32, F32]:
    """Legal inputs on which norm bounds of the logits lie far above the logits.

    Keys lie in the span of the first ``SKEW_RANK`` coordinates. Each query adds to a
    moderate part in that span (logits ~N(0, 0.7^2)) a part in the other coordinates,
    where every key is exactly 0, whose norm is log-spaced over the rows from 1 to ~3e3
    (shuffled): the logits stay moderate while the Cauchy-Schwarz bound |q| max|k| / sqrt(d)
    runs from about the row max to thousands above it. A softmax that shifts by such a
    bound instead of the row max sees every gap, from none through partial to total
    underflow of exp, so its fallback runs, on several rows of every block. The products
    in the other coordinates are exact zeros, so honest float32 kernels stay as accurate
    as on normal inputs whatever their summation order.

    In the last head one early key also has coordinate ``SKEW_RANK`` set, and about a
    quarter of the rows weight it so that this key's logit is ``SKEW_SPIKE``: one key
    dominates, so a fallback (or any path) without the max subtraction overflows exp;
    that key's norm, 32, is ~7x the other heads' max|k|, so a bound carried over from
    another head is ~130 too small and exp overflows under it too. v is standard normal.
    """
    r = SKEW_RANK
    if d < r + 2:
        raise ValueError(f"skewed inputs need d >= {r + 2}, got {d}")
    q = np.zeros((heads, n, d), dtype=np.float32)
    k = np.zeros((heads, n, d), dtype=np.float32)
    k[:, :, :r] = rng.standard_normal((heads, n, r), dtype=np.float32)
    q[:, :, :r] = 2.0 * rng.standard_normal((heads, n, r), dtype=np.float32)
    away = rng.standard_normal((heads, n, d - r - 1))
    away /= np.linalg.norm(away, axis=-1, keepdims=True)
    norms = np.logspace(*SKEW_NORMS, n)
    away *= np.stack([rng.permutation(norms) for _ in range(heads)])[..., None]
    q[:, :, r + 1:] = away
    spike_key = int(rng.integers(0, max(1, n // 2)))  # early: most causal rows see it too
    spike = 32.0
    k[-1, spike_key, r] = spike
    rows = rng.random(n) < 0.25
    q[-1, rows, r] = SKEW_SPIKE * math.sqrt(d) / spike
    v = rng.standard_normal((heads, n, d), dtype=np.float32)
    return q, k, v


def causal_bias(n: int, dtype: type = np.float32) -> NDArray[np.floating]:
    """Additive mask: 0 on and below the diagonal, -inf above (keys after the query)."""
    bias: NDArray[np.floating] = np.zeros((n, n), dtype=dtype)
    bias[np.triu_indices(n, k=1)] = -np.inf
    return bias


def attention_f64(q: F32, k: F32, v: F32, causal: bool) -> F64:
    """The truth: the same formula evaluated in float64."""
    q64, k64, v64 = (a.astype(np.float64) for a in (q, k, v))
    s = q64 @ k64.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
    if causal:
        s += causal_bias(q.shape[1], np.float64)
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    out: F64 = s @ v64
    return out


def rows_f64(q: F32, k: F32, v: F32, causal: bool, picks: list[tuple[int, int]]) -> F64:
    """Float64 reference for selected (head, row) pairs only: spot checks of timed calls."""
    d = q.shape[-1]
    out = np.empty((len(picks), d), dtype=np.float64)
    for idx, (h, i) in enumerate(picks):
        last = i + 1 if causal else q.shape[1]
        s = k[h, :last].astype(np.float64) @ q[h, i].astype(np.float64) / math.sqrt(d)
        p = np.exp(s - s.max())
        out[idx] = (p / p.sum()) @ v[h, :last].astype(np.float64)
    return out


class NumpyAttention:
    """The bar the candidate is scored against: plain NumPy/BLAS float32 attention.

    ``S = Q K^T`` (one sgemm per head, written into a reused buffer), ``*= scale``,
    additive causal mask, max-subtracted softmax in place, ``P V`` (sgemm) into ``out``.
    The score buffer and the masks are kept per shape, as careful NumPy code would: a
    fresh n x n array per call costs page faults and page zeroing in the kernel, which
    made the reference's time swing by tens of percent with other jobs' memory traffic.
    """

    def __init__(self) -> None:
        self._bias: dict[int, F32] = {}
        self._scores: dict[tuple[int, int], F32] = {}

    def __call__(self, q: F32, k: F32, v: F32, out: F32, causal: bool) -> None:
        heads, n, d = q.shape
        s = self._scores.get((heads, n))
        if s is None:
            self._scores.clear()  # one shape at a time: keep memory bounded
            s = self._scores[(heads, n)] = np.empty((heads, n, n), dtype=np.float32)
        np.matmul(q, k.transpose(0, 2, 1), out=s)
        s *= np.float32(1.0 / math.sqrt(d))
        if causal:
            bias = self._bias.get(n)
            if bias is None:
                self._bias.clear()
                bias = self._bias[n] = causal_bias(n).astype(np.float32)
            s += bias
        s -= s.max(axis=-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(axis=-1, keepdims=True)
        np.matmul(s, v, out=out)


def flops(heads: int, n: int, d: int, causal: bool) -> float:
    """Useful floating-point work: 2 matmuls of 2*n*n*d each, halved (with the diagonal) if causal."""
    pairs = n * (n + 1) / 2 if causal else n * n
    return 4.0 * heads * pairs * d

"""Inputs and the float64 NumPy reference, computed before any candidate code is imported.

Every call (gate, warm-up and each timed call) gets its own query and its own K/V scale
factors, so a candidate that caches results or K/V-derived data across calls returns a
wrong answer, and every one of those outputs is checked against its own reference.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from avo_target_attention_mlx.configs import LOGIT_STD, DecodeConfig

if TYPE_CHECKING:
    import numpy as np


@dataclass
class CallInputs:
    """What one call sees: a fresh query and factors applied to the shared K/V base."""

    q: np.ndarray  # [B, Hq, 1, D] float32
    k_factor: float
    v_factor: float
    reference: np.ndarray  # [B, Hq, 1, D] float64
    v_max: float  # max |V| of this call's values: the error metric's unit


@dataclass
class ConfigInputs:
    """The K/V base of one config and the inputs of all its calls."""

    config: DecodeConfig
    scale: float
    k_base: np.ndarray  # [B, Hkv, L, D] float32, already rounded to the evaluation dtype
    v_base: np.ndarray
    calls: list[CallInputs]


def attention_f64(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """Exact decode attention in float64: q [N, B, Hq, D] against k/v [B, Hkv, L, D].

    Query head h reads KV head h // (Hq / Hkv), the grouping MLX's SDPA uses.
    """
    import numpy as np

    n, b, hq, d = q.shape
    hkv = k.shape[1]
    g = hq // hkv
    # [B, Hkv, N*g, D]: all calls' queries of one KV head in one matmul, one pass over K.
    qg = q.reshape(n, b, hkv, g, d).transpose(1, 2, 0, 3, 4).reshape(b, hkv, n * g, d)
    logits = np.matmul(qg, np.swapaxes(k, -1, -2)) * scale
    logits -= logits.max(axis=-1, keepdims=True)
    np.exp(logits, out=logits)
    logits /= logits.sum(axis=-1, keepdims=True)
    out = np.matmul(logits, v)  # [B, Hkv, N*g, D]
    return out.reshape(b, hkv, n, g, d).transpose(2, 0, 1, 3, 4).reshape(n, b, hq, 1, d)


def rounded(x: np.ndarray, dtype: str) -> np.ndarray:
    """``x`` rounded to the evaluation dtype and back to float32 (bfloat16 by truncation of
    the low mantissa bits with round-to-nearest-even, as NumPy has no bfloat16)."""
    import numpy as np

    if dtype == "float32":
        return x
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float32)
    bits = x.astype(np.float32).view(np.uint32)
    bits = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return bits.view(np.float32)


def make_inputs(config: DecodeConfig, n_calls: int, dtype: str, seed: int) -> ConfigInputs:
    """Random K/V for ``config`` and ``n_calls`` fresh queries with their float64 references."""
    import numpy as np

    rng = np.random.default_rng(seed)
    c = config
    scale = c.head_dim ** -0.5
    shape = (c.batch, c.kv_heads, c.length, c.head_dim)
    k_base = rounded(rng.standard_normal(shape, dtype=np.float32), dtype)
    v_base = rounded(rng.standard_normal(shape, dtype=np.float32), dtype)
    # q ~ N(0, LOGIT_STD^2) makes scale * q.k ~ N(0, LOGIT_STD^2) for unit-variance keys.
    qs = rounded((rng.standard_normal((n_calls, c.batch, c.q_heads, c.head_dim)) * LOGIT_STD)
                 .astype(np.float32), dtype)
    k_factors = rng.uniform(0.8, 1.25, n_calls)
    v_factors = rng.uniform(0.5, 2.0, n_calls) * rng.choice([-1.0, 1.0], n_calls)
    # The factor on K scales the logits, so fold it into q for the reference; V's factor
    # scales the output. Candidates get k_base * kf and v_base * vf in the evaluation dtype,
    # whose extra rounding is far inside the budget.
    q64 = qs.astype(np.float64) * k_factors[:, None, None, None]
    ref = attention_f64(q64, k_base.astype(np.float64), v_base.astype(np.float64), scale)
    ref *= v_factors[:, None, None, None, None]
    v_abs = float(np.abs(v_base).max())
    calls = [
        CallInputs(q=qs[i][:, :, None, :], k_factor=float(k_factors[i]), v_factor=float(v_factors[i]),
                   reference=ref[i], v_max=v_abs * abs(float(v_factors[i])))
        for i in range(n_calls)
    ]
    return ConfigInputs(config=c, scale=scale, k_base=k_base, v_base=v_base, calls=calls)

"""Baseline: FlashAttention 4 (CuTe DSL, Hopper/Blackwell), when ``flash_attn.cute`` is importable.

Same layout handling as fa3.py.
"""

from flash_attn.cute.interface import flash_attn_func


def attention(q, k, v, causal, scale):  # type: ignore[no-untyped-def]
    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scale,
                          causal=causal)
    if isinstance(out, tuple):
        out = out[0]
    return out.transpose(1, 2)

"""Seed x_0: decode attention as a plain composition of MLX ops. Correct, and slow.

decode_attention(q, k, v, scale):
  q     [B, Hq, 1, D]   one new query token per head
  k, v  [B, Hkv, L, D]  the KV cache; Hq is a multiple of Hkv (GQA), query head h reads
                         KV head h // (Hq // Hkv)
  scale float           usually D ** -0.5
returns [B, Hq, 1, D]

This version copies every KV head once per query head it serves (mx.repeat), so GQA reads
and writes the cache Hq/Hkv times over, and it runs the softmax in three separate passes.
"""

import mlx.core as mx


def decode_attention(q: mx.array, k: mx.array, v: mx.array, scale: float) -> mx.array:
    group = q.shape[1] // k.shape[1]
    if group > 1:
        k = mx.repeat(k, group, axis=1)
        v = mx.repeat(v, group, axis=1)
    logits = (q.astype(mx.float32) @ k.astype(mx.float32).swapaxes(-1, -2)) * scale  # [B, Hq, 1, L]
    logits = logits - logits.max(axis=-1, keepdims=True)
    weights = mx.exp(logits)
    weights = weights / weights.sum(axis=-1, keepdims=True)
    return (weights @ v.astype(mx.float32)).astype(q.dtype)

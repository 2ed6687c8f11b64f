"""The reference: MLX's own fused kernel (run in its own sandboxed worker, like a candidate)."""

import mlx.core as mx


def decode_attention(q, k, v, scale):
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)

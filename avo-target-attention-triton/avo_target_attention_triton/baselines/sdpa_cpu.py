"""Baseline without a GPU: torch SDPA on the CPU (whatever backend it picks). Quick mode only.

Its times are CPU times of a real kernel against an interpreted Triton kernel: they show
the pipeline works, not how fast anything is.
"""

import torch.nn.functional as F


def attention(q, k, v, causal, scale):  # type: ignore[no-untyped-def]
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                          enable_gqa=q.shape[1] != k.shape[1])

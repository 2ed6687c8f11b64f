"""Baseline: torch SDPA restricted to its FlashAttention backend (the score's denominator on a GPU).

Same contract as a candidate's attention.py; runs in its own sandboxed worker.
"""

import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKEND = SDPBackend.FLASH_ATTENTION


def attention(q, k, v, causal, scale):  # type: ignore[no-untyped-def]
    with sdpa_kernel(BACKEND):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                              enable_gqa=q.shape[1] != k.shape[1])

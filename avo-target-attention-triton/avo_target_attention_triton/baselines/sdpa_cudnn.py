"""Baseline: torch SDPA restricted to its cuDNN backend (where this torch and GPU have it).

A GPU or torch without cuDNN attention raises at its first call, and the baseline is
listed as not measured. Same contract as a candidate's attention.py.
"""

import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKEND = SDPBackend.CUDNN_ATTENTION


def attention(q, k, v, causal, scale):  # type: ignore[no-untyped-def]
    with sdpa_kernel(BACKEND):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
                                              enable_gqa=q.shape[1] != k.shape[1])

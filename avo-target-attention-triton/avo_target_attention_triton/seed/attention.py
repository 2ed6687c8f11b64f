"""Forward attention in Triton: the seed. Plain FlashAttention-2 style, correct, unoptimised.

Contract (fixed; the evaluator calls exactly this):
    attention(q, k, v, causal, scale) -> out
    q: (batch, heads_q, n, 128) bfloat16, contiguous, on the GPU
    k, v: (batch, heads_kv, n, 128) bfloat16; heads_q is a multiple of heads_kv (GQA:
        query head h reads KV head h // (heads_q // heads_kv))
    causal: query i sees keys 0..i; scale: the softmax scale (usually 1/sqrt(128))
    out: (batch, heads_q, n, 128) bfloat16, softmax(scale * q k^T) v

One program per (query block, batch*head); it walks every key block, masking the tail
and (when causal) the future with -inf, with the online softmax in float32.

Without a GPU the evaluator runs this under Triton's interpreter (TRITON_INTERPRET=1),
whose tl.dot gives garbage for bfloat16 operands (Triton 3.9, measured); UPCAST makes
the interpreted kernel multiply in float32 and costs nothing on the GPU, where it is off.
"""

import os

import torch
import triton
import triton.language as tl


@triton.jit
def _attn_fwd(Q, K, V, O, sm_scale,  # noqa: E741 - the paper's names
              stride_qb, stride_qh, stride_qm,
              stride_kb, stride_kh, stride_kn,
              stride_vb, stride_vh, stride_vn,
              stride_ob, stride_oh, stride_om,
              HEADS_Q, N,
              GROUP: tl.constexpr, CAUSAL: tl.constexpr, UPCAST: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HEAD_DIM: tl.constexpr):
    start_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // HEADS_Q
    h = bh % HEADS_Q
    hk = h // GROUP
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ptrs = Q + b * stride_qb + h * stride_qh + offs_m[:, None] * stride_qm + offs_d[None, :]
    q = tl.load(q_ptrs, mask=offs_m[:, None] < N, other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    k_base = K + b * stride_kb + hk * stride_kh
    v_base = V + b * stride_vb + hk * stride_vh
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    for start_n in range(0, N, BLOCK_N):
        cols = start_n + offs_n
        kv_mask = cols[:, None] < N
        k = tl.load(k_base + cols[:, None] * stride_kn + offs_d[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * sm_scale
        valid = cols[None, :] < N
        if CAUSAL:
            valid = valid & (cols[None, :] <= offs_m[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(v_base + cols[:, None] * stride_vn + offs_d[None, :], mask=kv_mask, other=0.0)
        if UPCAST:
            v = v.to(tl.float32)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    o_ptrs = O + b * stride_ob + h * stride_oh + offs_m[:, None] * stride_om + offs_d[None, :]
    tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=offs_m[:, None] < N)


INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float) -> torch.Tensor:
    batch, heads_q, n, d = q.shape
    heads_kv = k.shape[1]
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    block_m, block_n = 64, 64
    grid = (triton.cdiv(n, block_m), batch * heads_q)
    _attn_fwd[grid](q, k, v, out, scale,
                    q.stride(0), q.stride(1), q.stride(2),
                    k.stride(0), k.stride(1), k.stride(2),
                    v.stride(0), v.stride(1), v.stride(2),
                    out.stride(0), out.stride(1), out.stride(2),
                    heads_q, n,
                    GROUP=heads_q // heads_kv, CAUSAL=causal, UPCAST=INTERPRETED,
                    BLOCK_M=block_m, BLOCK_N=block_n, HEAD_DIM=d,
                    num_warps=4, num_stages=1)
    return out

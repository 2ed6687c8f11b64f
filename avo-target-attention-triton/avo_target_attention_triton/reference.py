"""The float32 reference and the comparison the gate uses. Runs in the trusted evaluator only."""

from __future__ import annotations

from typing import Any

from avo_target_attention_triton.configs import ATOL, RTOL


class GateFailure(Exception):
    """The candidate computed something wrong; the message names the shape and what is wrong."""


def _expand(k: Any, heads_q: int) -> Any:
    """KV heads repeated so query head h meets KV head h // group (GQA)."""
    group = heads_q // k.shape[1]
    return k if group == 1 else k.repeat_interleave(group, dim=1)


def attention_f32(q: Any, k: Any, v: Any, causal: bool, scale: float, chunk: int = 1024) -> Any:
    """softmax(scale q k^T) v in float32 from the bf16 inputs, in query chunks (bounded memory)."""
    import torch

    qf, kf, vf = q.float(), _expand(k, q.shape[1]).float(), _expand(v, q.shape[1]).float()
    n = q.shape[2]
    out = torch.empty_like(qf)
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        s = torch.matmul(qf[:, :, start:stop], kf.transpose(-1, -2)) * scale
        if causal:
            rows = torch.arange(start, stop, device=q.device)[:, None]
            cols = torch.arange(n, device=q.device)[None, :]
            s = s.masked_fill(cols > rows, float("-inf"))
        out[:, :, start:stop] = torch.matmul(torch.softmax(s, dim=-1), vf)
    return out


def rows_f32(q: Any, k: Any, v: Any, causal: bool, scale: float, picks: list[tuple[int, int, int]]) -> Any:
    """Reference rows (batch, head, query) only: what the spot check of a timed call needs."""
    import torch

    group = q.shape[1] // k.shape[1]
    out = []
    for b, h, i in picks:
        kk, vv = k[b, h // group].float(), v[b, h // group].float()
        s = (kk @ q[b, h, i].float()) * scale
        if causal:
            s[i + 1:] = float("-inf")
        out.append(torch.softmax(s, dim=0) @ vv)
    return torch.stack(out)


def compare(got: Any, want: Any, what: str) -> float:
    """Check ``got`` (bf16) against ``want`` (float32); return the worst error / tolerance.

    Raises GateFailure naming NaN/Inf, or the worst element and which query rows are wrong.
    ``got`` is (batch, heads, n, d) or (rows, d).
    """
    import torch

    g = got.float()
    finite = torch.isfinite(g)
    if not bool(finite.all()):
        bad = int((~finite).sum())
        first = [int(i) for i in torch.nonzero(~finite)[0].tolist()]
        raise GateFailure(f"{what}: {bad} of {g.numel()} outputs are NaN or Inf (first at index {first})")
    err = (g - want).abs()
    ratio = err / (ATOL + RTOL * want.abs())
    worst_flat = int(torch.argmax(ratio))
    worst = [int(i) for i in torch.unravel_index(torch.tensor(worst_flat), ratio.shape)]
    worst_ratio = float(ratio.flatten()[worst_flat])
    if worst_ratio <= 1.0:
        return worst_ratio
    wrong = ratio > 1.0
    idx = tuple(worst)
    detail = f"worst at index {list(idx)}: got {float(g[idx]):.5g}, expected {float(want[idx]):.5g}"
    rows = ""
    if g.dim() == 4:  # which query rows: a tail bug shows as the last rows, a mask bug as a pattern
        bad_rows = torch.nonzero(wrong.any(dim=3).any(dim=1).any(dim=0)).flatten().tolist()
        shown = ", ".join(map(str, bad_rows[:8])) + (" ..." if len(bad_rows) > 8 else "")
        rows = f"; wrong query rows ({len(bad_rows)} of {g.shape[2]}): {shown}"
    raise GateFailure(f"{what}: {int(wrong.sum())} of {g.numel()} outputs outside the tolerance "
                      f"|err| <= {ATOL:g} + {RTOL:g}*|ref|; {detail}{rows}")

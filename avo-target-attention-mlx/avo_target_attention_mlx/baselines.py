"""Reference kernels measured once per run, each as a ratio to MLX's SDPA (which is 1.0)."""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any

from avo.models import EvalResult
from avo_target_attention_mlx.harness import CandidateFailure, Kernel, Suite


def composition(q: Any, k: Any, v: Any, scale: float) -> Any:
    """matmul -> softmax -> matmul, GQA by reshaping the query heads onto their KV head."""
    import mlx.core as mx

    b, hq, _, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(b, hkv, hq // hkv, d)
    logits = (qg * scale) @ k.swapaxes(-1, -2)
    p = mx.softmax(logits.astype(mx.float32), axis=-1, precise=True).astype(v.dtype)
    return (p @ v).reshape(b, hq, 1, d)


def numpy_attention(q: Any, k: Any, v: Any, scale: float) -> Any:
    """The same maths in NumPy float32 (inputs converted before the clock starts)."""
    import numpy as np

    b, hq, _, d = q.shape
    hkv = k.shape[1]
    qg = q.reshape(b, hkv, hq // hkv, d)
    s = np.matmul(qg, np.swapaxes(k, -1, -2)) * np.float32(scale)
    s -= s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return np.matmul(s, v).reshape(b, hq, 1, d)


def _to_numpy(q: Any, k: Any, v: Any) -> tuple[Any, ...]:
    import mlx.core as mx
    import numpy as np

    return tuple(np.array(x.astype(mx.float32)) for x in (q, k, v))


def measure_baselines(quick: bool, seed: int | None = None) -> dict[str, EvalResult]:
    """SDPA against itself, an ``mx.compile``'d composition, and NumPy, on the target's configs."""
    import mlx.core as mx

    suite = Suite(quick, seed)
    kernels = {
        "mlx_sdpa": suite.sdpa_kernel(),
        "mlx_compiled_composition": Kernel("mx.compile(matmul-softmax-matmul)", mx.compile(composition)),
        "numpy": Kernel("numpy float32", numpy_attention, prepare=_to_numpy, sync=lambda out: None),
    }
    results: dict[str, EvalResult] = {}
    for name, kernel in kernels.items():
        with ExitStack() as stack:
            if name == "numpy":
                try:
                    from threadpoolctl import threadpool_limits

                    # One BLAS thread: spinning OpenBLAS workers would steal the core from
                    # the interleaved MLX calls (see MACHINE.md on thread contention).
                    stack.enter_context(threadpool_limits(1))
                except ImportError:
                    pass
            try:
                results[name] = suite.result(kernel, suite.measure(kernel))
            except CandidateFailure as exc:
                results[name] = EvalResult(correct=False, metrics={}, error=str(exc))
    return results

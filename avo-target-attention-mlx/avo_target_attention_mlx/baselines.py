"""Reference kernels measured once per run, each as a ratio to MLX's SDPA (which is 1.0).

Each runs in its own sandboxed worker exactly as a candidate does (``kernels/<name>/``).
"""

from __future__ import annotations

from avo.models import EvalOptions, EvalResult
from avo.progress import report
from avo_target_attention_mlx.harness import KERNELS, CandidateFailure, Kernel, Suite

BASELINES = {
    "mlx_sdpa": Kernel("mx.fast.scaled_dot_product_attention", KERNELS / "sdpa"),
    "mlx_compiled_composition": Kernel("mx.compile(matmul-softmax-matmul)", KERNELS / "composition"),
    # One BLAS thread, as in every worker (OPENBLAS_NUM_THREADS=1): spinning OpenBLAS
    # workers would be threads the worker is not allowed and would steal the pinned core.
    "numpy": Kernel("numpy float32", KERNELS / "numpy"),
}


def measure_baselines(options: EvalOptions) -> dict[str, EvalResult]:
    """SDPA against itself, an ``mx.compile``'d composition, and NumPy, on the target's configs."""
    suite = Suite(options.quick, options, None)
    results: dict[str, EvalResult] = {}
    try:
        for name, kernel in BASELINES.items():
            try:
                results[name] = suite.result(kernel, suite.measure(kernel))
            except CandidateFailure as exc:
                results[name] = EvalResult(correct=False, metrics={}, error=str(exc))
            report(f"baseline {name}: " + ("measured" if results[name].correct else f"failed: {results[name].error}"))
    finally:
        suite.close()
    return results

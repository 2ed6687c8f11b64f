"""The gate: the seed passes; each kind of broken candidate fails with a message that
names the config and the problem. Every evaluation runs in avo's evaluator child."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from avo_target_attention_mlx.configs import ERROR_BUDGET, QUICK_CONFIGS
from mlx_target_helpers import SEED, evaluate, write_candidate

QUICK_NAMES = {c.name for c in QUICK_CONFIGS}
FIRST = QUICK_CONFIGS[0].name


def seed_dir(tmp_path: Path) -> Path:
    work = tmp_path / "seed"
    work.mkdir()
    shutil.copy(SEED, work / "attention.py")
    return work


def test_seed_passes_with_a_score_per_config_and_roofline_notes(tmp_path: Path) -> None:
    result = evaluate(seed_dir(tmp_path))
    assert result["correct"] is True, result.get("error")
    assert set(result["metrics"]) == QUICK_NAMES
    assert all(v > 0 and math.isfinite(v) for v in result["metrics"].values())
    assert set(result["spread"]) == QUICK_NAMES
    notes = result["notes"]
    assert "dtype float32" in notes and "cpu" in notes
    assert "streaming copy bandwidth" in notes and "of budget" in notes and "GB/s" in notes


BROKEN = {
    "wrong_scale": (
        """
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            g = q.shape[1] // k.shape[1]
            k, v = mx.repeat(k, g, axis=1), mx.repeat(v, g, axis=1)
            w = mx.softmax((q @ k.swapaxes(-1, -2)) / q.shape[-1], axis=-1)  # 1/D, not 1/sqrt(D)
            return w @ v
        """,
        ["is over the budget", "Check the scale"],
    ),
    "ignores_gqa_mapping": (
        """
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            g = q.shape[1] // k.shape[1]
            # tile maps query head h to KV head h % Hkv instead of h // g
            k, v = mx.tile(k, (1, g, 1, 1)), mx.tile(v, (1, g, 1, 1))
            w = mx.softmax((q @ k.swapaxes(-1, -2)) * scale, axis=-1)
            return w @ v
        """,
        [f"config {FIRST}", "GQA x4", "is over the budget", "GQA mapping"],
    ),
    "drops_half_the_cache": (
        """
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            L = k.shape[2]
            k, v = k[:, :, L // 2:], v[:, :, L // 2:]
            g = q.shape[1] // k.shape[1]
            k, v = mx.repeat(k, g, axis=1), mx.repeat(v, g, axis=1)
            w = mx.softmax((q @ k.swapaxes(-1, -2)) * scale, axis=-1)
            return w @ v
        """,
        [f"config {FIRST}", "is over the budget", "softmax mass"],
    ),
    "raises": (
        """
        def decode_attention(q, k, v, scale):
            raise RuntimeError("kernel exploded")
        """,
        [f"config {FIRST}", "raised RuntimeError: kernel exploded"],
    ),
    "raises_at_import": (
        """
        import mlx.core as mx
        raise ImportError("no such backend")
        """,
        ["attention.py raised at import", "no such backend"],
    ),
    "no_function": (
        """
        def attention(q, k, v, scale):
            return q
        """,
        ["defines no function decode_attention"],
    ),
    "wrong_shape": (
        """
        def decode_attention(q, k, v, scale):
            return q[:, :, 0]
        """,
        [f"config {FIRST}", "returned shape", "expected (1, 8, 1, 64)"],
    ),
    "returns_nan": (
        """
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            out = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
            return out * mx.array(float("nan"))
        """,
        [f"config {FIRST}", "NaN or inf"],
    ),
    "caches_result_across_calls": (
        """
        import mlx.core as mx
        _cache = {}
        def decode_attention(q, k, v, scale):
            key = (q.shape, k.shape)
            if key not in _cache:
                _cache[key] = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
            return _cache[key]
        """,
        [f"config {FIRST}", "warm-up call", "is over the budget"],
    ),
    "caches_kv_across_calls": (
        """
        import mlx.core as mx
        _kv = {}
        def decode_attention(q, k, v, scale):
            # "precompute" K and V once per shape and reuse them on later calls
            if k.shape not in _kv:
                _kv[k.shape] = (k, v)
                mx.eval(k, v)
            k, v = _kv[k.shape]
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """,
        [f"config {FIRST}", "is over the budget"],
    ),
    "leaves_a_thread_running": (
        """
        import threading, time
        import mlx.core as mx
        def _busy():
            while True:  # would steal the core from whatever runs next
                time.sleep(0.001)
        threading.Thread(target=_busy, daemon=True).start()
        def decode_attention(q, k, v, scale):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """,
        [f"config {FIRST}", "started threads it was not allowed", "runs 3 threads"],
    ),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_candidate_fails_with_a_clear_message(tmp_path: Path, case: str) -> None:
    source, expected = BROKEN[case]
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is False
    assert result["metrics"] == {}
    for fragment in expected:
        assert fragment in result["error"], f"{fragment!r} not in:\n{result['error']}"


def test_an_approximation_inside_the_budget_passes_and_reports_what_it_spent(tmp_path: Path) -> None:
    # Adds a deliberate error of 0.2 % of max|V|: the gate is a budget, not equality.
    source = """
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            out = mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
            return out + 0.002 * mx.abs(v).max()
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is True, result.get("error")
    spent = [float(part.split("% of budget")[0].split("= ")[-1])
             for part in result["notes"].split(", error ")[1:]]
    assert len(spent) == len(QUICK_NAMES)
    assert all(15.0 <= s <= 25.0 for s in spent), spent  # 0.002 / 0.01 = 20 %
    assert ERROR_BUDGET == 1e-2


def test_a_candidate_that_patches_the_reference_after_import_gains_nothing(tmp_path: Path) -> None:
    # It slows MLX's SDPA down and fakes the clock; both were captured before the import,
    # so the candidate (which is SDPA itself) still scores about 1x, not ~100x.
    source = """
        import time
        import mlx.core as mx
        _sdpa = mx.fast.scaled_dot_product_attention
        def _slow(*args, **kwargs):
            time.sleep(0.05)
            return _sdpa(*args, **kwargs)
        mx.fast.scaled_dot_product_attention = _slow
        _clock = time.perf_counter
        time.perf_counter = lambda: _clock() * 0.01
        def decode_attention(q, k, v, scale):
            return _sdpa(q, k, v, scale=scale)
        """
    result = evaluate(write_candidate(tmp_path, source))
    assert result["correct"] is True, result.get("error")
    assert all(v < 5.0 for v in result["metrics"].values()), result["metrics"]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision_path_runs_and_is_reported(tmp_path: Path, dtype: str) -> None:
    # On a GPU backend the evaluator picks float16 itself; here it is forced on the CPU.
    result = evaluate(seed_dir(tmp_path), env={"AVO_MLX_DTYPE": dtype})
    assert result["correct"] is True, result.get("error")
    assert f"dtype {dtype}" in result["notes"]


def test_a_bad_dtype_override_is_named(tmp_path: Path) -> None:
    result = evaluate(seed_dir(tmp_path), env={"AVO_MLX_DTYPE": "int8"})
    assert result["correct"] is False
    assert "AVO_MLX_DTYPE must be float32, float16 or bfloat16" in result["error"]

"""The gate: the seed passes; each kind of broken kernel fails with a message that says why."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from avo.models import EvalResult
from conftest import KERNELS, LAST_LINE, SEED, at_entry, mutate

Make = Callable[..., Path]
Eval = Callable[[Path], EvalResult]


def test_seed_passes_the_gate_and_scores_every_config(candidate: Make, evaluate: Eval) -> None:
    result = evaluate(candidate(SEED))
    assert result.correct, result.error
    assert set(result.metrics) == {f"n{n}_{m}" for n in (32, 64, 96, 128) for m in ("causal", "noncausal")}
    assert all(v > 0 and math.isfinite(v) for v in result.metrics.values())
    assert result.spread is not None and set(result.spread) == set(result.metrics)
    assert result.notes is not None
    assert "18 shapes vs float64 passed" in result.notes
    assert "candidate 1 (OMP_NUM_THREADS=1" in result.notes and "openblas 1 thread(s)" in result.notes


def test_dropped_tail_keys_fail_naming_the_shape_and_rows(candidate: Make, evaluate: Eval) -> None:
    # Blocks of 4 keys, remainder forgotten: right for n <= 3 and multiples of 4 only.
    broken = mutate(LAST_LINE, "int last = causal ? i + 1 : n; if (last >= 4) last &= ~3;")
    result = evaluate(candidate(broken))
    assert not result.correct
    assert result.error is not None
    assert "gate shape 6/18 (heads=3 n=7 non-causal)" in result.error
    assert "outside the tolerance" in result.error and "wrong query rows (7 of 7)" in result.error


def test_causal_mask_that_lets_one_future_key_through_fails(candidate: Make, evaluate: Eval) -> None:
    broken = mutate(LAST_LINE, "int last = causal ? (i + 2 < n ? i + 2 : n) : n;")
    result = evaluate(candidate(broken))
    assert not result.correct and result.error is not None
    assert "gate shape 3/18 (heads=2 n=2 causal)" in result.error
    assert "outside the tolerance" in result.error
    # every row but the last sees a key it must not: row 1 (the last) is right
    assert "wrong query rows (1 of 2): 0" in result.error


def test_fast_exp_is_fine_alone_but_broken_by_fast_math(candidate: Make, evaluate: Eval) -> None:
    kernel = (KERNELS / "fast_exp.c").read_text()
    plain = evaluate(candidate(kernel))
    assert plain.correct, plain.error
    broken = evaluate(candidate(kernel, cflags="-O3 -ffast-math"))
    assert not broken.correct and broken.error is not None
    # n=1 has a single weight (exp(0) = 1 exactly): the first shape that can show it is n=2.
    assert "gate shape 3/18 (heads=2 n=2 causal)" in broken.error
    assert "outside the tolerance" in broken.error


def test_segfault_is_a_failed_evaluation_naming_signal_and_shape(candidate: Make, evaluate: Eval) -> None:
    result = evaluate(candidate(at_entry("if (n == 17) *(volatile int *)0 = 1;")))
    assert not result.correct and result.error is not None
    assert "crashed with SIGSEGV" in result.error
    assert "gate shape 8/18 (heads=2 n=17 non-causal)" in result.error


def test_abort_is_named(candidate: Make, evaluate: Eval) -> None:
    result = evaluate(candidate(at_entry("if (n == 33) abort();")))
    assert not result.correct and result.error is not None
    assert "crashed with SIGABRT" in result.error and "n=33" in result.error


def test_infinite_loop_times_out_and_names_the_shape(candidate: Make, evaluate: Eval) -> None:
    result = evaluate(candidate(at_entry("if (n == 3) for (volatile int spin = 0;; spin++) {}")))
    assert not result.correct and result.error is not None
    assert result.error.startswith("timed out: no answer within")
    assert "gate shape 4/18 (heads=1 n=3 non-causal)" in result.error


def test_a_kernel_that_replays_a_cached_result_fails_on_timed_calls(candidate: Make, evaluate: Eval) -> None:
    # Every gate shape is new to it, so it passes the gate; the timed calls catch it.
    result = evaluate(candidate((KERNELS / "caching.c").read_text()))
    assert not result.correct and result.error is not None
    assert result.error.startswith("timed call 1 of n32_noncausal")
    assert "caches or reuses an earlier result" in result.error


def test_nan_in_the_output_fails(candidate: Make, evaluate: Eval) -> None:
    broken = mutate("    free(scores);\n}", "    if (n == 65) out[5] = NAN;\n    free(scores);\n}")
    result = evaluate(candidate(broken))
    assert not result.correct and result.error is not None
    assert "gate shape 12/18 (heads=1 n=65 non-causal): 1 of 4160 outputs are NaN or inf" in result.error


def test_a_kernel_that_skips_work_on_later_calls_leaves_nan(candidate: Make, evaluate: Eval) -> None:
    lazy = at_entry("static int calls; if (++calls > 18) return;")  # the 18 gate calls work
    result = evaluate(candidate(lazy))
    assert not result.correct and result.error is not None
    # the first call after the gate is a benchmark's warm-up call, checked like a timed one
    assert result.error.startswith("warm-up call of n32_noncausal") and "NaN or inf" in result.error


def test_writing_past_the_end_of_out_is_caught(candidate: Make, evaluate: Eval) -> None:
    result = evaluate(candidate(at_entry("if (n == 7) out[(size_t)heads * n * d] = 0.0f;")))
    assert not result.correct and result.error is not None
    assert "n=7" in result.error and "wrote outside out" in result.error


def test_writing_into_an_input_is_caught(candidate: Make, evaluate: Eval) -> None:
    result = evaluate(candidate(at_entry("if (n == 15) ((float *)v)[0] += 1.0f;")))
    assert not result.correct and result.error is not None
    assert "n=15" in result.error and "modified its read-only input(s) v" in result.error

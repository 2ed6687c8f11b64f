"""The interpreter-mode gate: the seed passes; a wrong, a tail-bug and a NaN kernel fail by shape."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from avo.models import EvalResult
from triton_target_helpers import NAN, SEED, TAIL_BUG, WRONG

Evaluate = Callable[..., EvalResult]
Candidate = Callable[[str], Path]


def test_seed_passes_and_reports_what_it_measured(candidate: Candidate, evaluate: Evaluate) -> None:
    result = evaluate(candidate(SEED))
    assert result.correct, result.error
    assert set(result.metrics) == {"n32_noncausal", "n32_causal", "n64_noncausal", "n64_causal"}
    assert all(v > 0 for v in result.metrics.values())
    notes = result.notes or ""
    assert "Triton interpreter on the CPU" in notes and "NOT a GPU performance figure" in notes
    assert "gate: 9 shapes against float32" in notes


def test_a_wrong_kernel_fails_at_the_first_shape_with_more_than_one_key(candidate: Candidate,
                                                                        evaluate: Evaluate) -> None:
    result = evaluate(candidate(WRONG))
    assert not result.correct
    # n=1 passes (one key: nothing to normalise); n=17 is the first shape where it shows.
    assert "gate shape 3/9 (batch=2 heads_q=2 heads_kv=2 n=17 non-causal)" in (result.error or "")
    assert "outside the tolerance" in (result.error or "")


def test_a_tail_bug_fails_on_a_length_that_is_not_a_block_multiple(candidate: Candidate,
                                                                   evaluate: Evaluate) -> None:
    result = evaluate(candidate(TAIL_BUG))
    assert not result.correct
    error = result.error or ""
    assert "gate shape 1/9 (batch=2 heads_q=2 heads_kv=2 n=1 non-causal)" in error, error
    assert "wrong query rows (1 of 1): 0" in error


def test_a_nan_kernel_fails_naming_nan_and_the_causal_shape(candidate: Candidate, evaluate: Evaluate) -> None:
    result = evaluate(candidate(NAN))
    assert not result.correct
    error = result.error or ""
    # Non-causal shapes pass (the last key block always has a visible key); n=65 causal is the
    # first shape where a row meets an all-masked block first.
    assert "gate shape 6/9 (batch=1 heads_q=2 heads_kv=2 n=65 causal)" in error, error
    assert "are NaN or Inf" in error


def test_gqa_seed_passes_and_a_wrong_kv_head_mapping_fails(candidate: Candidate, evaluate: Evaluate) -> None:
    from triton_target_helpers import mutate

    ok = evaluate(candidate(SEED), target="attention_triton_gqa")
    assert ok.correct, ok.error
    # The classic GQA slip: query head h reads KV head h % heads_kv instead of h // group.
    bad = evaluate(candidate(mutate("    hk = h // GROUP\n", "    hk = h % (HEADS_Q // GROUP)\n")),
                   target="attention_triton_gqa")
    assert not bad.correct
    assert "gate shape 1/7 (batch=2 heads_q=8 heads_kv=2 n=1 non-causal)" in (bad.error or ""), bad.error


def test_returning_the_wrong_type_or_crashing_is_reported(candidate: Candidate, evaluate: Evaluate) -> None:
    result = evaluate(candidate(SEED + "\n\ndef attention(q, k, v, causal, scale):\n    return q.float()\n"))
    assert not result.correct and "returned a torch.float32 tensor" in (result.error or "")
    result = evaluate(candidate(SEED + "\n\ndef attention(q, k, v, causal, scale):\n    raise ValueError('boom')\n"))
    assert not result.correct and "ValueError: boom" in (result.error or "") and "attention.py" in (result.error or "")


@pytest.mark.skipif("__import__('torch').cuda.is_available()", reason="checks the message on a machine without a GPU")
def test_full_evaluation_without_a_gpu_says_what_it_needs_and_found(candidate: Candidate, evaluate: Evaluate) -> None:
    result = evaluate(candidate(SEED), quick=False)
    assert not result.correct
    error = result.error or ""
    assert "a full evaluation of this target needs a CUDA GPU; found no CUDA device (torch 2.13" in error, error
    assert "avo doctor" in error

"""The skewed-norm gate shapes: a softmax shifted by a norm bound must get its fallback right.

A kernel may skip the max pass by shifting each row's scores by an upper bound such as
|q| max|k| / sqrt(d) (examples/attention_c-run2's v2 does), with an exact fallback for rows
where that bound lies so far above the max that the terms underflow. Normal inputs never
reach the fallback, so before the skewed shapes a wrong one passed the gate.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from avo.models import EvalResult
from conftest import KERNELS, mutate

from avo_target_attention_c import settings

Make = Callable[..., Path]
Eval = Callable[[Path], EvalResult]

RUN2 = Path(__file__).resolve().parents[2] / "examples" / "attention_c-run2"
SKEWED = "gate shape 17/18 (heads=2 n=97 non-causal, skewed norms)"
WRONG = (KERNELS / "wrong_fallback.c").read_text()
BUG = "float shift = 0.0f; /* the bug: should be the row max */"
FIX = "float shift = -INFINITY;\n                for (int j = 0; j < last; j++)\n" \
      "                    shift = raw[j] > shift ? raw[j] : shift;"
# v2's fallback (block_exact512), its max subtraction dropped as in wrong_fallback.c
V2_BUG = ("        inv[r] = 1.0f / exp_row512(sr, len[r], nk, m);\n",
          "        inv[r] = 1.0f / exp_row512(sr, len[r], nk, 0.0f * m);\n")


def test_a_wrong_fallback_fails_on_the_skewed_shapes_and_passed_without_them(
        candidate: Make, evaluate: Eval, monkeypatch: pytest.MonkeyPatch) -> None:
    result = evaluate(candidate(WRONG))
    assert not result.correct and result.error is not None
    assert result.error.startswith(f"{SKEWED}: ") and "NaN or inf" in result.error, result.error
    fixed = mutate(BUG, FIX, WRONG)
    right = evaluate(candidate(fixed))
    assert right.correct, right.error  # the bound shift itself is fair game: only the fallback was wrong
    # A bound taken from the first head only is no bound for the second, whose max|k| is larger.
    reused = mutate("        float kmax = 0.0f;\n        for (int j = 0; j < n; j++) {",
                    "        static float kmax;\n        if (h == 0) kmax = 0.0f;\n"
                    "        for (int j = 0; j < n && h == 0; j++) {", fixed)
    reused = mutate("        kmax = sqrtf(kmax);\n", "        if (h == 0) kmax = sqrtf(kmax);\n", reused)
    stale = evaluate(candidate(reused))
    assert not stale.correct and stale.error is not None
    assert stale.error.startswith(f"{SKEWED}: ") and "NaN or inf" in stale.error, stale.error
    # The hole: with only the normal shapes the fallback never runs and the broken kernel passes.
    monkeypatch.setattr(settings, "GATE_SHAPES", tuple(s for s in settings.GATE_SHAPES if not s.skewed))
    before = evaluate(candidate(WRONG))
    assert before.correct, before.error
    assert "16 shapes vs float64 passed" in (before.notes or "")


def _from_run2(tmp_path: Path, version: str) -> tuple[str, str]:
    clone = tmp_path / "run2"
    if not clone.exists():
        subprocess.run(["git", "clone", "-q", str(RUN2 / "lineage.bundle"), str(clone)], check=True)

    def show(name: str) -> str:
        return subprocess.run(["git", "-C", str(clone), "show", f"{version}:{name}"], check=True,
                              capture_output=True, text=True).stdout

    return show("kernel.c"), show("cflags.txt").strip()


@pytest.mark.parametrize("version", ["v0", "v1", "v2"])
def test_the_shipped_run2_kernels_pass_the_gate(candidate: Make, evaluate: Eval, tmp_path: Path,
                                                version: str) -> None:
    kernel, flags = _from_run2(tmp_path, version)
    result = evaluate(candidate(kernel, cflags=flags))
    assert result.correct, result.error
    assert "18 shapes vs float64 passed" in (result.notes or "")


def test_v2_with_its_fallback_broken_fails_where_its_fused_softmax_is_built(
        candidate: Make, evaluate: Eval, tmp_path: Path) -> None:
    kernel, flags = _from_run2(tmp_path, "v2")
    result = evaluate(candidate(mutate(*V2_BUG, kernel), cflags=flags))
    if "avx512f" in Path("/proc/cpuinfo").read_text().split():
        assert not result.correct and result.error is not None
        assert result.error.startswith(f"{SKEWED}: ") and "NaN or inf" in result.error, result.error
    else:  # v2's fused softmax (and its fallback) exists only under AVX-512: its AVX2 path has a max pass
        assert result.correct, result.error

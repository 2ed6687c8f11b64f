"""End to end through avo's engine: start a quick run, submit a better and a broken candidate."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from avo_target_attention_mlx.configs import QUICK_CONFIGS

from avo.engine import start_run, submit


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    monkeypatch.setenv("AVO_RUNS_DIR", str(root))
    return root


def test_quick_run_seeds_measures_baselines_and_takes_a_submit(runs_root: Path) -> None:
    run = start_run("attention_mlx", runs_root, quick=True)
    work = run.paths.work
    assert (work / "attention.py").is_file()
    kb = sorted(p.name for p in run.paths.kb.iterdir())
    assert "split_k_flash_decoding.md" in kb and "reading_fewer_bytes.md" in kb
    assert set(run.state.configs) == {c.name for c in QUICK_CONFIGS}
    baselines = {b.name: b for b in run.state.baselines}
    assert set(baselines) == {"mlx_sdpa", "mlx_compiled_composition", "numpy"}
    assert all(b.correct for b in baselines.values()), [b.error for b in baselines.values()]
    seed_score = run.state.versions[0].scalar

    # The fused kernel itself, with GQA done by the kernel: several times the seed here.
    (work / "attention.py").write_text(textwrap.dedent("""
        import mlx.core as mx
        def decode_attention(q, k, v, scale):
            return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
        """))
    outcome = submit(run, "call the fused kernel")
    assert outcome.outcome == "accepted", outcome.reason
    assert outcome.version is not None and outcome.version.scalar > seed_score

    (work / "attention.py").write_text("def decode_attention(q, k, v, scale):\n    return q * 0\n")
    outcome = submit(run, "return zeros")
    assert outcome.outcome == "failed"
    assert "is over the budget" in outcome.reason
    assert outcome.best.n == 1

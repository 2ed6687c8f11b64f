"""The plugin as avo sees it: two targets, their resources, the seed and KB, avo doctor."""

from __future__ import annotations

from pathlib import Path

from avo.plugins import find_target, get_plugin_manager
from typer.testing import CliRunner


def test_both_targets_are_registered_with_their_resources() -> None:
    mha, gqa = find_target("attention_triton"), find_target("attention_triton_gqa")
    for spec in (mha, gqa):
        assert spec.entrypoint == "attention.py" and spec.has_baselines
        assert spec.resources.gpus == 1 and spec.resources.accelerator == "cuda"
        assert spec.requirements == ["torch", "triton"]
        assert spec.limits.address_space_mb is None  # CUDA needs its address space
    assert "multi-head (16 heads)" in mha.description
    assert "grouped-query (32 query heads, 4 KV heads)" in gqa.description
    assert "KV head h // 8" in gqa.goal


def test_the_two_targets_share_the_seed_and_the_knowledge_base(tmp_path: Path) -> None:
    hook = get_plugin_manager().hook
    for name in ("attention_triton", "attention_triton_gqa"):
        seed, kb = tmp_path / name / "seed", tmp_path / name / "kb"
        seed.mkdir(parents=True)
        kb.mkdir()
        assert hook.avo_seed(target=find_target(name), dest=seed)
        assert hook.avo_knowledge(target=find_target(name), dest=kb)
        assert "def attention(q" in (seed / "attention.py").read_text()
        assert {"online-softmax.md", "flashattention-2-3-4.md", "hopper.md", "triton-tuning.md",
                "measuring.md", "query-the-device.md", "gqa.md"} <= {p.name for p in kb.iterdir()}


def test_doctor_reports_the_packages_and_the_gpu() -> None:
    from avo.cli.app import app
    from avo.cli.info import visible_gpus

    result = CliRunner().invoke(app, ["doctor", "--target", "attention_triton"])
    assert "target attention_triton: ready" in result.output  # torch and triton are installed for the tests
    assert "target attention_triton: needs 1 GPU(s) (cuda)" in result.output
    if not visible_gpus():
        assert "none visible here" in result.output and result.exit_code == 1

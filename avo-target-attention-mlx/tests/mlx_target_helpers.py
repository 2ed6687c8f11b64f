"""Test helpers: write a candidate attention.py and evaluate it through avo's evaluator child."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path
from typing import Any

from avo.evaluation import evaluate_dir

SEED = Path(__file__).resolve().parents[1] / "avo_target_attention_mlx" / "seed" / "attention.py"

SDPA = """
    import mlx.core as mx
    def decode_attention(q, k, v, scale):
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale)
    """


def write_candidate(tmp_path: Path, source: str, name: str = "cand") -> Path:
    """A candidate directory holding ``attention.py`` with ``source``."""
    work = tmp_path / name
    work.mkdir()
    (work / "attention.py").write_text(textwrap.dedent(source))
    return work


def evaluate(workdir: Path, *, quick: bool = True, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Evaluate ``workdir`` as a run does (avo's private evaluator copy in a real child, the
    candidate in its sandboxed worker) and return the result as a plain dict."""
    from avo.plugins import find_target

    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        ev = evaluate_dir(find_target("attention_mlx"), workdir, workdir.parent / f"{workdir.name}-eval.log", quick=quick)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    result: dict[str, Any] = ev.result.model_dump()
    return result

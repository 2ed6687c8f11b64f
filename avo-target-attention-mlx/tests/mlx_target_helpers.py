"""Test helpers: write a candidate attention.py and evaluate it through avo's evaluator child."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

SEED = Path(__file__).resolve().parents[1] / "avo_target_attention_mlx" / "seed" / "attention.py"


def write_candidate(tmp_path: Path, source: str, name: str = "cand") -> Path:
    """A candidate directory holding ``attention.py`` with ``source``."""
    work = tmp_path / name
    work.mkdir()
    (work / "attention.py").write_text(textwrap.dedent(source))
    return work


def evaluate(workdir: Path, *, quick: bool = True, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run ``python -m avo.evaluator`` on ``workdir`` (a real child) and parse its result."""
    cmd = [sys.executable, "-m", "avo.evaluator", "--target", "attention_mlx", "--workdir", str(workdir)]
    if quick:
        cmd.append("--quick")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=workdir,
                          env={**os.environ, **(env or {})})
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert lines, f"evaluator printed nothing; stderr:\n{proc.stderr[-3000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result

"""Fixtures of the attention_triton tests (helpers live in triton_target_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from avo.models import EvalOptions, EvalResult
from avo.plugins import reset_plugin_manager


@pytest.fixture(autouse=True)
def fresh_plugins() -> Iterator[None]:
    """Each test sees the installed plugins afresh, as a new avo process would."""
    reset_plugin_manager()
    yield
    reset_plugin_manager()


@pytest.fixture
def candidate(tmp_path: Path) -> Callable[[str], Path]:
    """Write a candidate folder holding ``attention.py``."""
    counter = iter(range(1000))

    def make(text: str) -> Path:
        work = tmp_path / f"cand{next(counter)}"
        work.mkdir()
        (work / "attention.py").write_text(text)
        return work

    return make


@pytest.fixture
def evaluate(tmp_path: Path) -> Callable[..., EvalResult]:
    """The target's evaluation in this process (the kernel still runs in its sandboxed worker)."""
    from avo_target_attention_triton.configs import PROBLEMS
    from avo_target_attention_triton.evaluate import evaluate as run

    def go(work: Path, target: str = "attention_triton", quick: bool = True) -> EvalResult:
        return run(PROBLEMS[target], work, EvalOptions(quick=quick, log_dir=tmp_path / "logs"))

    return go

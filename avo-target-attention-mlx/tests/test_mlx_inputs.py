"""Inputs the candidate cannot know in advance: derived from the run's secret and the
candidate's files, the same for the same tree (reproducible), different for any edit."""

from __future__ import annotations

from pathlib import Path

from avo_target_attention_mlx.configs import QUICK_CONFIGS
from avo_target_attention_mlx.harness import Suite
from mlx_target_helpers import SDPA, write_candidate

from avo.models import EvalOptions


def first_query(options: EvalOptions, workdir: Path | None) -> bytes:
    suite = Suite(True, options, workdir)
    try:
        return suite.inputs[0].calls[0].q.tobytes() + suite.inputs[-1].calls[-1].q.tobytes()
    finally:
        suite.close()


def test_inputs_follow_the_secret_and_the_candidates_files(tmp_path: Path) -> None:
    work = write_candidate(tmp_path, SDPA)
    run = EvalOptions(quick=True, secret="run-secret-1")
    same = first_query(run, work)
    assert first_query(run, work) == same  # the same tree replays the same inputs
    assert first_query(EvalOptions(quick=True, secret="run-secret-2"), work) != same
    (work / "attention.py").write_text((work / "attention.py").read_text() + "\n# edited\n")
    assert first_query(run, work) != same  # an edited tree cannot be written against its inputs
    assert first_query(EvalOptions(quick=True), work) != same  # outside a run: a public seed
    assert len(QUICK_CONFIGS) > 1

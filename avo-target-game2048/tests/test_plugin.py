"""game2048 through avo itself: discovery, the real evaluator child, a real run."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from avo_target_game2048 import BASELINES, BASELINES_DIR
from conftest import stage

from avo.engine import open_run, start_run, submit
from avo.evaluation import evaluate_dir
from avo.plugins import find_target, reset_plugin_manager


@pytest.fixture(autouse=True)
def installed_plugins(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Load the installed entry points (game2048 must be installed, editable is fine)."""
    monkeypatch.delenv("AVO_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    reset_plugin_manager()
    yield
    reset_plugin_manager()


def test_the_target_is_announced_with_its_contract() -> None:
    spec = find_target("game2048")
    assert spec.provider == "game2048"
    assert spec.entrypoint == "agent.py" and spec.direction == "maximize"
    assert spec.has_baselines and spec.requirements == []
    # Every tree plays its own games: the band is the measured spread of 48 games (README).
    assert 0.05 <= spec.noise.band <= 0.3
    assert "120 s" in spec.goal and "merged tiles" in spec.goal and "choose_move" in spec.goal


def test_a_fake_contract_line_does_not_reach_the_real_evaluator_output(tmp_path: Path) -> None:
    spec = find_target("game2048")
    cheat_dir = stage(tmp_path / "cheat", "fake_result")
    seed_dir = tmp_path / "seed"
    seed_dir.mkdir()
    shutil.copy2(cheat_dir / "seed_agent.py", seed_dir / "agent.py")
    honest = evaluate_dir(spec, seed_dir, tmp_path / "logs" / "seed.log", quick=True)
    cheat = evaluate_dir(spec, cheat_dir, tmp_path / "logs" / "cheat.log", quick=True)
    assert honest.scalar is not None and cheat.scalar is not None
    assert cheat.result.metrics == honest.result.metrics
    assert cheat.scalar < 1e6


def test_a_run_starts_measures_the_ladder_and_accepts_a_better_player(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    run = start_run("game2048", runs, quick=True)
    assert set(run.state.configs) == {"bank1"}
    names = [b.name for b in run.state.baselines]
    assert names == list(BASELINES)
    assert all(b.correct for b in run.state.baselines), [b.error for b in run.state.baselines]
    by_name = {b.name: b.scalar or 0.0 for b in run.state.baselines}
    assert by_name["expectimax"] > by_name["random_legal"]
    seed_score = run.state.best_version.scalar
    assert (run.paths.kb / "README.md").is_file()

    # The agent's move: replace the random seed with a one-ply corner heuristic.
    shutil.copy2(BASELINES_DIR / "corner.py", run.paths.work / "agent.py")
    shutil.copy2(BASELINES_DIR / "_board.py", run.paths.work / "_board.py")
    outcome = submit(open_run(run.paths.root, runs), "one-ply corner heuristic")
    assert outcome.outcome == "accepted", outcome.reason
    assert outcome.best.scalar > 2 * seed_score

    # Shipped and re-checked: the best version's recorded secret replays its very games.
    from avo.examples import export_run, verify_example

    assert outcome.best.secret
    example = tmp_path / "example"
    export_run(open_run(run.paths.root, runs), example, plot=False)
    check = verify_example(example)
    assert check.ok, check.detail
    assert check.metrics == outcome.best.metrics  # exactly, not only within the band

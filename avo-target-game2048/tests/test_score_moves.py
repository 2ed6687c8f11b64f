"""The score can move: a depth-limited expectimax player (written here, not shipped)
scores far above the seed on the same games."""

from __future__ import annotations

from pathlib import Path

from conftest import quick_eval, stage


def test_a_strong_player_scores_far_above_the_seed(seed_dir: Path, tmp_path: Path) -> None:
    # The move cap bounds test time; the seed's games end long before it, so it is fair.
    seed = quick_eval(seed_dir, max_moves=600)
    strong = quick_eval(stage(tmp_path / "strong", "strong"), max_moves=600)
    assert seed.correct and strong.correct, (seed.error, strong.error)
    assert strong.metrics["bank1"] > 4 * seed.metrics["bank1"], (strong.metrics, seed.metrics)

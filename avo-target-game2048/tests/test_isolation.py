"""Cheating and broken players fail the gate or gain nothing; every failure names the
game, the move and what happened."""

from __future__ import annotations

import shutil
from pathlib import Path

from avo_target_game2048 import PACKAGE_DIR
from avo_target_game2048.harness import Settings, game_seed
from conftest import quick_eval, stage

from avo.models import EvalOptions


def test_the_seed_passes_and_scores_positive_means_per_bank(seed_dir: Path) -> None:
    result = quick_eval(seed_dir)
    assert result.correct, result.error
    assert set(result.metrics) == {"bank1"} and result.metrics["bank1"] > 0
    assert "player CPU" in (result.notes or "")


def test_evaluating_twice_gives_identical_metrics(seed_dir: Path, tmp_path: Path) -> None:
    first = quick_eval(seed_dir, games_per_bank=3)
    second = quick_eval(seed_dir, games_per_bank=3)
    assert first.correct and second.correct
    assert first.metrics == second.metrics
    baseline_dir = stage(tmp_path / "strong", "strong")
    a = quick_eval(baseline_dir, games_per_bank=1, max_moves=150)
    b = quick_eval(baseline_dir, games_per_bank=1, max_moves=150)
    assert a.metrics == b.metrics


def test_patching_the_engine_inside_the_player_changes_nothing(seed_dir: Path, tmp_path: Path) -> None:
    honest = quick_eval(seed_dir)
    cheat_dir = stage(tmp_path / "cheat", "patch_engine")
    shutil.copy2(PACKAGE_DIR / "engine.py", cheat_dir / "stolen_engine.py")
    cheat = quick_eval(cheat_dir)
    assert cheat.correct, cheat.error
    assert cheat.metrics == honest.metrics


def test_printing_a_fake_contract_changes_nothing(seed_dir: Path, tmp_path: Path) -> None:
    honest = quick_eval(seed_dir)
    cheat = quick_eval(stage(tmp_path / "cheat", "fake_result"))
    assert cheat.correct, cheat.error
    assert cheat.metrics == honest.metrics


def test_a_contract_line_as_reply_fails(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "cheat", "fake_reply"))
    assert not result.correct
    assert "game 1 of 2 (bank1, seed #0), move 1" in (result.error or "")
    assert "expected one of U, D, L, R" in (result.error or "")


def test_sleeping_past_the_move_limit_fails(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "sleep", "sleeper"), move_timeout_s=1.0)
    assert not result.correct
    assert "move 3" in (result.error or "") and "per-move wall limit" in (result.error or "")


def test_sleeping_a_little_every_move_hits_the_total_wall_limit(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "sleep", "slow_sleeper"), wall_limit_s=1.5)
    assert not result.correct
    assert "total wall-clock limit of 1.5 s" in (result.error or "")


def test_spinning_inside_one_move_is_over_the_budget(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "spin", "spinner"), budget_s=1.5, move_timeout_s=60.0)
    assert not result.correct
    error = result.error or ""
    assert error.startswith("over the thinking-time budget:") and "of 1.5 s" in error
    assert "move 2" in error


def test_spending_a_little_every_move_is_over_the_budget(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "spend", "spend_per_move"), budget_s=1.0)
    assert not result.correct
    assert (result.error or "").startswith("over the thinking-time budget:")
    assert "of 1 s" in (result.error or "")


def test_an_illegal_move_fails_naming_game_and_move(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "up", "illegal"))
    assert not result.correct
    error = result.error or ""
    assert "game 1 of 2 (bank1, seed #0)" in error
    assert "the player chose U, which does not change the board" in error


def test_an_exception_fails_with_its_traceback(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "raise", "raiser"))
    assert not result.correct
    error = result.error or ""
    assert "move 5" in error and "choose_move raised ValueError: no idea what to do" in error
    assert "Traceback" in error


def test_a_dying_player_fails_with_its_exit_status(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "exit", "exiter"))
    assert not result.correct
    error = result.error or ""
    assert "move 3" in error and "exited" in error and "exit status 3" in error


def test_extra_threads_are_refused(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "threads", "threads"), games_per_bank=4)
    assert not result.correct
    assert "threads; a single thread is allowed" in (result.error or "")


def test_only_the_standard_library_is_importable(tmp_path: Path) -> None:
    result = quick_eval(stage(tmp_path / "np", "uses_numpy"))
    assert not result.correct
    error = result.error or ""
    assert "start-up" in error and "agent.py failed to load: ModuleNotFoundError" in error


def test_missing_agent_or_function_is_named(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "no agent.py" in (quick_eval(empty).error or "")
    nofunc = tmp_path / "nofunc"
    nofunc.mkdir()
    (nofunc / "agent.py").write_text("def choose(board):\n    return 'U'\n")
    assert "has no attribute 'choose_move'" in (quick_eval(nofunc).error or "")


def test_the_player_gets_a_sanitized_environment(tmp_path: Path, monkeypatch: object) -> None:
    import os

    os.environ["GAME2048_SECRET_FOR_TEST"] = "leak"
    try:
        probe = tmp_path / "probe"
        probe.mkdir()
        (probe / "agent.py").write_text(
            "import os, sys\n"
            "assert 'GAME2048_SECRET_FOR_TEST' not in os.environ, 'env leaked'\n"
            "assert os.getcwd() == os.path.dirname(os.path.abspath(__file__)), 'wrong cwd'\n"
            "assert not any('site-packages' in p for p in sys.path), 'site-packages visible'\n"
            "from seed_agent import choose_move\n")
        (probe / "seed_agent.py").write_text((Path(__file__).parent.parent / "avo_target_game2048" / "seed"
                                              / "agent.py").read_text())
        result = quick_eval(probe, games_per_bank=1)
        assert result.correct, result.error
    finally:
        del os.environ["GAME2048_SECRET_FOR_TEST"]


def test_without_a_run_secret_the_bank_seeds_are_the_public_ones(seed_dir: Path) -> None:
    assert game_seed(1, 0) != game_seed(2, 0)
    assert game_seed(3, 11) == 0x20480000 + 3011
    banks = Settings.from_options(EvalOptions(), seed_dir).banks
    assert banks["bank3"] == [game_seed(3, i) for i in range(12)]

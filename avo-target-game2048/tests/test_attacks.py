"""The red team's attacks on game2048 (issue 13), each with a real hostile player: inside the
sandbox each fails with a message naming what was detected, or gains nothing. Where it helps,
a control shows the same player succeeding without the sandbox or without the run's secret,
so the test proves the hole was real and is closed."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from avo_target_game2048 import PACKAGE_DIR
from avo_target_game2048.harness import Settings
from conftest import player_stderr, quick_eval, sandbox_processes_with, stage

import avo
from avo.models import EvalOptions

SECRET = "a-run-secret-for-tests"


def _with(dest: Path, player: str, **files: str) -> Path:
    stage(dest, player)
    for name, text in files.items():
        (dest / name).write_text(text)
    return dest


# -- foresight -------------------------------------------------------------------------------


def _hunter(dest: Path) -> Path:
    return _with(dest, "hunter", **{"targets.txt": f"{PACKAGE_DIR}\n{Path(avo.__file__).parent}\n"})


def test_the_player_cannot_find_the_harness_the_engine_or_the_secret(bwrap: None, seed_dir: Path,
                                                                      tmp_path: Path) -> None:
    honest = quick_eval(seed_dir)
    hunter = quick_eval(_hunter(tmp_path / "hunter"))
    assert hunter.correct, hunter.error  # it would fail with "found the harness: <path>"
    assert hunter.metrics == honest.metrics  # and then it plays exactly like the seed


def test_control_without_the_sandbox_the_hunter_finds_the_engine(no_sandbox: None, tmp_path: Path) -> None:
    result = quick_eval(_hunter(tmp_path / "hunter"))
    assert not result.correct
    assert "found the harness:" in (result.error or "") and "engine.py" in (result.error or "")


def _foresight(dest: Path) -> Path:
    stage(dest, "foresight")
    shutil.copy2(PACKAGE_DIR / "engine.py", dest / "stolen_engine.py")  # read during the agent's step
    return dest


def test_with_the_runs_secret_a_foresight_player_predicts_no_spawn(bwrap: None, tmp_path: Path) -> None:
    player = _foresight(tmp_path / "foresight")
    # Control: on the public seeds (no secret) the same player sees every spawn coming ...
    public = quick_eval(player, tmp_path / "public", max_moves=150)
    assert public.correct, public.error
    seen = player_stderr(tmp_path / "public")
    # every spawn after the first move of each capped game, none missed
    assert "2 of 2 games recognised, predicted 298 spawns, missed 0" in seen, seen[-500:]
    # ... with the run's secret the games are new for this tree: nothing is recognised.
    secret = quick_eval(player, tmp_path / "secret", max_moves=150, secret=SECRET)
    assert secret.correct, secret.error
    seen = player_stderr(tmp_path / "secret")
    assert "0 of 2 games recognised, predicted 0 spawns" in seen, seen[-500:]
    assert secret.metrics["bank1"] < public.metrics["bank1"]  # foresight was worth something


def test_games_depend_on_the_secret_and_the_tree_and_replay_for_the_same_tree(tmp_path: Path) -> None:
    a = stage(tmp_path / "a", "strong")
    b = _with(tmp_path / "b", "strong", **{"notes.txt": "one byte more makes another tree\n"})
    opts = EvalOptions(secret=SECRET)
    same = Settings.from_options(opts, a).banks
    assert Settings.from_options(opts, a).banks == same  # the same tree replays its games
    assert Settings.from_options(opts, b).banks["bank1"] != same["bank1"]  # an edit gets new ones
    assert Settings.from_options(EvalOptions(secret="another run"), a).banks["bank1"] != same["bank1"]
    public = Settings.from_options(EvalOptions(), a).banks
    assert not set(public["bank1"]) & set(same["bank1"])
    assert len({s for seeds in same.values() for s in seeds}) == 48  # 48 distinct games
    # The baselines share one set per run, none of them a candidate's.
    base = Settings.from_options(opts, None).banks
    assert base == Settings.from_options(opts, None).banks and base["bank1"] != same["bank1"]


# -- state between evaluations ---------------------------------------------------------------


def test_a_cache_written_in_one_evaluation_is_gone_in_the_next(bwrap: None, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    player = _with(tmp_path / "cache", "cache", **{"token.txt": token})
    first = quick_eval(player)
    second = quick_eval(player)  # would fail with "a cache from an earlier evaluation survived: ..."
    assert first.correct, first.error
    assert second.correct, second.error
    assert first.metrics == second.metrics
    assert not list(player.glob("g2048-cache-*")), "the player wrote into the candidate's own folder"


def test_control_without_the_sandbox_a_cache_in_tmp_survives(no_sandbox: None, tmp_path: Path) -> None:
    token = uuid.uuid4().hex
    player = _with(tmp_path / "cache", "cache", **{"token.txt": token})
    try:
        assert quick_eval(player).correct
        second = quick_eval(player)
        assert not second.correct
        assert "a cache from an earlier evaluation survived: " in (second.error or "")
        assert f"/tmp/g2048-cache-{token}.json" in (second.error or "")
    finally:
        for left in (Path("/tmp"), Path("/dev/shm")):
            (left / f"g2048-cache-{token}.json").unlink(missing_ok=True)


# -- CPU escape ------------------------------------------------------------------------------


def test_a_double_forked_daemon_is_detected_and_dies_with_the_sandbox(bwrap: None, tmp_path: Path) -> None:
    marker = f"g2048-daemon-{uuid.uuid4().hex}"
    result = quick_eval(_with(tmp_path / "daemon", "daemon", **{"token.txt": f"{marker} spin"}))
    assert not result.correct
    error = result.error or ""
    assert "game 1 of 2 (bank1, seed #0)" in error
    assert "the player started 1 other process (pid" in error and "a single process is allowed" in error
    assert sandbox_processes_with(marker) == [], "the daemon outlived its evaluation"


def test_a_daemon_that_ends_before_the_harness_looks_is_named_and_charged(bwrap: None, tmp_path: Path) -> None:
    marker = f"g2048-daemon-{uuid.uuid4().hex}"
    player = _with(tmp_path / "burst", "daemon", **{"token.txt": f"{marker} burst"})
    result = quick_eval(player)
    assert not result.correct
    error = result.error or ""
    assert "the player started another process, which ended after" in error, error
    charged = float(error.split("ended after ")[1].split(" s")[0])
    assert charged >= 1.4  # its 1.5 s of thinking, not the 0.0 s the old harness saw
    # Against a 1 s budget the daemon's 1.5 s put the player over it while it waits.
    over = quick_eval(player, budget_s=1.0)
    assert (over.error or "").startswith("over the thinking-time budget:") and "of 1 s" in (over.error or "")
    assert sandbox_processes_with(marker) == []


def test_thinking_in_children_the_kernel_reaps_itself_is_named(bwrap: None, tmp_path: Path) -> None:
    # SIGCHLD ignored: a child per move, gone before any look, whose CPU is in no cutime.
    result = quick_eval(_with(tmp_path / "each", "auto_reaped", **{"mode.txt": "each"}))
    assert not result.correct
    error = result.error or ""
    assert "thread(s) or process(es) that already ended" in error, error
    assert "a single process with one thread is allowed" in error, error


def test_a_child_the_kernel_reaps_itself_is_charged_to_the_budget(bwrap: None, tmp_path: Path) -> None:
    # The child's 0.8 s, seen while it ran, still count after it is gone: with the player's
    # own 0.5 s after it, over a 1 s budget (the live tree never shows more than ~0.9 s).
    over = quick_eval(_with(tmp_path / "burst", "auto_reaped", **{"mode.txt": "burst"}), budget_s=1.0)
    assert (over.error or "").startswith("over the thinking-time budget:"), over.error


# -- the parent's descriptors ----------------------------------------------------------------


def test_the_parents_descriptors_do_not_reach_the_result_pipe(bwrap: None, seed_dir: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from avo.evaluation import evaluate_dir
    from avo.plugins import find_target, reset_plugin_manager

    monkeypatch.delenv("AVO_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    reset_plugin_manager()
    try:
        spec = find_target("game2048")
        honest = evaluate_dir(spec, seed_dir, tmp_path / "logs-seed" / "seed.log", quick=True)
        thief_dir = stage(tmp_path / "thief", "fd_thief")
        logs = tmp_path / "logs-thief"
        thief = evaluate_dir(spec, thief_dir, logs / "thief.log", quick=True)
    finally:
        reset_plugin_manager()
    assert honest.scalar is not None and thief.scalar is not None, thief.result.error
    assert thief.result.metrics == honest.result.metrics  # the forgery reached nothing that counts
    seen = player_stderr(logs)
    # In its own PID namespace the player sees the sandbox's init (1) and itself (2) only; its
    # parent is that init, which holds nothing but the player's own pipes.
    assert "thief: visible pids [1, 2]; parent 1;" in seen, seen[-800:]
    assert "forged a result into []" in seen, seen[-800:]

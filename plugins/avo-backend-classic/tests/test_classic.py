"""classic: tournament sampling + numeric-literal mutation, a seeded hill climber that
really improves a target with tunable constants (the toy), through the real engine."""

from __future__ import annotations

import itertools
import random
import shutil
from collections.abc import Iterator
from importlib.util import find_spec
from pathlib import Path

import avo_backend_classic as classic
import pytest

from avo import engine
from avo.contract import scalar_of
from avo.engine import open_run, start_run
from avo.evolve import EvolveConfig, evolve
from avo.models import EvalOptions
from avo.plugins import call_target_hook, register, reset_plugin_manager, unregister
from avo.state import Version, read_trajectory

TOY = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "toy"


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AVO_DISABLE_PLUGIN_AUTOLOAD", "1")
    reset_plugin_manager()
    register(classic, "classic")
    try:
        yield
    finally:
        unregister("classic")
        reset_plugin_manager()


def _toy(tmp_path: Path, name: str) -> Path:
    dest = tmp_path / name
    shutil.copytree(TOY, dest, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def _trace(tmp_path: Path, name: str, seed: int, steps: int) -> tuple[list[tuple[str, str, float | None]], float, float]:
    run = start_run(str(_toy(tmp_path, name)), tmp_path / f"runs-{name}")
    x0 = run.state.seed_version.scalar
    summary = evolve(run, EvolveConfig(backend="classic", seed=seed, max_steps=steps))
    subs = [(r["outcome"], r["message"], r["scalar"]) for r in read_trajectory(run.paths) if r["kind"] == "submit"]
    return subs, x0, summary.best_scalar


def test_score_rises_and_runs_repeat_with_a_fixed_seed(tmp_path: Path, plugin: None) -> None:
    first, x0, best = _trace(tmp_path, "a", seed=1, steps=6)
    assert len(first) == 6 and best > x0 * 1.2  # the hill climber really climbs
    assert any(o == "accepted" for o, _, _ in first)
    assert all(m.startswith("classic: parent v") for _, m, _ in first)
    again, _, best_again = _trace(tmp_path, "b", seed=1, steps=6)
    assert again == first and best_again == best  # same seed, same trajectory
    other, _, _ = _trace(tmp_path, "c", seed=2, steps=2)
    assert other != first[:2]


def test_python_literals_come_from_tokenize() -> None:
    src = 'X = 1.5\nY = 0x1F\nZ = 2j\ns = "3.0 in a string"  # 4.0 in a comment\nN = 10\nk = 1_000\n'
    assert [lit.text for lit in classic.python_literals(src)] == ["1.5", "10", "1_000"]


def test_regex_literals_for_other_languages() -> None:
    src = "for (int i = 0; i < 64; i++) acc *= 0.5; float f = 1.0f; int x2 = 3e2;"
    assert [lit.text for lit in classic.regex_literals(src)] == ["0", "64", "0.5", "3e2"]


def test_mutation_keeps_valid_literals() -> None:
    rng = random.Random(0)
    src = "A = 3\nB = 0.25\nC = 0.0\n"
    for _ in range(50):
        new, changes = classic.mutate_source(src, True, rng, 0.5, 3)
        ns: dict[str, object] = {}
        exec(compile(new, "m", "exec"), ns)  # noqa: S102 - our own generated constants
        assert isinstance(ns["A"], int) and isinstance(ns["B"], float) and isinstance(ns["C"], float)
        assert len(changes) == 3
    assert classic.mutate_source("def f(): pass\n", True, rng, 0.5, 1) == ("def f(): pass\n", [])


def test_tournament_prefers_better_versions() -> None:
    vs = [Version(n=i, sha="", tree="", scalar=float(i), metrics={}, message="", step=i, time=0.0) for i in range(10)]
    rng = random.Random(4)
    picks = [classic.tournament(vs, "maximize", rng).n for _ in range(300)]
    assert sum(picks) / len(picks) > 6.0  # the mean of best-of-3 over 0..9 is ~6.8; uniform is 4.5
    picks = [classic.tournament(vs, "minimize", rng).n for _ in range(300)]
    assert sum(picks) / len(picks) < 3.0


@pytest.mark.slow
@pytest.mark.skipif(find_spec("avo_target_game2048") is None, reason="avo-target-game2048 is not installed")
def test_classic_on_game2048_quick(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The real 2048 target (quick mode): the classical operator climbs on the seed's weights.

    The seed is a one-ply player whose only numeric literals are its three evaluation
    weights (a poor first guess), so literal mutation is a real hill climber there. Every
    mutation is evaluated honestly through the pipe harness. Two quick games make a noisy
    score (with fresh secrets the seed alone ranged 514 to 1,696 over four runs), so a lucky
    mutation can be taken for a gain: the climb is judged afterwards by replaying the seed and
    the best version on the same eight public games. Installed plugins load normally here,
    because the evaluator child must find the target too.
    """
    monkeypatch.delenv("AVO_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    # The evaluations' secrets come from a counter here, so the games each plays, and with
    # them the whole climb, are the same on every run of this test (in a real run they are
    # fresh random bytes: nobody can know the games in advance).
    counter = itertools.count()
    monkeypatch.setattr(engine.secrets, "token_hex", lambda n: f"{next(counter):0{2 * n}x}")
    reset_plugin_manager()
    try:
        run = start_run("game2048", tmp_path / "runs", quick=True)
        x0 = run.state.seed_version.scalar
        summary = evolve(run, EvolveConfig(backend="classic", seed=1, max_steps=10))
    finally:
        reset_plugin_manager()
    subs = [r for r in read_trajectory(run.paths) if r["kind"] == "submit"]
    assert summary.steps_taken == 10 and len(subs) == 10
    assert all(r["error"] for r in subs if r["outcome"] == "failed")
    new_bests = [v for v in open_run(run.paths.root, tmp_path / "runs").state.versions[1:] if v.new_best]
    assert len(new_bests) >= 2
    assert summary.best_scalar > x0 > 0
    # Paired: the seed and the best on the same eight public games (no secret), so luck cancels out.
    paired = EvalOptions(quick=True, seed=7, games_per_bank=8)
    scores: dict[int, float | None] = {}
    try:
        for n in (0, summary.best_version):
            dest = tmp_path / f"v{n}"
            dest.mkdir()
            run.lineage.export(run.state.versions[n].sha, dest)
            result = call_target_hook(run.state.target, "avo_evaluate", workdir=dest, options=paired)
            scores[n] = scalar_of(result)[0]
    finally:
        reset_plugin_manager()
    assert all(score is not None for score in scores.values()), scores
    seed_score, best_score = scores[0], scores[summary.best_version]
    assert seed_score and best_score and best_score > 1.5 * seed_score, scores

"""Plugins: a third-party target through the plugin manager and through a real entry point."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo import plugins
from avo.cli.app import app
from avo.engine import start_run, submit
from avo.errors import AvoError
from avo.models import TargetSpec
from tests.conftest import install_plugin

PLUGIN = textwrap.dedent(
    '''
    """A third-party target: evolve WORD in word.txt towards 'avocado'."""
    from pathlib import Path

    from avo import hookimpl
    from avo.models import EvalResult, TargetSpec

    GOAL = "avocado"
    SPEC = TargetSpec(name="wordle", description="spell avocado", entrypoint="word.txt",
                      goal="Make word.txt spell the goal word.")


    @hookimpl
    def avo_targets():
        return [SPEC]


    @hookimpl
    def avo_seed(target, dest):  # only ever called for wordle: no "is this mine?" check
        (Path(dest) / "word.txt").write_text("aaaaaaa\\n")


    @hookimpl
    def avo_knowledge(target, dest):
        (Path(dest) / "about.md").write_text("# About\\nLetters count position by position.\\n")


    @hookimpl
    def avo_evaluate(target, workdir, options):
        word = (Path(workdir) / "word.txt").read_text().strip()
        if len(word) != len(GOAL):
            return EvalResult(correct=False, error=f"word must have {len(GOAL)} letters")
        hits = sum(a == b for a, b in zip(word, GOAL))
        return EvalResult(correct=True, metrics={"letters": 1 + hits}, notes=f"{hits} letters right")
    '''
)


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Install the plugin the way pip would: a module plus a dist-info with an entry point."""
    site = tmp_path / "site"
    install_plugin(site, monkeypatch, "avo_target_wordle", PLUGIN, name="avo-target-wordle", version="1.2.3",
                   entry="wordle")
    yield site
    sys.modules.pop("avo_target_wordle", None)
    plugins.reset_plugin_manager()


def test_entry_point_plugin_is_discovered_and_listed(third_party: Path) -> None:
    spec = plugins.find_target("wordle")
    assert spec.provider == "wordle" and spec.entrypoint == "word.txt"
    record = next(r for r in plugins.plugin_records() if r.name == "wordle")
    assert (record.distribution, record.version) == ("avo-target-wordle", "1.2.3")
    assert record.targets == ["wordle"] and "avo_evaluate" in record.hooks
    result = CliRunner().invoke(app, ["plugins"], catch_exceptions=False)
    assert "avo-target-wordle" in result.output and "1.2.3" in result.output and "wordle" in result.output
    core = next(r for r in plugins.plugin_records() if r.name == "directory")
    assert core.distribution == "avo-core"


def test_entry_point_plugin_runs_a_real_loop(third_party: Path, runs_root: Path) -> None:
    # The evaluator child finds the plugin through the same entry point (PYTHONPATH).
    run = start_run("wordle", runs_root)
    assert run.state.versions[0].scalar == pytest.approx(3.0)  # 'a' is right at positions 0 and 4
    (run.paths.work / "word.txt").write_text("avocaaa\n")
    out = submit(run, "five letters right")
    assert out.outcome == "accepted" and out.evaluation.scalar == pytest.approx(6.0)
    (run.paths.work / "word.txt").write_text("avo\n")
    out = submit(run, "too short")
    assert out.outcome == "failed" and "must have 7 letters" in (out.evaluation.result.error or "")


def test_plugin_registered_by_hand(core_plugins: None) -> None:
    from avo import hookimpl

    class Extra:
        @hookimpl
        def avo_targets(self) -> list[TargetSpec]:
            return [TargetSpec(name="by-hand", entrypoint="x.py")]

    plugins.register(Extra(), name="extra")
    try:
        assert plugins.find_target("by-hand").provider == "extra"
    finally:
        plugins.unregister("extra")
    with pytest.raises(AvoError, match="unknown target 'by-hand'"):
        plugins.find_target("by-hand")


def test_broken_plugin_is_reported_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    site = tmp_path / "site"
    (site / "avo_broken-0.1.dist-info").mkdir(parents=True)
    (site / "avo_broken.py").write_text("raise ImportError('needs a missing library')\n")
    (site / "avo_broken-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: avo-broken\nVersion: 0.1\n")
    (site / "avo_broken-0.1.dist-info" / "entry_points.txt").write_text("[avo]\nbroken = avo_broken\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv("AVO_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    plugins.reset_plugin_manager()
    try:
        records = {r.name: r for r in plugins.plugin_records()}
        assert "needs a missing library" in (records["broken"].error or "")
        assert "directory" in records
        assert "plugin 'broken' (avo-broken) failed to load" in capsys.readouterr().err
    finally:
        plugins.reset_plugin_manager()


def test_autoload_can_be_disabled(third_party: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AVO_DISABLE_PLUGIN_AUTOLOAD", "1")
    plugins.reset_plugin_manager()
    names = {r.name for r in plugins.plugin_records()}
    assert "wordle" not in names and "directory" in names


def test_two_resolvers_claiming_a_reference_is_a_conflict(core_plugins: None, tmp_path: Path) -> None:
    from avo import hookimpl

    class Claims:
        def __init__(self, tag: str) -> None:
            self.tag = tag

        @hookimpl(tryfirst=True)
        def avo_resolve_target(self, ref: str) -> TargetSpec | None:
            return TargetSpec(name=f"{self.tag}-claimed", entrypoint="x.py") if ref.startswith("claim:") else None

    plugins.register(Claims("a"), name="claims_a", distribution="avo-exp-a")
    try:
        assert plugins.find_target("claim:x").provider == "claims_a"
        plugins.register(Claims("b"), name="claims_b", distribution="avo-exp-b")
        with pytest.raises(AvoError, match=r"target 'claim:x' is claimed by 2 plugins: plugin 'claims_a' "
                                           r"\(avo-exp-a\) and plugin 'claims_b' \(avo-exp-b\)"):
            plugins.find_target("claim:x")
        # The core's folder resolver still answers first and alone, whatever tryfirst says.
        toy = Path(__file__).parent / "fixtures" / "toy"
        assert plugins.find_target(str(toy)).provider == "directory"
    finally:
        plugins.unregister("claims_a")
        plugins.unregister("claims_b")


def test_a_registered_plugin_that_raises_or_returns_garbage_is_named(core_plugins: None, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    from avo import hookimpl
    from avo.models import BackendInfo

    class Bad:
        @hookimpl
        def avo_targets(self) -> list[TargetSpec]:
            raise OSError("disk on fire")

        @hookimpl
        def avo_backends(self) -> list[BackendInfo]:
            return [BackendInfo(name="bad", description="returns garbage steps")]

        @hookimpl
        def avo_agent_step(self, backend: str, request: object) -> object:
            return 42

    plugins.register(Bad(), name="bad", distribution="avo-exp-bad")
    try:
        assert {s.name for s in plugins.all_targets()} == set()  # core only, and no crash
        assert "plugin 'bad' (avo-exp-bad): avo_targets raised OSError: disk on fire" in capsys.readouterr().err
        record = next(r for r in plugins.plugin_records() if r.name == "bad")
        assert record.error and "avo_targets raised OSError" in record.error and record.backends == ["bad"]
        with pytest.raises(plugins.PluginError, match=r"plugin 'bad' \(avo-exp-bad\): avo_agent_step returned 42 "
                                                      r"\(a int\); expected an avo.models.StepResult"):
            plugins.call_backend_hook("bad", "avo_agent_step", request=None)
    finally:
        plugins.unregister("bad")


def test_call_module_hook_guards_a_plugin_loaded_on_its_own(tmp_path: Path) -> None:
    from avo import hookimpl
    from avo.models import EvalOptions

    module = type(sys)("avo_exp_alone")

    @hookimpl
    def avo_evaluate(target: TargetSpec, workdir: Path) -> object:  # takes fewer arguments than the spec
        return {"correct": True, "metrics": {"x": 1.5}} if workdir.name == "ok" else {"scalar": 1}

    module.avo_evaluate = avo_evaluate  # type: ignore[attr-defined]
    spec = TargetSpec(name="alone", entrypoint="x.py", provider="alone")
    call = plugins.call_module_hook
    result = call(module, "avo_evaluate", plugin="alone", distribution="avo-exp-alone", target=spec,
                  workdir=tmp_path / "ok", options=EvalOptions())
    assert result.metrics == {"x": 1.5}
    with pytest.raises(plugins.PluginError, match=r"plugin 'alone' \(avo-exp-alone\): avo_evaluate returned "
                                                  r"\{'scalar': 1\} \(a dict\); expected an avo.models.EvalResult"):
        call(module, "avo_evaluate", plugin="alone", distribution="avo-exp-alone", target=spec,
             workdir=tmp_path / "bad", options=EvalOptions())
    with pytest.raises(plugins.PluginError, match=r"plugin 'alone' \(avo-exp-alone\) does not implement avo_seed"):
        call(module, "avo_seed", plugin="alone", distribution="avo-exp-alone", target=spec, dest=tmp_path)
    assert call(module, "avo_baselines", plugin="alone", distribution="avo-exp-alone", target=spec,
                options=EvalOptions()) is None

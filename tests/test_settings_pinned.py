"""A target's settings (environment variables its evaluator reads) are fixed when a run starts.

The attack: an agent runs `avo submit` from a shell of its own, with a setting the run did
not start with (a thread count, a dtype, here a boost the evaluator adds to its score). Its
candidate must be measured in the run's mode, or a score moves without the code changing.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

from avo import plugins
from avo.engine import evaluate_work, open_run, start_run, submit
from avo.models import TargetSpec
from tests.conftest import install_plugin

PLUGIN = textwrap.dedent(
    '''
    import os
    from pathlib import Path

    from avo import hookimpl
    from avo.models import EvalResult, TargetSpec

    SPEC = TargetSpec(name="dial", entrypoint="dial.txt", settings_env=["AVO_DIAL_BOOST"])


    @hookimpl
    def avo_targets():
        return [SPEC]


    @hookimpl
    def avo_seed(target, dest):
        (Path(dest) / "dial.txt").write_text("1\\n")


    @hookimpl
    def avo_knowledge(target, dest):
        (Path(dest) / "about.md").write_text("# dial\\n")


    @hookimpl
    def avo_evaluate(target, workdir, options):
        base = float((Path(workdir) / "dial.txt").read_text())
        boost = float(os.environ.get("AVO_DIAL_BOOST", "0"))
        return EvalResult(correct=True, metrics={"dial": base + boost}, notes=f"boost {boost:g}")
    '''
)


@pytest.fixture
def dial(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plugin installed as pip would: a module and a dist-info with its entry point."""
    site = tmp_path / "site"
    install_plugin(site, monkeypatch, "avo_target_dial", PLUGIN, name="avo-target-dial", version="0.1", entry="dial")
    monkeypatch.delenv("AVO_DIAL_BOOST", raising=False)
    yield site
    sys.modules.pop("avo_target_dial", None)
    plugins.reset_plugin_manager()


def test_a_setting_the_agent_sets_later_is_not_used(dial: Path, runs_root: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run = start_run("dial", runs_root)
    assert run.state.versions[0].scalar == pytest.approx(1.0)
    assert json.loads(run.paths.run_json.read_text())["target"]["settings"] == {}
    monkeypatch.setenv("AVO_DIAL_BOOST", "1000")  # the agent's own shell
    (run.paths.work / "dial.txt").write_text("2\n")
    out = submit(open_run(run.paths.root, runs_root), "dial 2")
    assert out.outcome == "accepted" and out.evaluation.scalar == pytest.approx(2.0)  # not 1002
    assert any("AVO_DIAL_BOOST=1000 in this shell is not used" in n for n in out.notes), out.notes
    report = evaluate_work(open_run(run.paths.root, runs_root))
    assert report.evaluation.scalar == pytest.approx(2.0)
    assert report.warning is not None and "AVO_DIAL_BOOST=1000" in report.warning


def test_a_setting_the_run_started_with_stays_when_the_shell_drops_it(dial: Path, runs_root: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AVO_DIAL_BOOST", "5")
    run = start_run("dial", runs_root)
    assert run.state.versions[0].scalar == pytest.approx(6.0)
    assert json.loads(run.paths.run_json.read_text())["target"]["settings"] == {"AVO_DIAL_BOOST": "5"}
    monkeypatch.delenv("AVO_DIAL_BOOST")
    (run.paths.work / "dial.txt").write_text("3\n")
    out = submit(open_run(run.paths.root, runs_root), "dial 3")
    assert out.evaluation.scalar == pytest.approx(8.0)  # measured with the run's 5, not with none
    assert any("AVO_DIAL_BOOST unset in this shell is not used" in n for n in out.notes), out.notes


def test_settings_are_checked_where_they_are_declared() -> None:
    with pytest.raises(ValidationError, match="not an environment variable name"):
        TargetSpec(name="t", entrypoint="x.py", settings_env=["A=B"])
    with pytest.raises(ValidationError, match="which avo sets for every evaluation itself"):
        TargetSpec(name="t", entrypoint="x.py", settings_env=["AVO_QUICK"])  # a full run measured quick
    with pytest.raises(ValidationError, match="settings holds AVO_X, which settings_env does not name"):
        TargetSpec(name="t", entrypoint="x.py", settings={"AVO_X": "1"})


@pytest.mark.parametrize("sandbox", ["none", "auto"])
def test_a_directory_targets_settings_reach_its_command_as_recorded(
        toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch, sandbox: str) -> None:
    # Without a sandbox the command inherits the agent's shell; in bubblewrap it inherits
    # nothing: either way it gets the run's recorded settings, and only those.
    (toy / "target.yaml").write_text((toy / "target.yaml").read_text() + "\nsettings_env: [TOY_MODE]\n")
    evaluator = (toy / "eval.py").read_text()
    old = '"notes": f"X={x:g}, Y={y:g}"}'
    assert old in evaluator
    (toy / "eval.py").write_text(evaluator.replace(
        old, '"notes": f"X={x:g}, Y={y:g}, mode {__import__(\'os\').environ.get(\'TOY_MODE\')}"}'))
    monkeypatch.setenv("TOY_MODE", "recorded")
    run = start_run(str(toy), runs_root, sandbox=sandbox)
    assert "mode recorded" in (run.state.versions[0].notes or "")
    monkeypatch.setenv("TOY_MODE", "the-agents")
    report = evaluate_work(open_run(run.paths.root, runs_root))
    assert "mode recorded" in (report.evaluation.result.notes or ""), report.evaluation.result.notes


def test_outside_a_run_the_settings_come_from_the_environment(dial: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    # A conformance suite or a target author's own check evaluates the spec as installed.
    from avo.evaluation import evaluate_dir

    work = tmp_path / "cand"
    work.mkdir()
    (work / "dial.txt").write_text("1\n")
    monkeypatch.setenv("AVO_DIAL_BOOST", "2")
    spec = plugins.find_target("dial")
    assert spec.settings is None
    assert evaluate_dir(spec, work, tmp_path / "eval.log").scalar == pytest.approx(3.0)


def test_verify_replays_a_shipped_run_in_its_recorded_mode(dial: Path, runs_root: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from avo.examples import export_run, verify_example

    monkeypatch.setenv("AVO_DIAL_BOOST", "5")
    run = start_run("dial", runs_root)
    (run.paths.work / "dial.txt").write_text("3\n")
    assert submit(open_run(run.paths.root, runs_root), "dial 3").evaluation.scalar == pytest.approx(8.0)
    export_run(open_run(run.paths.root, runs_root), tmp_path / "example", plot=False)
    for shell in ("0", None):  # a verifier's shell with another value, or none
        if shell is None:
            monkeypatch.delenv("AVO_DIAL_BOOST")
        else:
            monkeypatch.setenv("AVO_DIAL_BOOST", shell)
        result = verify_example(tmp_path / "example")
        assert result.ok and result.detail == "reproduced exactly", result.detail


def test_settings_edited_into_run_json_do_not_reach_the_evaluator(dial: Path, runs_root: Path) -> None:
    # The recorded settings are part of the terms v0's commit pins: an agent that writes a
    # value into run.json (a key the start did not record) is refused, never measured. The
    # check used to pass over keys added to a mapping, as if an upgrade had added a field.
    from avo.errors import AvoError

    run = start_run("dial", runs_root)
    data = json.loads(run.paths.run_json.read_text())
    data["target"]["settings"] = {"AVO_DIAL_BOOST": "1000"}
    run.paths.run_json.write_text(json.dumps(data, indent=2))
    (run.paths.work / "dial.txt").write_text("2\n")
    with pytest.raises(AvoError, match="disagrees with its lineage") as caught:
        submit(open_run(run.paths.root, runs_root), "dial 2")
    assert "run.json's target.settings is {'AVO_DIAL_BOOST': '1000'}, but the run started with {}" \
        in str(caught.value)
    assert len(json.loads(run.paths.run_json.read_text())["versions"]) == 1

"""Start-up and set-up as a newcomer meets them (issue 15): bad options, silent phases, dead runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo import hookimpl
from avo.cli.app import app
from avo.engine import start_run, submit
from avo.errors import AvoError
from avo.models import BackendInfo
from avo.plugins import register, unregister
from avo.prompts import variation_prompt
from avo.state import read_trajectory
from tests.conftest import set_constants

runner = CliRunner()


def avo(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def edit_yaml(toy: Path, old: str, new: str) -> None:
    path = toy / "target.yaml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("flag,value", [("--max-steps", "0"), ("--max-steps", "-1"), ("--stall-limit", "0")])
def test_start_refuses_budgets_below_one(toy: Path, runs_root: Path, core_plugins: None, flag: str,
                                         value: str) -> None:
    code, out = avo("start", "--target", str(toy), flag, value)
    assert code != 0 and flag in out
    assert not runs_root.exists() or not any(runs_root.iterdir())
    with pytest.raises(AvoError, match="at least 1"):
        start_run(str(toy), runs_root, **{flag.strip("-").replace("-", "_"): int(value)})  # type: ignore[arg-type]


def test_start_reports_the_seed_and_each_baseline(toy: Path, runs_root: Path, core_plugins: None) -> None:
    said: list[str] = []
    run = start_run(str(toy), runs_root, progress=said.append)
    assert any(line.startswith("evaluating the seed x_0 of toy") for line in said), said
    assert any(line.strip().startswith("x_0 = 8.818") for line in said), said
    assert any(line.startswith("measuring baselines (log: logs/") for line in said), said
    assert any(line.strip() == "baseline zeros: 5.745" for line in said), said
    assert any(line.strip() == "baseline midpoint: 15.2" for line in said), said
    assert [b.name for b in run.state.baselines] == ["zeros", "midpoint"]


def test_malformed_baselines_warn_once_and_stay_out_of_prompts(toy: Path, runs_root: Path,
                                                              core_plugins: None) -> None:
    (toy / "single.py").write_text('import json\nprint(json.dumps({"correct": True, "metrics": {"config_a": 1.0}}))\n')
    edit_yaml(toy, '["{python}", "{target}/eval.py", "--baselines"]', '["{python}", "{target}/single.py"]')
    said: list[str] = []
    run = start_run(str(toy), runs_root, progress=said.append)
    warnings = [line for line in said if line.startswith("WARNING")]
    assert len(warnings) == 1, said
    assert "malformed baselines output" in warnings[0] and "a single result" in warnings[0]
    assert '{"baselines": {"NAME": {"correct": true' in warnings[0]
    assert run.state.baselines == []
    prompt = variation_prompt(run)
    assert "## Baselines" not in prompt and "not an object" not in prompt and "baselines output" not in prompt
    assert [r["text"] for r in read_trajectory(run.paths) if r.get("kind") == "warning"] == [
        warnings[0].removeprefix("WARNING: ")]


def test_quick_is_advertised_only_where_declared(toy: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(toy), runs_root)
    assert "--quick" not in variation_prompt(run)
    edit_yaml(toy, "  timeout: 60s\n\nbaselines", "  timeout: 60s\n  quick: true\n\nbaselines")
    run = start_run(str(toy), runs_root)
    assert run.state.target.has_quick and "avo-eval --quick` screens in the target's cheap mode" in \
        variation_prompt(run)


def test_python3_in_a_command_warns_once(toy: Path, runs_root: Path, core_plugins: None) -> None:
    edit_yaml(toy, '["{python}", "{target}/eval.py", "--workdir"', '["python3", "{target}/eval.py", "--workdir"')
    said: list[str] = []
    run = start_run(str(toy), runs_root, progress=said.append)
    warnings = [line for line in said if "instead of {python}" in line]
    assert len(warnings) == 1 and "evaluate command" in warnings[0] and "'python3'" in warnings[0]
    assert sum(1 for r in read_trajectory(run.paths) if r.get("kind") == "warning") == 1


def test_mock_backend_options_are_checked_before_anything_is_created(
        toy: Path, runs_root: Path, core_plugins: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AVO_MOCK_COMMAND", raising=False)
    code, out = avo("evolve", "--target", str(toy), "--backend", "mock", "--max-steps", "1", "--plain")
    assert code == 1 and "needs --option command=..." in out and "$AVO_MOCK_COMMAND" in out
    assert "evaluating the seed" not in out
    assert not runs_root.exists() or not any(runs_root.iterdir())


def test_failed_start_leaves_a_listed_removable_partial(toy: Path, runs_root: Path, core_plugins: None) -> None:
    good_seed = (toy / "seed" / "solution.py").read_text()
    (toy / "seed" / "solution.py").write_text(good_seed.replace("return n * n", "return n + n"))
    code, out = avo("start", "--target", str(toy))
    assert code == 1 and "the seed of toy could not be scored" in out
    log = Path(out.split("full log: ")[1].split()[0])
    assert ".partial" in str(log) and log.is_file()  # the path in the error still works
    code, out = avo("runs")
    assert "unfinished start" in out and log.parent.parent.name in out and "avo runs --clean" in out
    code, out = avo("runs", "--clean")
    assert code == 0 and "removed" in out and not log.exists()
    assert not any(p.name.endswith(".partial") for p in runs_root.iterdir())
    # The next start removes a stale one too (its creator is gone).
    code, _ = avo("start", "--target", str(toy))
    assert code == 1
    (toy / "seed" / "solution.py").write_text(good_seed)
    said: list[str] = []
    start_run(str(toy), runs_root, progress=said.append)
    assert any("removed the unfinished run folder" in line for line in said)
    assert not any(p.name.endswith(".partial") for p in runs_root.iterdir())


def test_a_partial_whose_start_is_running_is_left_alone(tmp_path: Path) -> None:
    from avo.partials import list_partials, mark_creator, remove_stale

    folder = tmp_path / ".toy-20261201-000000.partial"
    (folder / ".avo").mkdir(parents=True)
    mark_creator(folder)  # this process: alive
    assert [p.alive for p in list_partials(tmp_path)] == [True]
    assert remove_stale(tmp_path) == [] and folder.exists()


def test_commands_inside_a_run_folder_use_that_run(toy: Path, runs_root: Path, core_plugins: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    first = start_run(str(toy), runs_root)
    start_run(str(toy), runs_root)  # a newer run: the default would pick this one
    monkeypatch.delenv("AVO_RUNS_DIR")
    monkeypatch.chdir(first.paths.work)
    set_constants(first.paths.work, x=6)
    code, out = avo("submit", "-m", "X to 6")
    assert code == 0 and "ACCEPTED as v1" in out, out
    code, out = avo("status")
    assert f"run {first.state.id}" in out


def test_doctor_checks_a_target_given_by_path(toy: Path, core_plugins: None) -> None:
    (toy / "target.yaml").write_text((toy / "target.yaml").read_text() + "\nrequirements: [numpyyy]\n")
    code, out = avo("doctor", "--target", str(toy))
    assert code == 1 and "target toy: needs numpyyy" in out and "all checks passed" not in out


def test_install_hints_keep_their_brackets(core_plugins: None) -> None:
    plugin = types.SimpleNamespace(avo_backends=hookimpl(lambda: [BackendInfo(
        name="sdkish", available=False, reason="not installed (pip install 'avo-backend-sdkish[sdk]')",
        needs=["pip install 'avo-backend-sdkish[sdk]'"])]))
    register(plugin, "sdkish-test")
    try:
        code, out = avo("backends")
        assert "avo-backend-sdkish[sdk]" in " ".join(out.split()).replace(" ", "") or "[sdk]" in out
        assert "[sdk]" in out
        code, out = avo("doctor")
        assert "pip install 'avo-backend-sdkish[sdk]'" in out
    finally:
        unregister("sdkish-test")


def test_unknown_names_get_a_suggestion(toy: Path, runs_root: Path, core_plugins: None,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AVO_TARGET_PATH", str(toy))
    code, out = avo("start", "--target", "toyy")
    assert code == 1 and "did you mean 'toy'?" in out
    code, out = avo("evolve", "--target", str(toy), "--backend", "mokc")
    assert code == 1 and "did you mean 'mock'?" in out


def test_plot_refuses_a_missing_folder(toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    start_run(str(toy), runs_root)
    target = tmp_path / "nonexistent" / "dir" / "x.png"
    code, out = avo("plot", "-o", str(target))
    assert code == 1 and "does not exist" in out and not target.parent.exists()


def test_verify_prints_recorded_and_measured(toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    from avo.examples import export_run

    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=6)
    submit(run, "X to 6")
    export_run(run, tmp_path / "ex", plot=False)
    code, out = avo("verify", str(tmp_path / "ex"))
    assert code == 0 and "OK: v1" in out
    assert "recorded: scalar 32.7261" in out and "measured: scalar 32.7261" in out and "config_a 51" in out


def test_readme_names_the_commands_a_newcomer_needs() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    for command in ("avo doctor", "avo backends", "avo runs", "avo log"):
        assert command in readme, command


def test_avo_help_still_imports_nothing_heavy() -> None:
    code = ("import sys\nfrom avo.cli import main\nsys.argv = ['avo', '--help']\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('numpy', 'matplotlib', 'git', 'mcp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "COLUMNS": "100"}).stdout
    assert out.strip().splitlines()[-1] == "[]"


_ = (shutil, textwrap)

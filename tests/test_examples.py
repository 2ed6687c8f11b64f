"""Shipping a run as an example, and re-checking it from its bundle."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo.cli.app import app
from avo.engine import start_run, submit
from avo.errors import AvoError
from avo.examples import export_run, verify_example
from tests.conftest import set_constants


def make_run(toy: Path, runs_root: Path):  # type: ignore[no-untyped-def]
    run = start_run(str(toy), runs_root)
    set_constants(run.paths.work, x=6)
    submit(run, "X to 6")
    set_constants(run.paths.work, x=0)
    submit(run, "X to 0")
    return run


def test_export_and_verify(toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    run = make_run(toy, runs_root)
    dest = tmp_path / "example"
    written = {p.name for p in export_run(run, dest, plot=False)}
    assert {"lineage.bundle", "run.json", "trajectory.jsonl", "NOTES.md", "rejected"} <= written
    shutil.rmtree(run.paths.root)  # the example stands alone
    result = verify_example(dest)
    assert result.ok and result.version.n == 1 and result.detail == "reproduced exactly"
    assert verify_example(dest, version=0).ok

    # Code that no longer scores what was recorded (here the evaluator changed) is caught...
    evaluator = toy / "eval.py"
    evaluator.write_text(evaluator.read_text().replace("OPT_X, OPT_Y = 7.0, 3.0", "OPT_X, OPT_Y = 8.0, 3.0"))
    result = verify_example(dest)
    assert not result.ok and "metrics differ" in result.detail
    code = CliRunner().invoke(app, ["verify", str(dest)], catch_exceptions=False)
    assert code.exit_code == 1 and "MISMATCH: v1" in code.output

    # ...and so is a record that claims more than its commit says, before anything is measured.
    data = json.loads((dest / "run.json").read_text())
    data["versions"][1]["metrics"]["config_a"] *= 1.5
    (dest / "run.json").write_text(json.dumps(data))
    with pytest.raises(AvoError, match="says v1 has metrics .* the record was edited after the run"):
        verify_example(dest)
    code = CliRunner().invoke(app, ["verify", str(dest)], catch_exceptions=False)
    assert code.exit_code == 1 and "the record was edited after the run" in code.output


def test_verify_rejects_a_folder_that_is_not_an_example(tmp_path: Path) -> None:
    with pytest.raises(AvoError, match="lineage.bundle is missing|run.json is missing"):
        verify_example(tmp_path)


def test_export_with_plot_and_report(toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the plot extra (matplotlib) is not installed")
    run = make_run(toy, runs_root)
    code = CliRunner().invoke(app, ["export", "-o", str(tmp_path / "ex")], catch_exceptions=False)
    assert code.exit_code == 0
    assert (tmp_path / "ex" / "trajectory.png").stat().st_size > 1000
    assert "<html" in (tmp_path / "ex" / "report.html").read_text().lower()
    assert run.state.id in (tmp_path / "ex" / "run.json").read_text()


def test_start_from_a_shipped_example(toy: Path, runs_root: Path, core_plugins: None, tmp_path: Path) -> None:
    """`avo start --from EXAMPLE[:vN]` seeds from the bundle; the target is the one installed now."""
    run = make_run(toy, runs_root)
    dest = tmp_path / "example"
    export_run(run, dest, plot=False)
    source_id = run.state.id
    shutil.rmtree(run.paths.root)
    # The record's target as it was then (here: another noise band) is not what the new run uses.
    data = json.loads((dest / "run.json").read_text())
    data["target"]["noise"]["band"] = 0.5
    (dest / "run.json").write_text(json.dumps(data))

    second = start_run(None, runs_root, from_ref=f"{dest}:v1")
    assert second.state.origin == f"{source_id}:v1"
    assert "X = 6" in (second.paths.work / "solution.py").read_text()
    assert second.state.versions[0].message == f"seed from {source_id}:v1"
    assert second.state.target.noise.band == 0.0
    assert not (dest / "work").exists() and not (dest / ".avo").exists()  # the example is only read
    best = start_run(None, runs_root, from_ref=str(dest))  # the best version (v1) by default
    assert "X = 6" in (best.paths.work / "solution.py").read_text()

    with pytest.raises(AvoError, match="has no version v9"):
        start_run(None, runs_root, from_ref=f"{dest}:v9")
    data["versions"][1]["sha"] = "0" * 40
    (dest / "run.json").write_text(json.dumps(data))
    with pytest.raises(AvoError, match="the record says 0000"):
        start_run(None, runs_root, from_ref=f"{dest}:v1")


def test_export_prints_a_folder_with_brackets_as_it_is(toy: Path, runs_root: Path, core_plugins: None,
                                                       tmp_path: Path) -> None:
    # "wrote PATH" went through rich markup: "[/x]" in the folder crashed the printer after
    # the files were written (a traceback), "[x]" vanished from the line.
    run = start_run(str(toy), runs_root)
    dest = tmp_path / "[/x]" / "[y]"
    result = CliRunner().invoke(app, ["export", "--run", str(run.paths.root), "-o", str(dest), "--no-plot"],
                                catch_exceptions=False)
    assert result.exit_code == 0 and f"wrote {dest / 'run.json'}" in result.output, result.output

"""avo report: one self-contained, escaped HTML page for a real toy run."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo.cli.app import app
from avo.engine import Run
from avo.errors import AvoError
from avo.report import SECTIONS, build_report, write_report
from tests.test_plot import SCRIPT_TAG, make_toy_run


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return make_toy_run(tmp_path_factory.mktemp("report") / "runs")


@pytest.fixture(scope="module")
def page(toy_run: Run) -> str:
    return build_report(toy_run)


def _section(page: str, name: str) -> str:
    match = re.search(rf'<section id="{name}">(.*?)</section>', page, re.S)
    assert match, f"no section {name}"
    return match.group(1)


def test_every_section_is_present_in_order(page: str) -> None:
    positions = [page.index(f'<section id="{name}">') for name in SECTIONS]
    assert positions == sorted(positions)


def test_plot_is_embedded_as_png(page: str) -> None:
    match = re.search(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', _section(page, "trajectory"))
    assert match and base64.b64decode(match.group(1)).startswith(b"\x89PNG")


def test_lineage_table_has_per_config_scores(toy_run: Run, page: str) -> None:
    table = _section(page, "lineage")
    assert "<th>config_a</th>" in table and "<th>config_b</th>" in table
    for v in toy_run.state.versions:
        assert f'href="#v{v.n}"' in table
    assert table.count("<tr") == 1 + len(toy_run.state.versions)


def test_accepted_versions_carry_message_and_diff(page: str) -> None:
    versions = _section(page, "versions")
    assert "move X towards its optimum" in versions
    assert '<span class="del">-X = 1.0</span>' in versions
    assert '<span class="add">+X = 4.0</span>' in versions
    assert '<span class="add">+Y = 3.0</span>' in versions


def test_attempts_carry_errors_and_archived_diffs(page: str) -> None:
    attempts = _section(page, "attempts")
    assert "step 2 rejected" in attempts and "step 3 failed" in attempts
    assert "square(1) returned 2, expected 1" in attempts
    assert "rejected/step0002-rejected.diff" in attempts and "rejected/step0003-failed.diff" in attempts
    assert '<span class="add">+    return n + n</span>' in attempts


def test_supervisor_and_notes_are_included(page: str) -> None:
    supervisor = _section(page, "supervisor")
    assert "brief-001.md" in supervisor and "redirect-001.md" in supervisor and "Try X = 7 next." in supervisor
    assert "NOTE-MARKER" in _section(page, "notes")
    baselines = _section(page, "baselines")
    assert "zeros" in baselines and "midpoint" in baselines


def test_everything_from_the_run_is_escaped(page: str) -> None:
    assert SCRIPT_TAG not in page and "<script" not in page
    escaped = SCRIPT_TAG.replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;")
    assert page.count(escaped) >= 4  # rejected message, its diff header, redirect, notes


def test_write_report_and_cli(toy_run: Run, tmp_path: Path) -> None:
    with pytest.raises(AvoError, match=r"must end in \.html"):
        write_report(toy_run, tmp_path / "r.txt")
    out = tmp_path / "r.html"
    result = CliRunner().invoke(app, ["report", "--run", str(toy_run.paths.root), "-o", str(out), "--no-plot"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and "data:image/png" not in text and "(plot left out)" in text
    result = CliRunner().invoke(app, ["report", "other", "--run", str(toy_run.paths.root), "-o", str(out)])
    assert result.exit_code == 1 and "two different runs given" in result.output

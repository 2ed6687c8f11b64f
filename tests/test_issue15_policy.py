"""Ties, display precision, reverts as attempts, the stall counter after a redirect (issue 15)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo.cli.app import app
from avo.engine import record_redirect, revert, start_run, submit, write_brief
from avo.numbers import display_digits, fmt_pct
from avo.policy import is_tie
from avo.prompts import lineage_table, supervisor_brief, variation_prompt
from avo.state import read_trajectory
from avo.summaries import attempt_lines, status_dict, status_lines

runner = CliRunner()

EVAL = '''
import json, runpy, sys
ns = runpy.run_path(sys.argv[1] + "/solution.py")
print(json.dumps({"correct": True, "metrics": {"a": ns["A"], "b": ns["B"]}}))
'''


def value_target(tmp_path: Path, extra_score: str = "", a: float = 100.0, b: float = 50.0) -> Path:
    """A directory target whose configs are the constants A and B of solution.py."""
    folder = tmp_path / "values"
    (folder / "seed").mkdir(parents=True)
    (folder / "kb").mkdir()
    (folder / "eval.py").write_text(EVAL)
    (folder / "seed" / "solution.py").write_text(f"A = {a!r}\nB = {b!r}\n")
    (folder / "target.yaml").write_text(textwrap.dedent(f"""\
        name: values
        entrypoint: solution.py
        evaluate:
          command: ["{{python}}", "{{target}}/eval.py", "{{workdir}}"]
        score:
          direction: maximize
        {extra_score}"""))
    return folder


def set_values(work: Path, a: float, b: float) -> None:
    (work / "solution.py").write_text(f"A = {a!r}\nB = {b!r}\n")


def test_tie_within_tolerance_is_a_match_never_a_loss_nor_a_new_best(
        tmp_path: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(value_target(tmp_path)), runs_root, max_steps=10, stall_limit=5)
    best = run.state.best_version.scalar
    # Lower by 5e-13 relative: float noise of re-finding the same optimum.
    set_values(run.paths.work, 100.0 * (1 - 5e-13), 50.0)
    out = submit(run, "re-found the optimum another way")
    assert out.outcome == "accepted" and out.version is not None and not out.version.new_best
    assert out.reason == "matches v0 (tie within 1e-9)"
    assert run.state.steps_since_best == 1
    # Higher by 3e-12 relative: still a tie, so it does not reset the stall counter.
    set_values(run.paths.work, 100.0 * (1 + 3e-12), 50.0)
    out = submit(run, "and again")
    assert out.outcome == "accepted" and out.version is not None and not out.version.new_best
    assert "tie within" in out.reason and run.state.steps_since_best == 2
    assert best == pytest.approx(run.state.best_version.scalar, rel=1e-11)
    # A real gain is still a new best, a real loss still a rejection.
    set_values(run.paths.work, 101.0, 50.0)
    assert submit(run, "real gain").version.new_best  # type: ignore[union-attr]
    set_values(run.paths.work, 100.0, 50.0)
    assert submit(run, "real loss").outcome == "rejected"


def test_tie_tolerance_is_a_target_setting(tmp_path: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(value_target(tmp_path, "  tie_tolerance: 0.01")), runs_root)
    assert run.state.target.tie_tolerance == 0.01
    set_values(run.paths.work, 100.5, 50.0)  # +0.25 % on the geomean: inside 1 %
    out = submit(run, "small")
    assert out.version is not None and not out.version.new_best and out.reason == "matches v0 (tie within 0.01)"
    assert is_tie(1.0, 1.0 + 1e-10) and not is_tie(1.0, 1.0 + 1e-8)


def test_precision_distinguishes_every_version(tmp_path: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(value_target(tmp_path)), runs_root)
    for a in (100.1, 100.1001, 100.10011):  # gains of 1e-3, 1e-6, 1e-7 relative
        set_values(run.paths.work, a, 50.0)
        assert submit(run, f"A = {a}").version is not None
    digits = display_digits(run.state)
    table = lineage_table(run.state)
    rows = [line.split(" | ") for line in table.splitlines()[2:]]
    scalars = [r[1] for r in rows]
    assert len(set(scalars)) == len(scalars), table  # every version reads differently
    assert all(r[2].strip() not in ("+0%", "+0.0%") for r in rows[1:]), table  # the Δ prev column
    assert all("(+0%)" not in r[3] for r in rows[1:]), table  # config a moved every time
    a_cells = [r[3].split(" (")[0] for r in rows]
    assert len(set(a_cells)) == len(a_cells), table
    assert digits >= 8
    # The same digits in status, the prompt and the brief.
    status = "\n".join(status_lines(status_dict(run, False)))
    assert f"best v3 = {scalars[-1].strip()}" in status
    assert scalars[-1].strip() in variation_prompt(run)
    assert scalars[-1].strip() in supervisor_brief(run)
    assert fmt_pct(1e-6) == "+0.00010%" and fmt_pct(0.0) == "+0.0%"


def test_a_revert_is_named_by_the_step_it_came_after_not_as_a_step(
        tmp_path: Path, runs_root: Path, core_plugins: None) -> None:
    # A revert uses no step, yet `avo log --attempts` labelled two reverts "step 1" beside
    # `avo status`'s "steps 0/12" (game2048 run 4).
    from avo.report import build_report

    run = start_run(str(value_target(tmp_path)), runs_root, max_steps=12)
    for a in (1.0, 2.0):
        set_values(run.paths.work, a, 1.0)
        assert revert(run, f"A = {a} abandoned") is not None
    set_values(run.paths.work, 200.0, 50.0)
    assert submit(run, "A = 200").outcome == "accepted"
    set_values(run.paths.work, 3.0, 1.0)
    path = revert(run, "A = 3 abandoned")
    assert path is not None and path.name.endswith("-after-step0001.diff")
    assert path.read_text().startswith("# reverted after step 1 (not submitted, no step used): A = 3 abandoned")
    result = runner.invoke(app, ["log", "--attempts", "--run", str(run.paths.root)])
    lines = result.output.splitlines()
    assert [line.split(" — ")[0] for line in lines] == [
        "after step 0: reverted, no step used", "after step 0: reverted, no step used",
        "step   1 accepted v1   100          A = 200", "after step 1: reverted, no step used"], lines
    assert len({line.rsplit("[", 1)[1] for line in lines if "reverted" in line}) == 3  # one diff each
    status = runner.invoke(app, ["status", "--run", str(run.paths.root)]).output
    assert "steps 1/12" in status
    assert "| after step 1 | reverted |" in supervisor_brief(run)
    assert "reverted after step 1 (not submitted, no step used): A = 3 abandoned" in variation_prompt(run)
    assert "reverted after step 1 (not submitted, no step used)" in build_report(run, plot=False)


def test_declared_precision_wins(tmp_path: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(value_target(tmp_path, "  precision: 8")), runs_root)
    assert display_digits(run.state) == 8
    assert "| v0 ★ | 70.710678 |" in lineage_table(run.state)


def test_revert_is_an_attempt_everywhere(tmp_path: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(value_target(tmp_path)), runs_root, max_steps=10)
    set_values(run.paths.work, 1.0, 1.0)
    path = revert(run, "dead end: A must stay large")
    assert path is not None and path.exists()
    rec = [r for r in read_trajectory(run.paths) if r.get("kind") == "revert"][-1]
    assert rec["message"] == "dead end: A must stay large" and rec["diff"].startswith("rejected/reverted-")
    lines = attempt_lines(read_trajectory(run.paths))
    assert any("reverted" in line and "dead end: A must stay large" in line for line in lines), lines
    assert "| after step 0 | reverted |" in supervisor_brief(run)
    assert "reverted after step 0 (not submitted, no step used): dead end" in variation_prompt(run)
    result = runner.invoke(app, ["log", "--attempts", "--run", str(run.paths.root)])
    assert "reverted" in result.output and "dead end" in result.output
    set_values(run.paths.work, 2.0, 2.0)
    result = runner.invoke(app, ["revert", "-m", "second idea abandoned", "--run", str(run.paths.root)])
    assert result.exit_code == 0 and "recorded as an attempt" in result.output
    assert [r.get("message") for r in read_trajectory(run.paths) if r.get("kind") == "revert"][-1] == \
        "second idea abandoned"


def test_redirect_keeps_the_since_last_new_best_counter(tmp_path: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(value_target(tmp_path)), runs_root, max_steps=20, stall_limit=3)
    set_values(run.paths.work, 120.0, 50.0)
    assert submit(run, "gain").version is not None
    for i in range(3):
        set_values(run.paths.work, 10.0 + i, 50.0)
        out = submit(run, f"worse {i}")
    assert out.supervisor_due and run.state.steps_since_best == 3
    write_brief(run)
    record_redirect(run, "try something else entirely")
    assert run.state.steps_since_best == 3  # the last new best was still three steps ago
    assert "3 since the last new best" in "\n".join(status_lines(status_dict(run, False)))
    # The supervisor's own stall count restarts at the redirect: due again after 3 more steps.
    for i in range(2):
        set_values(run.paths.work, 20.0 + i, 50.0)
        assert not submit(run, f"after redirect {i}").supervisor_due
    set_values(run.paths.work, 30.0, 50.0)
    out = submit(run, "after redirect 2")
    assert out.supervisor_due and "3 steps without a new best since the last redirect" in (out.supervisor_reason or "")
    assert run.state.steps_since_best == 6


def test_match_says_so_in_every_view(tmp_path: Path, runs_root: Path, core_plugins: None) -> None:
    run = start_run(str(value_target(tmp_path)), runs_root, max_steps=10)
    set_values(run.paths.work, 50.0, 100.0)  # the same geomean: a pure match
    out = submit(run, "swap A and B")
    assert out.version is not None and not out.version.new_best
    from avo.summaries import submit_lines

    assert "ACCEPTED as v1 (match, not a new best)" in "\n".join(submit_lines(out, run))
    assert "match" in lineage_table(run.state).splitlines()[-1]
    assert any(" match " in line for line in attempt_lines(read_trajectory(run.paths)))
    assert "1 of them matches" in "\n".join(status_lines(status_dict(run, False)))
    assert "(match)" in supervisor_brief(run)
    assert "worth submitting only when it is simpler or faster" in " ".join(variation_prompt(run).split())
    data = json.loads(runner.invoke(app, ["log", "--json", "--attempts", "--run", str(run.paths.root)]).output)
    assert [r["new_best"] for r in data if r["kind"] == "submit"] == [False]


def test_the_last_step_of_a_session_points_at_plot_and_report(tmp_path: Path, runs_root: Path,
                                                             core_plugins: None) -> None:
    from avo.summaries import submit_lines

    run = start_run(str(value_target(tmp_path)), runs_root, max_steps=1)
    set_values(run.paths.work, 120.0, 50.0)
    out = submit(run, "the only step")
    text = "\n".join(submit_lines(out, run))
    assert f"`avo plot {run.state.id}`" in text and f"`avo report {run.state.id}`" in text
    assert f"avo_plot(run='{run.state.id}')" in "\n".join(submit_lines(out, run, via="mcp"))

"""avo plot: the trajectory figure from a real toy run, checked through its artists."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from avo.cli.app import app
from avo.engine import Run, open_run, record_redirect, start_run, submit, write_brief
from avo.errors import AvoError
from avo.plot import build_figure, plot_run, trajectory_data
from tests.conftest import FIXTURES, set_constants

SCRIPT_TAG = "<script>alert('x')</script>"


def make_toy_run(runs_root: Path) -> Run:
    """A toy run with every kind of step: improving, worse, failing, improving, matching."""
    run = start_run(str(FIXTURES / "toy"), runs_root)
    set_constants(run.paths.work, x=4.0)
    assert submit(run, "move X towards its optimum").outcome == "accepted"
    set_constants(run.paths.work, x=2.0)
    assert submit(run, f"X too far {SCRIPT_TAG}").outcome == "rejected"
    (run.paths.work / "solution.py").write_text("def square(n):\n    return n + n\nX = 7.0\nY = 1.0\n")
    assert submit(run, "break the gate").outcome == "failed"
    set_constants(run.paths.work, y=3.0)
    assert submit(run, "Y to its optimum").outcome == "accepted"
    (run.paths.work / "solution.py").write_text((run.paths.work / "solution.py").read_text() + "# a comment\n")
    assert submit(run, "a comment only (matches)").outcome == "accepted"
    write_brief(run)
    record_redirect(run, f"Try X = 7 next. {SCRIPT_TAG}")
    with open(run.paths.notes, "a") as fh:
        fh.write(f"\nNOTE-MARKER: X near 7 looks good {SCRIPT_TAG}\n")
    return open_run(run.paths.root, runs_root)


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return make_toy_run(tmp_path_factory.mktemp("plot") / "runs")


def _by_gid(fig, gid: str):  # type: ignore[no-untyped-def]
    return fig.findobj(lambda artist: artist.get_gid() == gid)


def test_running_best_is_a_step_over_versions_with_circles_at_new_bests(toy_run: Run) -> None:
    state = toy_run.state
    fig = build_figure(toy_run)
    (step,) = _by_gid(fig, "running-best")
    assert step.get_drawstyle() == "steps-post"
    scalars = [v.scalar for v in state.versions]
    assert len(scalars) == 4  # v0, v1 (better), v2 (better), v3 (matches v2)
    assert list(step.get_ydata()) == pytest.approx([scalars[0], scalars[1], scalars[2], scalars[2], scalars[2]])
    (marks,) = _by_gid(fig, "new-best")
    assert list(marks.get_xdata()) == [0, 1, 2]  # the match v3 is not a new best
    assert marks.get_marker() == "o"
    assert list(marks.get_ydata()) == pytest.approx(scalars[:3])
    assert fig.texts[0].get_text().startswith("toy: best") and "%" in fig.texts[0].get_text()


def test_one_dotted_curve_per_config_relative_to_the_seed(toy_run: Run) -> None:
    fig = build_figure(toy_run)
    seed = toy_run.state.versions[0].metrics
    for name in ("config_a", "config_b"):
        (line,) = _by_gid(fig, f"config:{name}")
        assert line.get_linestyle() == ":"
        expected = [v.metrics[name] / seed[name] for v in toy_run.state.versions]
        assert list(line.get_ydata()) == pytest.approx(expected)
    assert len(fig.findobj(lambda a: str(a.get_gid()).startswith("config:"))) == 2


def test_baselines_are_labelled_horizontal_lines(toy_run: Run) -> None:
    fig = build_figure(toy_run)
    baselines = {b.name: b.scalar for b in toy_run.state.baselines}
    assert set(baselines) == {"zeros", "midpoint"}
    for name, value in baselines.items():
        (line,) = _by_gid(fig, f"baseline:{name}")
        assert list(line.get_ydata()) == pytest.approx([value, value])
        assert name in line.get_label()


def test_attempts_show_the_hidden_search_only_when_asked(toy_run: Run) -> None:
    assert not _by_gid(build_figure(toy_run), "attempts-rejected")
    fig = build_figure(toy_run, attempts=True)
    (rejected,) = _by_gid(fig, "attempts-rejected")
    (failed,) = _by_gid(fig, "attempts-failed")
    rejected_scalar = next(r.scalar for r in trajectory_data(toy_run).attempts if r.outcome == "rejected")
    offsets = rejected.get_offsets()
    assert len(offsets) == 1 and offsets[0][1] == pytest.approx(rejected_scalar)
    assert 1 < offsets[0][0] < 2  # drawn between v1 and v2, where it happened
    assert len(failed.get_offsets()) == 1


def test_time_axis_follows_wall_time(toy_run: Run) -> None:
    data = trajectory_data(toy_run, x="time")
    assert data.xs == sorted(data.xs) and "wall time" in data.x_label
    assert all(data.xs[0] <= a.x <= data.x_end for a in data.attempts)
    with pytest.raises(AvoError, match="unknown x axis 'steps'"):
        trajectory_data(toy_run, x="steps")


@pytest.mark.parametrize("suffix,magic", [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".pdf", b"%PDF")])
def test_plot_run_writes_each_format(toy_run: Run, tmp_path: Path, suffix: str, magic: bytes) -> None:
    path = plot_run(toy_run, tmp_path / f"out{suffix}", attempts=True)
    assert path.read_bytes().startswith(magic)


def test_plot_run_refuses_an_unknown_format(toy_run: Run, tmp_path: Path) -> None:
    with pytest.raises(AvoError, match=r"must end in \.png, \.svg or \.pdf"):
        plot_run(toy_run, tmp_path / "out.gif")


def test_cli_plot_by_path_and_newest(toy_run: Run, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "t.svg"
    result = runner.invoke(app, ["plot", str(toy_run.paths.root), "-o", str(out), "--attempts", "--x", "time"],
                           catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert out.read_bytes().startswith(b"<?xml") and f"wrote {out}" in result.output
    newest = tmp_path / "newest.png"
    result = runner.invoke(app, ["plot", "--runs-dir", str(toy_run.paths.root.parent), "-o", str(newest)],
                           catch_exceptions=False)
    assert result.exit_code == 0 and newest.exists()
    result = runner.invoke(app, ["plot", "--runs-dir", str(tmp_path / "none"), "-o", str(newest)])
    assert result.exit_code == 1 and "no runs under" in result.output


def test_a_fresh_run_plots_its_seed_alone(tmp_path: Path) -> None:
    run = start_run(str(FIXTURES / "toy"), tmp_path / "runs")
    fig = build_figure(run, attempts=True)
    (step,) = _by_gid(fig, "running-best")
    assert list(step.get_ydata()) == pytest.approx([run.state.versions[0].scalar] * 2)
    assert not _by_gid(fig, "attempts-rejected") and not _by_gid(fig, "attempts-failed")
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "no rejected or failed attempts" in labels
    assert "+0.0%" in fig.texts[0].get_text()


def test_per_config_ratios_have_their_own_panels(toy_run: Run) -> None:
    fig = build_figure(toy_run)
    (step,) = _by_gid(fig, "running-best")
    lines = [_by_gid(fig, f"config:{name}")[0] for name in ("config_a", "config_b")]
    # No config curve shares the scalar's axes (or a twin of it): each sits in its own small panel.
    assert all(line.axes is not step.axes for line in lines)
    assert lines[0].axes is not lines[1].axes
    assert all(line.axes.get_position().y1 < step.axes.get_position().y0 for line in lines)
    assert {line.axes.get_title() for line in lines} == {"config_a (÷ x_0)", "config_b (÷ x_0)"}


def test_rejected_attempts_are_visible_marks_above_the_lines(toy_run: Run) -> None:
    fig = build_figure(toy_run, attempts=True)
    (rejected,) = _by_gid(fig, "attempts-rejected")
    (step,) = _by_gid(fig, "running-best")
    assert rejected.get_zorder() > step.get_zorder()
    assert (rejected.get_alpha() or 1.0) == 1.0 and rejected.get_sizes()[0] >= 40
    (failed,) = _by_gid(fig, "attempts-failed")
    assert failed.get_zorder() > step.get_zorder()


def test_baseline_labels_are_kept_apart() -> None:
    from avo.plot import TrajectoryData, figure_from_data, spread_labels

    data = TrajectoryData("t", "r", "maximize", "committed version", [0.0, 1.0], [10.0, 12.0], [10.0, 12.0],
                          [True, True], {}, {"a": 11.0, "b": 11.01, "c": 11.02}, [], 1.0)
    fig = figure_from_data(data)
    ys = sorted(_by_gid(fig, f"baseline-label:{n}")[0].xy[1] for n in "abc")
    assert all(b - a >= 0.05 for a, b in zip(ys, ys[1:], strict=False))
    assert spread_labels([0.5, 0.5], 0.1) == pytest.approx([0.5, 0.6])


def test_a_far_baseline_does_not_squash_the_curve_and_since_zooms() -> None:
    from avo.plot import TrajectoryData, figure_from_data

    data = TrajectoryData("t", "r", "maximize", "committed version", [0.0, 1.0, 2.0, 3.0],
                          [1.0, 100.0, 100.5, 101.0], [1.0, 100.0, 100.5, 101.0], [True] * 4, {},
                          {"far": 10_000.0}, [], 3.0)
    fig = figure_from_data(data)
    (step,) = _by_gid(fig, "running-best")
    assert step.axes.get_ylim()[1] < 200 and not _by_gid(fig, "baseline:far")
    (note,) = _by_gid(fig, "baseline-off:far")
    assert "off the chart" in note.get_text() and "far" in note.get_text()
    zoomed = figure_from_data(data, since=1)
    (step,) = _by_gid(zoomed, "running-best")
    lo, hi = step.axes.get_ylim()
    assert lo > 90 and hi < 110  # the first jump (1 -> 100) no longer hides the later progress
    assert "from v1 on" in zoomed.texts[0].get_text()
    logged = figure_from_data(data, log=True)
    assert _by_gid(logged, "running-best")[0].axes.get_yscale() == "log"


def test_title_counts_versions_like_status(toy_run: Run, tmp_path: Path) -> None:
    title = build_figure(toy_run).texts[0].get_text()
    assert f"{len(toy_run.state.versions)} versions (v0..v{len(toy_run.state.versions) - 1})" in title
    result = CliRunner().invoke(app, ["plot", str(toy_run.paths.root), "-o", str(tmp_path / "z.png"),
                                      "--since", "v1", "--log"])
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(app, ["plot", str(toy_run.paths.root), "-o", str(tmp_path / "z.png"),
                                      "--since", "v9"])
    assert result.exit_code == 1 and "has v0..v3" in result.output


def test_config_panels_and_report_columns_follow_the_evaluators_order(tmp_path: Path) -> None:
    """A target that reports config_b before config_a gets its plot panels and its report's
    lineage columns in that order (as the prompt's lineage table does), not run.json's sorted one."""
    import shutil

    target = tmp_path / "toy-b-first"
    shutil.copytree(FIXTURES / "toy", target)
    evaluator = target / "eval.py"
    text = evaluator.read_text()
    reported = '"metrics": score(x, y),'
    assert reported in text
    evaluator.write_text(text.replace(reported, '"metrics": dict(reversed(list(score(x, y).items()))),'))
    run = start_run(str(target), tmp_path / "runs")
    assert list(run.state.versions[0].metrics) == ["config_b", "config_a"]
    assert run.state.configs == ["config_a", "config_b"]  # the record keeps them sorted
    assert list(trajectory_data(run).configs) == ["config_b", "config_a"]
    fig = build_figure(run)
    (b_line,) = _by_gid(fig, "config:config_b")
    (a_line,) = _by_gid(fig, "config:config_a")
    assert b_line.axes.get_position().x0 < a_line.axes.get_position().x0  # config_b's panel is left
    from avo.report import build_report

    html = build_report(run)
    assert html.index("<th>config_b</th>") < html.index("<th>config_a</th>")  # the report's lineage too

"""The evolve dashboard on a recording console, and the plain-line and JSON reporters."""

from __future__ import annotations

import io
import json
import re
import time

from rich.console import Console

from avo.dashboard import JsonReporter, LiveDashboard, PlainReporter, render, sparkline
from avo.evolve import Progress, StepEvent


def _progress() -> Progress:
    p = Progress(run_id="toy-20261129-120000", target="toy", backend="api", direction="maximize",
                 model="claude-sonnet-4-5", attempt=3, max_steps=10, time_limit=3600.0,
                 seed_scalar=10.0, best_scalar=15.0, best_version=2,
                 best_metrics={"config_a": 30.0, "config_b": 7.5}, seed_metrics={"config_a": 20.0, "config_b": 5.0},
                 baseline=("midpoint", 12.0), supervisor_briefs=1, running_best=[10.0, 12.0, 12.0, 15.0],
                 spend=0.4321, input_tokens=12_500, output_tokens=900, max_cost=5.0, activity="step 4: agent working")
    p.started = time.monotonic() - 125
    p.recent.extend([
        StepEvent(1, 1, "accepted", "ok", "raise X", scalar=12.0, gain=0.2, wall_s=61, input_tokens=5000,
                  output_tokens=300, cost_usd=0.15, version=1, new_best=True),
        StepEvent(2, 2, "failed", "ok", "break square", reason="square(3) returned 6", wall_s=30.5,
                  cost_usd=0.12),
        StepEvent(3, 3, "no_change", "timeout", "gave up", wall_s=45),
    ])
    return p


def test_dashboard_shows_every_field() -> None:
    console = Console(record=True, width=150, color_system=None)
    console.print(render(_progress()))
    text = console.export_text()
    for needle in ("toy-20261129-120000", "target", "toy", "api (claude-sonnet-4-5)", "3/10",
                   "v2 = 15", "+50.0% over x_0 (10)",
                   "+25.0% over baseline midpoint (12)", "$0.4321", "12.5k/900 tok", "(max $5.00)",
                   "1 brief(s)", "step 4: agent working",
                   "accepted ★", "raise X", "+20.0%", "1m01s", "$0.1500", "failed", "break square",
                   "no_change", "gave up", "per-config scores of v2", "config_a", "config_b", "+50.0%",
                   "running best", sparkline([10.0, 12.0, 12.0, 15.0])):
        assert needle in text, needle
    assert re.search(r"2m0[5-9]s elapsed, 57m5[0-5]s left", text)
    # The best config fills its bar; the other is a quarter of it.
    bar_a = next(line for line in text.splitlines() if "config_a" in line and "█" in line)
    bar_b = next(line for line in text.splitlines() if "config_b" in line and "█" in line)
    assert bar_a.count("█") == 24 and bar_b.count("█") == 6


def test_sparkline_rises_with_the_running_best() -> None:
    line = sparkline([1.0, 2.0, 3.0, 4.0])
    assert line[0] == "▁" and line[-1] == "█" and len(line) == 4
    assert sparkline([5.0, 5.0]) == "▅▅"
    assert sparkline([]) == ""


def test_live_dashboard_renders_to_a_console() -> None:
    console = Console(record=True, width=150, force_terminal=True, color_system=None)
    dash = LiveDashboard(console)
    p = _progress()
    dash.handle("start", p, {"notes": ["recovered something", "moved [/tmp/x] aside, [bold]kept[/bold]"]})
    p.stop_reason = "step budget reached (10/10 steps)"
    dash.handle("stop", p, {"reason": p.stop_reason})
    text = console.export_text()
    assert "recovered something" in text and "stopped: step budget reached" in text and "avo evolve" in text
    assert "note: moved [/tmp/x] aside, [bold]kept[/bold]" in text  # a note is text, not markup


def test_plain_reporter_prints_one_line_per_event() -> None:
    buf = io.StringIO()
    rep = PlainReporter(buf)
    p = _progress()
    rep.handle("start", p, {"notes": []})
    rep.handle("step_begin", p, {"attempt": 4, "step": 4})
    rep.handle("step_end", p, {"event": p.recent[0]})
    rep.handle("supervisor_begin", p, {"reason": "stalled: 3 steps without a new best"})
    rep.handle("supervisor_end", p, {"redirect": "try tiling\nmore", "path": "x"})
    rep.handle("stop", p, {"reason": "time budget spent"})
    lines = buf.getvalue().splitlines()
    assert len(lines) == 7 and "\x1b" not in buf.getvalue()
    assert "evolve toy-20261129-120000: target toy, backend api, max 10 steps" in lines[0]
    assert lines[1].endswith("step 4/10: agent working")
    assert "step 1: accepted (new best) scalar 12 (+20.0%) — raise X" in lines[2] and "$0.1500" in lines[2]
    assert "supervisor: stalled" in lines[3] and "try tiling" in lines[4]
    assert "stopped: time budget spent; best v2 = 15 (+50.0% over x_0)" in lines[5]
    # The log ends by pointing at the figure and the report of this run.
    assert "`avo plot toy-20261129-120000`" in lines[6] and "`avo report toy-20261129-120000`" in lines[6]


def test_json_reporter_writes_one_object_per_event() -> None:
    buf = io.StringIO()
    rep = JsonReporter(buf)
    p = _progress()
    rep.handle("step_end", p, {"event": p.recent[1]})
    rep.handle("stop", p, {"reason": "done"})
    first, second = (json.loads(line) for line in buf.getvalue().splitlines())
    assert first["event"] == "step_end" and first["outcome"] == "failed" and first["reason"] == "square(3) returned 6"
    assert first["spend_usd"] == 0.4321 and first["best"] == 15.0 and first["gain_over_seed"] == 0.5
    assert second == {**second, "event": "stop", "reason": "done", "run": "toy-20261129-120000"}


def test_dashboard_stays_whole_at_80x24() -> None:
    p = _progress()
    long = "classic: parenthesise the inner loop, hoist the bounds check and unroll by four so the tail is short"
    for i in range(4, 9):
        p.recent.append(StepEvent(i, i, "rejected", "ok", f"{long} ({i})", scalar=14.0, gain=-0.07, wall_s=20,
                                  input_tokens=1200, output_tokens=80, cost_usd=0.02, parent=2))
    console = Console(record=True, width=80, height=24, color_system=None)
    console.print(render(p, width=80, height=24))
    text = console.export_text()
    lines = text.rstrip("\n").splitlines()
    assert len(lines) <= 24, text
    assert all(len(line) <= 80 for line in lines)
    assert "avo evolve" in lines[0] and "toy-20261129-120000" in text  # the header is there, at the top
    assert "tokens/cost" in text and "parent" in text and "v2" in text
    assert "(8)" in text and "unroll by four" in text  # the newest message, whole (wrapped, not cut)
    assert "…" not in text


def test_dashboard_live_view_fits_its_console() -> None:
    console = Console(record=True, width=80, height=24, force_terminal=True, color_system=None)
    dash = LiveDashboard(console)
    p = _progress()
    dash.handle("start", p, {})
    dash.close()
    text = console.export_text()
    assert "tokens/cost" in text and "target" in text


def test_new_best_star_survives_resume(tmp_path, runs_root, core_plugins) -> None:  # type: ignore[no-untyped-def]
    from avo.engine import start_run, submit
    from avo.evolve import EvolveConfig, make_progress
    from tests.conftest import FIXTURES, set_constants

    run = start_run(str(FIXTURES / "toy"), runs_root)
    set_constants(run.paths.work, x=6)
    submit(run, "X to 6")
    progress = make_progress(run, EvolveConfig(backend="mock"))
    event = progress.recent[-1]
    assert event.new_best and event.parent == 0
    console = Console(record=True, width=80, height=24, color_system=None)
    console.print(render(progress, width=80, height=24))
    assert "accepted ★" in console.export_text()

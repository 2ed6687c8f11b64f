"""Reporters of ``avo evolve``: a rich Live dashboard, plain log lines, and JSON lines.

Each takes the loop's events with a :class:`avo.evolve.Progress` snapshot. The dashboard is
a pure function of the snapshot (:func:`render`), so it can be checked on a recording
console; ``rich.live`` is imported only when the live view starts.
"""

from __future__ import annotations

import io
import json
import math
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console, Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from avo.numbers import fmt_number
from avo.summaries import finish_lines

if TYPE_CHECKING:
    from avo.evolve import Progress, StepEvent

SPARK = "▁▂▃▄▅▆▇█"
BAR_WIDTH = 24
OUTCOME_STYLE = {"accepted": "green", "rejected": "yellow", "failed": "red", "interrupted": "magenta",
                 "no_change": "dim",
                 "timeout": "magenta", "error": "red"}


def fmt_duration(seconds: float | None) -> str:
    """``1h02m``, ``3m05s``, ``12.3s``; ``—`` for ``None``."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f}s"
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def fmt_gain(g: float | None) -> str:
    if g is None:
        return "—"
    if math.isinf(g):
        return "+∞"
    return f"{g:+.1%}"


def fmt_usage(tokens_in: int, tokens_out: int, cost: float) -> str:
    parts = []
    if tokens_in or tokens_out:
        parts.append(f"{_k(tokens_in)}/{_k(tokens_out)} tok")
    if cost:
        parts.append(f"${cost:.4f}")
    return " ".join(parts) or "—"


def _k(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def sparkline(values: list[float], width: int = 40) -> str:
    """A unicode sparkline of the last ``width`` values."""
    values = values[-width:]
    if not values:
        return ""
    lo, hi = min(values), max(values)
    if hi == lo:
        return SPARK[len(SPARK) // 2] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, int((v - lo) / (hi - lo) * (len(SPARK) - 1) + 0.5))] for v in values)


def _bar(fraction: float, width: int = BAR_WIDTH) -> str:
    fraction = min(1.0, max(0.0, fraction))
    full = int(fraction * width + 0.5)
    return "█" * full + "░" * (width - full)


def _header(p: Progress) -> Table:
    """Label/value pairs, two per row; folds into one pair per row on a narrow console."""
    steps = f"{p.attempt}/{p.max_steps}" if p.max_steps else str(p.attempt)
    left = p.time_left()
    time_text = f"{fmt_duration(p.elapsed())} elapsed" + (f", {fmt_duration(left)} left" if left is not None else "")
    spend = fmt_usage(p.input_tokens, p.output_tokens, p.spend)
    if p.max_cost is not None:
        spend += f" (max ${p.max_cost:.2f})"
    backend = p.backend + (f" ({p.model})" if p.model else "")
    best = Text(f"v{p.best_version} = {fmt_number(p.best_scalar)}")
    best.append(f"  {fmt_gain(p.gain_over_seed())} over x_0 ({fmt_number(p.seed_scalar)})")
    if p.baseline is not None:
        best.append(f", {fmt_gain(p.gain_over_baseline())} over baseline {p.baseline[0]} "
                    f"({fmt_number(p.baseline[1])})")
    sup = f"{p.supervisor_briefs} brief(s)" + (" — due" if p.supervisor_due else "")
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(ratio=1)
    grid.add_row("target", p.target, "run", p.run_id)
    grid.add_row("backend", backend, "step", steps)
    grid.add_row("time", time_text, "spend", spend)
    grid.add_row("supervisor", sup, "now", p.activity)
    outer = Table.grid()
    outer.add_column()
    outer.add_row(grid)
    best_row = Table.grid(padding=(0, 2))
    best_row.add_column(style="bold", no_wrap=True)
    best_row.add_column(ratio=1)
    best_row.add_row("best", best)
    outer.add_row(best_row)
    return outer


STEP_HEAD = f"{'#':>3}  {'outcome':<11} {'parent':<6} {'scalar':>10} {'Δ best':>8} {'time':>7}  tokens/cost"


def _step_lines(e: StepEvent) -> Text:
    """One step: its figures on one line, its message wrapped below (never cut)."""
    outcome = e.outcome + (" ★" if e.new_best else (" =" if e.outcome == "accepted" else ""))
    parent = f"v{e.parent}" if e.parent is not None else "—"
    text = Text(f"{e.attempt:>3}  ")
    text.append(f"{outcome:<11}", style=OUTCOME_STYLE.get(e.outcome, ""))
    text.append(f" {parent:<6} {fmt_number(e.scalar):>10} {fmt_gain(e.gain):>8} {fmt_duration(e.wall_s):>7}  "
                f"{fmt_usage(e.input_tokens, e.output_tokens, e.cost_usd)}")
    note = e.message + (f" — {e.reason}" if e.reason and e.outcome not in ("accepted",) else "")
    note += f" [measured on {e.where}]" if e.where else ""
    text.append("\n      " + note, style="dim" if e.outcome == "no_change" else "")
    return text


def _steps_block(p: Progress, events: list[StepEvent]) -> Group:
    lines: list[RenderableType] = [Text("recent steps  (★ new best, = match)", style="bold"),
                                   Text(STEP_HEAD, style="bold")]
    lines += [_step_lines(e) for e in events] or [Text("    (none yet)", style="dim")]
    return Group(*lines)


def _config_bars(p: Progress) -> Table:
    table = Table(title=f"per-config scores of v{p.best_version}", expand=False, title_justify="left",
                  show_edge=False)
    table.add_column("config")
    table.add_column("best", justify="right")
    table.add_column("vs x_0", justify="right")
    table.add_column("")
    values = [v for v in p.best_metrics.values() if v > 0]
    top = max(values) if values else 1.0
    for name, value in sorted(p.best_metrics.items()):
        seed = p.seed_metrics.get(name)
        g = gain(value, seed, p.direction) if seed is not None else None
        frac = value / top if p.direction == "maximize" else (min(values) / value if value > 0 else 0.0)
        table.add_row(name, fmt_number(value), fmt_gain(g), _bar(frac))
    return table


def _config_line(p: Progress) -> Text:
    text = Text(f"per-config scores of v{p.best_version}: ", style="bold")
    parts = []
    for name, value in sorted(p.best_metrics.items()):
        seed = p.seed_metrics.get(name)
        parts.append(f"{name} {fmt_number(value)} ({fmt_gain(gain(value, seed, p.direction) if seed else None)})")
    text.append(" · ".join(parts))
    return text


def gain(candidate: float, best: float, direction: str) -> float:
    from avo.contract import gain as contract_gain

    return contract_gain(candidate, best, direction)  # type: ignore[arg-type]


def _panel(p: Progress, events: list[StepEvent], compact: bool) -> Panel:
    spark = Text("running best  ")
    spark.append(sparkline(p.running_best), style="cyan")
    parts: list[RenderableType] = [_header(p), _steps_block(p, events),
                                   _config_line(p) if compact else _config_bars(p), spark]
    if p.stop_reason:
        parts.append(Text(f"stopped: {p.stop_reason}", style="bold"))
    return Panel(Group(*parts), title="avo evolve", border_style="blue")


def render(p: Progress, width: int | None = None, height: int | None = None) -> RenderableType:
    """The whole dashboard for one snapshot, fitted to ``width`` x ``height`` when given.

    On a small terminal the per-config bars shrink to one line and the oldest steps are left
    out until the panel fits, so the header never scrolls away and messages wrap, not cut.
    """
    events = list(p.recent)
    if height is None:
        return _panel(p, events, compact=False)
    measure = Console(width=width or 80, height=height, color_system=None, file=io.StringIO())
    compact = height < 40
    while True:
        panel = _panel(p, events, compact)
        if not events or len(measure.render_lines(panel, measure.options, pad=False)) <= height:
            return panel
        events = events[1:]


class LiveDashboard:
    """The rich Live view; refreshes on every event and four times a second for the clock."""

    def __init__(self, console: Console | None = None):
        from rich.live import Live

        self.console = console or Console()
        self._progress: Progress | None = None
        self.live = Live(console=self.console, refresh_per_second=4, get_renderable=self._renderable,
                         transient=False)
        self._started = False

    def _renderable(self) -> RenderableType:
        if self._progress is None:
            return Text("starting …")
        size = self.console.size
        # One line is left for the cursor row below the live view.
        return render(self._progress, width=size.width, height=max(10, size.height - 1))

    def handle(self, event: str, progress: Progress, data: dict[str, Any]) -> None:
        self._progress = progress
        if not self._started:
            self.live.start()
            self._started = True
        for note in data.get("notes") or []:  # text, never markup: a path such as [/tmp/x] would raise
            self.console.print(f"note: {note}", markup=False, highlight=False)
        self.live.refresh()
        if event == "stop":
            self.close()
            for line in finish_lines(progress.run_id):
                self.console.print(line, markup=False, highlight=False)

    def close(self) -> None:
        if self._started:
            self.live.stop()
            self._started = False


class PlainReporter:
    """One line per event, for logs and pipes (stdout is not a terminal)."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream or sys.stdout

    def _say(self, text: str) -> None:
        self.stream.write(f"{time.strftime('%H:%M:%S')} {text}\n")
        self.stream.flush()

    def handle(self, event: str, progress: Progress, data: dict[str, Any]) -> None:
        p = progress
        if event == "start":
            steps = f", max {p.max_steps} steps" if p.max_steps else ""
            self._say(f"evolve {p.run_id}: target {p.target}, backend {p.backend}{steps}; "
                      f"best v{p.best_version} = {fmt_number(p.best_scalar)}, x_0 = {fmt_number(p.seed_scalar)}")
            for note in data.get("notes") or []:
                self._say(f"note: {note}")
        elif event == "step_begin":
            self._say(f"step {data['attempt']}{'/' + str(p.max_steps) if p.max_steps else ''}: agent working")
        elif event == "step_end":
            e: StepEvent = data["event"]
            scalar = f" scalar {fmt_number(e.scalar)} ({fmt_gain(e.gain)})" if e.scalar is not None else ""
            kind = " (new best)" if e.new_best else (" (match, not a new best)" if e.outcome == "accepted" else "")
            self._say(f"step {e.attempt}: {e.outcome}{kind}{scalar} — {e.message} "
                      f"[{fmt_duration(e.wall_s)}, {fmt_usage(e.input_tokens, e.output_tokens, e.cost_usd)}"
                      f"{', on ' + e.where if e.where else ''}] "
                      f"best v{p.best_version} = {fmt_number(p.best_scalar)} ({fmt_gain(p.gain_over_seed())} over x_0)"
                      f"; spend ${p.spend:.4f}")
        elif event == "supervisor_begin":
            self._say(f"supervisor: {data['reason']}")
        elif event == "supervisor_end":
            first = data["redirect"].strip().splitlines()[0] if data["redirect"].strip() else ""
            self._say(f"supervisor redirect recorded ({p.supervisor_briefs} so far): {first[:120]}")
        elif event == "stop":
            self._say(f"stopped: {data['reason']}; best v{p.best_version} = {fmt_number(p.best_scalar)} "
                      f"({fmt_gain(p.gain_over_seed())} over x_0); {p.attempt} steps; spend ${p.spend:.4f}")
            for line in finish_lines(p.run_id):
                self._say(line)


class JsonReporter:
    """One JSON object per event (``--json-log``)."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream or sys.stdout

    def handle(self, event: str, progress: Progress, data: dict[str, Any]) -> None:
        p = progress
        obj: dict[str, Any] = {
            "event": event, "time": round(time.time(), 3), "run": p.run_id, "target": p.target,
            "backend": p.backend, "step": p.attempt, "max_steps": p.max_steps, "best_version": p.best_version,
            "best": p.best_scalar, "gain_over_seed": _finite(p.gain_over_seed()), "spend_usd": round(p.spend, 6),
            "input_tokens": p.input_tokens, "output_tokens": p.output_tokens,
            "supervisor_briefs": p.supervisor_briefs, "elapsed_s": round(p.elapsed(), 3),
        }
        for key, value in data.items():
            if key == "event":
                e: StepEvent = value
                obj.update({"attempt": e.attempt, "outcome": e.outcome, "status": e.status, "scalar": e.scalar,
                            "gain": _finite(e.gain), "message": e.message, "reason": e.reason,
                            "wall_s": round(e.wall_s, 3), "step_cost_usd": e.cost_usd, "version": e.version,
                            "new_best": e.new_best, "where": e.where})
            else:
                obj[key] = value
        self.stream.write(json.dumps(obj, default=str) + "\n")
        self.stream.flush()


def _finite(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 6)

"""The trajectory figure (the paper's Figure 5/6), plus the internal search it hides.

The running best scalar is a step function over committed versions (or wall time), with a
filled circle at each new best; baselines are labelled horizontal lines. Each config's
score, divided by its x_0 value, is a dotted curve in its own small panel below (small
multiples), never on a second axis over the scalar. With ``attempts`` every rejected
(hollow orange triangle) or failed (red cross) submit from ``trajectory.jsonl`` is drawn
above the lines, so the search between commits that the paper's figure leaves out is
visible.

matplotlib is imported inside the functions (Agg backend, no display), so importing this
module stays cheap. Every artist carries a ``gid`` (``running-best``, ``new-best``,
``config:NAME``, ``baseline:NAME``, ``baseline-label:NAME``, ``baseline-off:NAME``,
``attempts-rejected``, ``attempts-failed``) so tests
and tools can find them without looking at pixels.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avo.contract import better, gain
from avo.errors import AvoError
from avo.prompts import config_order, fmt_number
from avo.regular_files import write_json_atomic
from avo.state import read_trajectory

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from avo.engine import Run

FORMATS = ("png", "svg", "pdf")
MAX_VERSION_TICKS = 24
MAX_CONFIG_PANELS = 8
X_AXES = ("version", "time")


@dataclass
class Attempt:
    """A submit that did not enter the lineage."""

    step: int
    outcome: str  # rejected | failed
    scalar: float | None
    time: float
    message: str
    after_version: int  # the last accepted version before this attempt
    x: float = 0.0


@dataclass
class TrajectoryData:
    """Everything the figure draws, in data coordinates, without matplotlib."""

    target: str
    run_id: str
    direction: str
    x_label: str
    xs: list[float]  # one per committed version
    scalars: list[float]
    running_best: list[float]
    new_best: list[bool]
    configs: dict[str, list[float | None]]  # metric / x_0 metric, per version
    baselines: dict[str, float]
    attempts: list[Attempt] = field(default_factory=list)
    x_end: float = 0.0

    @property
    def gain(self) -> float:
        """Relative gain of the best over x_0 (positive = better)."""
        return gain(self.running_best[-1], self.scalars[0], self.direction)  # type: ignore[arg-type]


def _time_scale(span_s: float) -> tuple[float, str]:
    if span_s < 180:
        return 1.0, "seconds"
    if span_s < 2 * 3600:
        return 60.0, "minutes"
    if span_s < 3 * 86400:
        return 3600.0, "hours"
    return 86400.0, "days"


def trajectory_data(run: Run, *, x: str = "version") -> TrajectoryData:
    """Collect the figure's data from ``run.json`` and ``trajectory.jsonl``."""
    if x not in X_AXES:
        raise AvoError(f"unknown x axis {x!r}; choose one of {', '.join(X_AXES)}")
    state = run.state
    versions = state.versions
    if not versions:
        raise AvoError(f"run {state.id} has no committed versions to plot")
    direction = state.target.direction
    records = read_trajectory(run.paths, mentioning=b'"submit"')  # attempts are submits: the rest unparsed

    attempts: list[Attempt] = []
    for rec in records:
        if rec.get("kind") != "submit" or rec.get("outcome") not in ("rejected", "failed", "interrupted"):
            continue
        step = int(rec.get("step", 0))
        after = max((v.n for v in versions if v.step < step), default=0)
        scalar = rec.get("scalar")
        attempts.append(Attempt(step, str(rec["outcome"]),
                                float(scalar) if isinstance(scalar, (int, float)) else None,
                                float(rec.get("time", state.created)), str(rec.get("message", "")), after))

    if x == "version":
        xs = [float(v.n) for v in versions]
        by_gap: dict[int, list[Attempt]] = {}
        for a in attempts:
            by_gap.setdefault(a.after_version, []).append(a)
        # Spread the attempts made between v_k and v_k+1 evenly inside that gap.
        for k, group in by_gap.items():
            for i, a in enumerate(group):
                a.x = k + (i + 1) / (len(group) + 1)
        x_end = max([xs[-1], *(a.x for a in attempts)]) if attempts else xs[-1]
        x_label = "committed version"
    else:
        t0 = state.created
        stamps = [v.time for v in versions] + [a.time for a in attempts]
        scale, unit = _time_scale(max(stamps) - t0)
        xs = [(v.time - t0) / scale for v in versions]
        for a in attempts:
            a.x = (a.time - t0) / scale
        x_end = max([xs[-1], *(a.x for a in attempts)])
        x_label = f"wall time since start ({unit})"

    running: list[float] = []
    for v in versions:
        # A match (a tie within the target's tolerance) does not move the running best.
        running.append(v.scalar if not running or (v.new_best and better(v.scalar, running[-1], direction))
                       else running[-1])
    marks = [i == 0 or (versions[i].new_best and better(running[i], running[i - 1], direction))
             for i in range(len(versions))]

    seed = versions[0].metrics
    # The evaluator's own order (as x_0 reported them), like the prompt's lineage table: the
    # sorted names of run.json put n1024 before n256.
    names = config_order(state) if state.configs else list(seed)
    configs: dict[str, list[float | None]] = {}
    for name in names:
        base = seed.get(name)
        if not base:
            continue
        configs[name] = [v.metrics[name] / base if name in v.metrics else None for v in versions]

    baselines = {b.name: b.scalar for b in state.baselines if b.correct and b.scalar is not None}
    return TrajectoryData(state.target.name, state.id, direction, x_label, xs, [v.scalar for v in versions],
                          running, marks, configs, baselines, attempts, x_end)  # type: ignore[arg-type]


def build_figure(
    run: Run, *, x: str = "version", attempts: bool = False, since: int | None = None, log: bool = False
) -> Figure:
    """The trajectory as a matplotlib Figure (Agg; nothing is shown or saved)."""
    data = trajectory_data(run, x=x)
    if since is not None and not 0 <= since < len(data.xs):
        raise AvoError(f"--since v{since}: run {data.run_id} has v0..v{len(data.xs) - 1}")
    return figure_from_data(data, attempts=attempts, since=since, log=log)


def spread_labels(values: list[float], gap: float) -> list[float]:
    """Label positions (axes fractions, in the order given) at least ``gap`` apart, each near its value."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    placed: dict[int, float] = {}
    last = -1.0
    for i in order:
        placed[i] = max(values[i], last + gap)
        last = placed[i]
    overflow = last - 0.98
    if overflow > 0:  # pushed off the top: shift the whole stack down
        for i in placed:
            placed[i] -= overflow
    return [placed[i] for i in range(len(values))]


def _visible_range(data: TrajectoryData, since: int | None, attempts: bool) -> tuple[float, float, float, float]:
    """(x0, x1, y_lo, y_hi) of the committed curve (from ``since`` on) and the attempts shown."""
    first = since or 0
    x0 = data.xs[first]
    ys = data.running_best[first:]
    if attempts:
        ys = ys + [a.scalar for a in data.attempts if a.scalar is not None and a.x >= x0]
    return x0, data.x_end, min(ys), max(ys)


def figure_from_data(
    data: TrajectoryData, *, attempts: bool = False, since: int | None = None, log: bool = False
) -> Figure:
    """Draw :class:`TrajectoryData` (split out so it can be drawn without a run).

    The top panel is the scalar: running best, new bests, attempts, baselines. Below it each
    config has its own small panel (its score relative to x_0), so no per-config curve can be
    read against the scalar's axis. ``since`` zooms on the versions from ``vN`` on; ``log``
    puts the scalar on a log axis. A baseline far outside the visible range is named at the
    panel's edge instead of squashing the curve.
    """
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    configs = list(data.configs.items())[:MAX_CONFIG_PANELS]
    fig = Figure(figsize=(11, 7.4 if configs else 5.4), dpi=110)
    if configs:
        grid = fig.add_gridspec(2, len(configs), height_ratios=[3, 1.25], hspace=0.45, wspace=0.3)
        ax = fig.add_subplot(grid[0, :])
    else:
        ax = fig.add_subplot(1, 1, 1)
    handles: list[Any] = []
    x0, x1, lo, hi = _visible_range(data, since, attempts)
    span = max(hi - lo, abs(hi) * 0.02, 1e-12)

    if attempts and data.attempts:
        rejected = [(a.x, a.scalar) for a in data.attempts if a.outcome == "rejected" and a.scalar is not None]
        failed = [a for a in data.attempts if a.scalar is None or a.outcome == "failed"]
        if rejected:
            # Drawn above the lines, hollow and in their own colour, so none hides under the step line.
            sc = ax.scatter([p[0] for p in rejected], [p[1] for p in rejected], s=46, marker="v",
                            facecolors="none", edgecolors="tab:orange", linewidths=1.4, zorder=6,
                            label=f"rejected attempt ({len(rejected)})")
            sc.set_gid("attempts-rejected")
            handles.append(sc)
        if failed:
            # Failed attempts have no score: pin them to the bottom edge of the axes.
            sc = ax.scatter([a.x for a in failed], [0.03] * len(failed), s=40, marker="x", color="tab:red",
                            linewidths=1.6, zorder=6, transform=ax.get_xaxis_transform(),
                            clip_on=False, label=f"failed attempt, no score ({len(failed)})")
            sc.set_gid("attempts-failed")
            handles.append(sc)

    xs = [*data.xs, data.x_end]
    ys = [*data.running_best, data.running_best[-1]]
    (step_line,) = ax.step(xs, ys, where="post", color="tab:blue", linewidth=2.2, zorder=4,
                           label="running best (scalar)")
    step_line.set_gid("running-best")
    handles.append(step_line)
    best_x = [x for x, m in zip(data.xs, data.new_best, strict=True) if m]
    best_y = [y for y, m in zip(data.running_best, data.new_best, strict=True) if m]
    (marks,) = ax.plot(best_x, best_y, linestyle="none", marker="o", markersize=7, color="tab:blue",
                       markeredgecolor="white", zorder=5, label="new best")
    marks.set_gid("new-best")
    handles.append(marks)

    y_lo, y_hi = lo - 0.08 * span, hi + 0.08 * span
    palette = ["tab:gray", "tab:brown", "tab:olive", "tab:cyan", "tab:pink", "tab:purple"]
    inside: list[tuple[str, float, str]] = []
    off: list[tuple[str, float, str]] = []
    for i, (name, value) in enumerate(sorted(data.baselines.items(), key=lambda kv: kv[1])):
        color = palette[i % len(palette)]
        # Within three spans of the curve a baseline is drawn to scale; further out it would squash the curve.
        (inside if lo - 3 * span <= value <= hi + 3 * span else off).append((name, value, color))
    for name, value, color in inside:
        line = ax.axhline(value, color=color, linestyle="--", linewidth=1.2, zorder=1,
                          label=f"baseline {name} ({fmt_number(value)})")
        line.set_gid(f"baseline:{name}")
        handles.append(line)
        y_lo, y_hi = min(y_lo, value - 0.05 * span), max(y_hi, value + 0.05 * span)
    if log and y_lo <= 0:
        y_lo = min(v for v in [*data.running_best, *(b for _, b, _ in inside)] if v > 0) * 0.9
    ax.set_ylim(y_lo, y_hi)
    if log:
        ax.set_yscale("log")
    if since:
        ax.set_xlim(x0 - 0.3, x1 + 0.3)
    to_axes = ax.transAxes.inverted()
    fractions = [to_axes.transform(ax.transData.transform((0, v)))[1] for _, v, _ in inside]
    for (name, _value, color), y in zip(inside, spread_labels(fractions, 0.055), strict=True):
        text = ax.annotate(name, xy=(1.0, y), xycoords="axes fraction", xytext=(-4, 2),
                           textcoords="offset points", ha="right", va="bottom", fontsize=8, color=color)
        text.set_gid(f"baseline-label:{name}")
    for k, (name, value, color) in enumerate(off):
        above = value > hi
        text = ax.annotate(f"{'↑' if above else '↓'} baseline {name} = {fmt_number(value)} (off the chart)",
                           xy=(0.01, (0.97 - 0.05 * k) if above else (0.05 + 0.05 * k)), xycoords="axes fraction",
                           ha="left", va="top" if above else "bottom", fontsize=8, color=color)
        text.set_gid(f"baseline-off:{name}")
        handles.append(Line2D([], [], color=color, linestyle="--", label=f"baseline {name} ({fmt_number(value)}, "
                              "off the chart)"))

    ax.set_xlabel(data.x_label)
    sense = "higher is better" if data.direction == "maximize" else "lower is better"
    ax.set_ylabel(f"scalar ({sense}{', log scale' if log else ''})")
    if data.x_label == "committed version":
        ticks = [x for x in data.xs if x >= x0]
        ticks = ticks[::-(-len(ticks) // MAX_VERSION_TICKS)]  # one label per version drowns a long run
        ax.set_xticks(ticks)
        ax.set_xticklabels([f"v{int(v)}" for v in ticks], fontsize=8)
    ax.grid(True, alpha=0.25)

    colors = ["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:cyan"]
    for i, (name, ratios) in enumerate(configs):
        sub = fig.add_subplot(grid[1, i])
        pts = [(x, r) for x, r in zip(data.xs, ratios, strict=True) if r is not None and x >= x0]
        (line,) = sub.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=":", linewidth=1.4,
                           marker=".", markersize=5, color=colors[i % len(colors)])
        line.set_gid(f"config:{name}")
        sub.axhline(1.0, color="0.75", linewidth=0.8, zorder=0)
        sub.set_title(f"{name} (÷ x_0)", fontsize=8)
        sub.tick_params(labelsize=7)
        sub.grid(True, alpha=0.2)
        if data.x_label == "committed version":
            sub.set_xticks([x for x in data.xs if x >= x0][:: max(1, len(data.xs) // 6)])
            sub.set_xticklabels([f"v{int(v)}" for v in sub.get_xticks()], fontsize=7)
    if len(data.configs) > MAX_CONFIG_PANELS:
        fig.text(0.99, 0.01, f"{len(data.configs) - MAX_CONFIG_PANELS} more configs not drawn", ha="right",
                 fontsize=7, color="0.4")

    if attempts and not data.attempts:
        handles.append(Line2D([], [], linestyle="none", label="no rejected or failed attempts"))
    n = len(data.xs)
    fig.suptitle(f"{data.target}: best {fmt_number(data.running_best[-1])} vs x_0 {fmt_number(data.scalars[0])} "
                 f"({data.gain:+.1%}); {n} version{'s' if n != 1 else ''} (v0..v{n - 1})"
                 + (f", from v{since} on" if since else ""), fontsize=12)
    ax.set_title(f"run {data.run_id}", fontsize=9, color="0.35")
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.765, 0.9), fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.07, right=0.72 if not configs else 0.99, top=0.88, bottom=0.08)
    if configs:  # the legend sits right of the scalar panel only
        pos = ax.get_position()
        ax.set_position((pos.x0, pos.y0, 0.69 - pos.x0, pos.height))
    return fig


def plot_run(
    run: Run, output: Path, *, x: str = "version", attempts: bool = False, since: int | None = None,
    log: bool = False,
) -> Path:
    """Render the trajectory of ``run`` to ``output`` (``.png``, ``.svg`` or ``.pdf``) in an existing folder."""
    output = Path(output)
    fmt = output.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise AvoError(f"cannot write a plot to {output}: the file must end in .png, .svg or .pdf")
    if not output.parent.is_dir():
        raise AvoError(f"cannot write a plot to {output}: the folder {output.parent} does not exist "
                       "(create it first, or pick another --output)")
    try:
        fig = build_figure(run, x=x, attempts=attempts, since=since, log=log)
    except ImportError:
        raise AvoError("plots need matplotlib: pip install 'avo[plot]'") from None
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, bbox_inches="tight")
    write_json_atomic(output, buf.getvalue(), sync="none")  # renamed in: a link at the name is replaced
    return output

"""The trajectory figure (the paper's Figure 5/6), plus the internal search it hides.

The running best scalar is a step function over committed versions (or wall time), with a
filled circle at each new best; each config's score, divided by its x_0 value, is a dotted
curve on a secondary axis; baselines are labelled horizontal lines. With ``attempts`` every
rejected or failed submit from ``trajectory.jsonl`` is a faint dot, so the search between
commits that the paper's figure leaves out is visible.

matplotlib is imported inside the functions (Agg backend, no display), so importing this
module stays cheap. Every artist carries a ``gid`` (``running-best``, ``new-best``,
``config:NAME``, ``baseline:NAME``, ``attempts-rejected``, ``attempts-failed``) so tests
and tools can find them without looking at pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avo.contract import better, gain
from avo.errors import AvoError
from avo.prompts import fmt_number
from avo.state import read_trajectory

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from avo.engine import Run

FORMATS = ("png", "svg", "pdf")
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
    records = read_trajectory(run.paths)

    attempts: list[Attempt] = []
    for rec in records:
        if rec.get("kind") != "submit" or rec.get("outcome") not in ("rejected", "failed"):
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
        running.append(v.scalar if not running or better(v.scalar, running[-1], direction) else running[-1])
    marks = [i == 0 or better(running[i], running[i - 1], direction) for i in range(len(versions))]

    seed = versions[0].metrics
    names = state.configs or sorted(seed)
    configs: dict[str, list[float | None]] = {}
    for name in names:
        base = seed.get(name)
        if not base:
            continue
        configs[name] = [v.metrics[name] / base if name in v.metrics else None for v in versions]

    baselines = {b.name: b.scalar for b in state.baselines if b.correct and b.scalar is not None}
    return TrajectoryData(state.target.name, state.id, direction, x_label, xs, [v.scalar for v in versions],
                          running, marks, configs, baselines, attempts, x_end)  # type: ignore[arg-type]


def build_figure(run: Run, *, x: str = "version", attempts: bool = False) -> Figure:
    """The trajectory as a matplotlib Figure (Agg; nothing is shown or saved)."""
    data = trajectory_data(run, x=x)
    return figure_from_data(data, attempts=attempts)


def figure_from_data(data: TrajectoryData, *, attempts: bool = False) -> Figure:
    """Draw :class:`TrajectoryData` (split out so it can be drawn without a run)."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    fig = Figure(figsize=(11, 5.4), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    handles: list[Any] = []

    if attempts and data.attempts:
        rejected = [(a.x, a.scalar) for a in data.attempts if a.outcome == "rejected" and a.scalar is not None]
        failed = [a for a in data.attempts if a.scalar is None or a.outcome == "failed"]
        if rejected:
            sc = ax.scatter([p[0] for p in rejected], [p[1] for p in rejected], s=18, color="0.55",
                            alpha=0.45, linewidths=0, zorder=2, label=f"rejected attempt ({len(rejected)})")
            sc.set_gid("attempts-rejected")
            handles.append(sc)
        if failed:
            # Failed attempts have no score: pin them to the bottom edge of the axes.
            sc = ax.scatter([a.x for a in failed], [0.02] * len(failed), s=24, marker="x", color="tab:red",
                            alpha=0.6, linewidths=1.2, zorder=2, transform=ax.get_xaxis_transform(),
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

    palette = ["tab:gray", "tab:brown", "tab:olive", "tab:cyan", "tab:pink", "tab:purple"]
    for i, (name, value) in enumerate(sorted(data.baselines.items(), key=lambda kv: kv[1])):
        line = ax.axhline(value, color=palette[i % len(palette)], linestyle="--", linewidth=1.2, zorder=1,
                          label=f"baseline {name} ({fmt_number(value)})")
        line.set_gid(f"baseline:{name}")
        ax.annotate(name, xy=(1.0, value), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize=8,
                    color=palette[i % len(palette)])
        handles.append(line)

    ax.set_xlabel(data.x_label)
    sense = "higher is better" if data.direction == "maximize" else "lower is better"
    ax.set_ylabel(f"scalar (geomean of configs unless primary; {sense})")
    if data.x_label == "committed version":
        ax.set_xticks(data.xs)
        ax.set_xticklabels([f"v{int(v)}" for v in data.xs], fontsize=8)
    ax.grid(True, alpha=0.25)

    if data.configs:
        ax2 = ax.twinx()
        colors = ["tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown", "tab:pink", "tab:olive",
                  "tab:cyan"]
        for i, (name, ratios) in enumerate(data.configs.items()):
            pts = [(x, r) for x, r in zip(data.xs, ratios, strict=True) if r is not None]
            (line,) = ax2.plot([p[0] for p in pts], [p[1] for p in pts], linestyle=":", linewidth=1.4,
                               marker=".", markersize=4, color=colors[i % len(colors)], alpha=0.85,
                               label=f"{name} (÷ x_0)")
            line.set_gid(f"config:{name}")
            handles.append(line)
        ax2.set_ylabel("per-config score relative to x_0 (×), dotted")
        ax2.axhline(1.0, color="0.8", linewidth=0.8, zorder=0)

    if attempts and not data.attempts:
        handles.append(Line2D([], [], linestyle="none", label="no rejected or failed attempts"))
    fig.suptitle(f"{data.target}: best {fmt_number(data.running_best[-1])} vs x_0 {fmt_number(data.scalars[0])} "
                 f"({data.gain:+.1%}) over {len(data.xs) - 1} committed versions", fontsize=12)
    ax.set_title(f"run {data.run_id}", fontsize=9, color="0.35")
    fig.legend(handles=handles, loc="upper left", bbox_to_anchor=(0.765, 0.88), fontsize=8, frameon=False)
    fig.subplots_adjust(left=0.07, right=0.69, top=0.86, bottom=0.11)
    return fig


def plot_run(run: Run, output: Path, *, x: str = "version", attempts: bool = False) -> Path:
    """Render the trajectory of ``run`` to ``output`` (``.png``, ``.svg`` or ``.pdf``)."""
    output = Path(output)
    fmt = output.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise AvoError(f"cannot write a plot to {output}: the file must end in .png, .svg or .pdf")
    try:
        fig = build_figure(run, x=x, attempts=attempts)
    except ImportError:
        raise AvoError("plots need matplotlib: pip install 'avo[plot]'") from None
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, format=fmt, bbox_inches="tight")
    return output

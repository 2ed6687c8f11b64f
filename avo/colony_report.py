"""A colony's plot (every island's running best, migrations marked) and its HTML report.

The report says which island found what: each island's best, whether its own agent or a
migrant found it, every migration with its verdict, and each island's lineage. Text taken
from the runs is escaped (messages are written by agents).
"""

from __future__ import annotations

import base64
import html
import io
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avo.colony import load_colony, read_events
from avo.colony_view import colony_summary, open_island
from avo.errors import AvoError
from avo.numbers import fmt_number, fmt_pct
from avo.regular_files import write_json_atomic
from avo.state import read_trajectory

if TYPE_CHECKING:
    from matplotlib.figure import Figure

FORMATS = ("png", "svg", "pdf")


def colony_series(folder: Path) -> dict[str, dict[str, Any]]:
    """Per island: the running best after each step (x_0 first) and the steps a migrant was kept.

    Only islands whose record checks (:func:`avo.colony_view.open_island`) have a series; a
    refused island has ``{"refused": reason}`` instead, and nothing of it is drawn.
    """
    from avo.evolve import running_best

    out: dict[str, dict[str, Any]] = {}
    for name in load_colony(folder).names():
        island = open_island(folder, name)
        if island.refused is not None:
            out[name] = {"refused": island.refused}
        if island.run is None:
            continue
        state = island.run.state
        records = read_trajectory(island.run.paths)
        steps = [r for r in records if r.get("kind") in ("submit", "agent_step")]
        migrants = [(i + 1, r.get("outcome")) for i, r in enumerate(steps) if r.get("migrant")]
        out[name] = {"running_best": running_best(state, records), "migrants": migrants,
                     "direction": state.target.direction}
    return out


def build_colony_figure(folder: Path) -> Figure:
    """Every island's running best against its steps; ▲ a migrant kept, ✕ a migrant that lost."""
    from matplotlib.figure import Figure

    colony = load_colony(folder)
    every = colony_series(folder)
    series = {name: s for name, s in every.items() if "refused" not in s}
    refused = [name for name in every if name not in series]
    fig = Figure(figsize=(10, 5.2), dpi=110)
    ax = fig.add_subplot(1, 1, 1)
    for name, s in series.items():
        ys = s["running_best"]
        line, = ax.plot(range(len(ys)), ys, drawstyle="steps-post", label=name, linewidth=1.8)
        for step, outcome in s["migrants"]:
            if step < len(ys):
                ax.plot([step], [ys[step]], marker="^" if outcome == "accepted" else "x", color=line.get_color(),
                        markersize=8, linestyle="none")
    ax.set_xlabel("step of the island")
    ax.set_ylabel("best score so far")
    ax.set_title(f"colony {colony.id}: {colony.target}, {len(series)} islands ({colony.migration.describe()})\n"
                 "▲ migrant kept, ✕ migrant that lost"
                 + (f"; not drawn, record refused: {', '.join(refused)}" if refused else ""), fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=9)
    return fig


def plot_colony(folder: Path, output: Path) -> Path:
    """Write the colony's plot to ``output`` (.png, .svg or .pdf)."""
    fmt = output.suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        raise AvoError(f"cannot write a plot to {output}: the file must end in .png, .svg or .pdf")
    if not output.parent.is_dir():
        raise AvoError(f"cannot write a plot to {output}: the folder {output.parent} does not exist")
    try:
        fig = build_colony_figure(folder)
    except ImportError:
        raise AvoError("plots need matplotlib: pip install 'avo[plot]'") from None
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, bbox_inches="tight")
    write_json_atomic(output, buf.getvalue(), sync="none")  # renamed in: a link at the name is replaced
    return output


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def write_colony_report(folder: Path, output: Path, *, plot: bool = True) -> Path:
    """One self-contained HTML page for the colony."""
    from avo.prompts import lineage_table

    if not output.parent.is_dir():
        raise AvoError(f"cannot write the report to {output}: the folder {output.parent} does not exist")
    s = colony_summary(folder)
    parts = [f"<h1>avo colony {_e(s['colony'])}</h1>",
             f"<p>target <b>{_e(s['target'])}</b>; {len(s['islands'])} islands; {_e(s['migration_text'])}. "
             f"Written {_e(time.strftime('%Y-%m-%d %H:%M'))}.</p>"]
    if s["best_island"]:
        parts.append(f"<p>Colony best: <b>{_e(s['best_island'])} v{s['best_version']} = {_e(fmt_number(s['best']))}"
                     "</b></p>")
    rows = ["<tr><th class=l>island</th><th>steps</th><th>best</th><th>vs x_0</th><th class=l>best found by</th>"
            "<th>migrants in (kept)</th><th class=l>settings</th></tr>"]
    for r in s["islands"]:
        if not r.get("started"):
            rows.append(f"<tr><td class=l>{_e(r['island'])}</td><td colspan=6>not started</td></tr>")
            continue
        if "refused" in r:  # its claimed scores are what the record check refused: not shown
            rows.append(f"<tr><td class=l>{_e(r['island'])}</td><td colspan=6 class=l>record refused: "
                        f"<pre>{_e(r['refused'])}</pre></td></tr>")
            continue
        settings = ", ".join(f"{k}={v}" for k, v in (("backend", r["backend"]), ("model", r["model"]),
                                                      ("seed", r["seed_option"])) if v is not None)
        settings = ", ".join(x for x in (settings, ", ".join(f"{k}={v}" for k, v in r["options"].items())) if x)
        cls = " class=best" if r["island"] == s["best_island"] else ""
        rows.append(f"<tr{cls}><td class=l>{_e(r['island'])}</td><td>{r['steps']}</td>"
                    f"<td>v{r['best_version']} = {_e(fmt_number(r['best']))}</td>"
                    f"<td>{_e(fmt_pct(r['gain_over_seed']))}</td>"
                    f"<td class=l>{_e(r['best_from'])}</td><td>{r['migrants_in']} ({r['migrants_accepted']})</td>"
                    f"<td class=l>{_e(settings or 'the colony’s')}</td></tr>")
    parts.append("<h2>Islands</h2><table>" + "".join(rows) + "</table>")
    if plot:
        try:
            fig = build_colony_figure(folder)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            parts.append("<h2>Trajectories</h2><img alt='running best per island' src='data:image/png;base64,"
                         + base64.b64encode(buf.getvalue()).decode() + "'>")
        except ImportError:
            parts.append("<p class=muted>(no plot: matplotlib is not installed)</p>")
    events = [e for e in read_events(folder) if e.get("kind") == "migration"]
    mrows = ["<tr><th class=l>receiver</th><th class=l>donor</th><th>step</th><th>outcome</th>"
             "<th>first measurement here</th><th>kept as</th><th class=l>why</th></tr>"]
    for e in events:
        kept = f"v{e['version']}" if e.get("version") is not None else ""
        donor = f"{e.get('donor')} v{e.get('donor_version')}" if e.get("donor_version") is not None else e.get("donor")
        mrows.append(f"<tr><td class=l>{_e(e.get('receiver'))}</td><td class=l>{_e(donor)}</td><td>{_e(e.get('step'))}"
                     f"</td><td>{_e(e.get('outcome'))}</td><td>{_e(fmt_number(e.get('scalar')))}</td><td>{_e(kept)}</td>"
                     f"<td class=l>{_e(e.get('reason'))}</td></tr>")
    parts.append(f"<h2>Migrations ({len(events)})</h2><table>" + "".join(mrows) + "</table>")
    for r in s["islands"]:
        if r.get("started") and "refused" not in r:
            # Opened checked again: the record may have been edited since the summary read it.
            island = open_island(folder, r["island"])
            text = lineage_table(island.run.state, rows=10**9) if island.run is not None else \
                f"record refused: {island.refused}"
            parts.append(f"<h2>{_e(r['island'])}: lineage</h2><pre>{_e(text)}</pre>")
    css = ("body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em}"
           "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;text-align:right}"
           "td.l,th.l{text-align:left}tr.best{background:#eef5ff}pre{background:#f7f7f7;padding:.7em;font-size:12px;"
           "white-space:pre-wrap}img{max-width:100%}.muted{color:#777}")
    write_json_atomic(output, f"<!doctype html><html><head><meta charset=utf-8><title>avo colony {_e(s['colony'])}"
                      f"</title><style>{css}</style></head><body>" + "\n".join(parts) + "</body></html>\n", sync="none")
    return output


def export_colony(folder: Path, dest: Path, *, plot: bool = True) -> list[Path]:
    """Write the colony as a shippable example: its record, and each island as ``avo export`` writes a run."""

    from avo.colony import COLONY_FILE, EVENTS_FILE
    from avo.engine import open_run
    from avo.examples import copy_record_file, export_run

    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for name in (COLONY_FILE, EVENTS_FILE):
        if (folder / name).exists():
            copy_record_file(folder / name, dest / name)
            written.append(dest / name)
    for name in load_colony(folder).names():
        if (folder / name / "run.json").is_file():
            written += export_run(open_run(folder / name, folder), dest / name, plot=plot)
    if plot:
        written.append(plot_colony(folder, dest / "colony.png"))
        written.append(write_colony_report(folder, dest / "colony.html"))
    return written


def verify_colony(dest: Path, **kwargs: Any) -> list[tuple[str, Any]]:
    """Re-evaluate every shipped island's best (:func:`avo.examples.verify_example` each).

    An island must be a folder of the colony (not a link to another example) whose record
    names the same target, evaluator included, as every other island's: each record says
    where its evaluator lives, and one forged island must not choose its own judge.
    """
    import os

    from avo.errors import AvoError
    from avo.examples import verify_example
    from avo.state import RunState

    colony = load_colony(dest)
    names = [n for n in colony.names() if os.path.lexists(dest / n)]
    first: tuple[str, str] | None = None
    for name in names:
        if os.path.islink(dest / name) or os.path.islink(dest / name / "run.json"):
            raise AvoError(f"{dest / name} is a symlink: a colony's island is a folder of its own")
        if not (dest / name / "run.json").is_file():
            continue
        try:
            target = RunState.model_validate_json((dest / name / "run.json").read_bytes()).target
        except ValueError as exc:
            raise AvoError(f"{dest / name / 'run.json'} is unreadable: {str(exc).splitlines()[0]}") from None
        spec = target.model_dump_json()
        if target.name != colony.target:
            raise AvoError(f"{name}'s record names target {target.name!r}, the colony's is {colony.target!r}")
        if first is None:
            first = (name, spec)
        elif spec != first[1]:
            raise AvoError(f"{name}'s record names another target spec (evaluator, directory or terms) than "
                           f"{first[0]}'s; the islands of one colony share one evaluator")
    return [(name, verify_example(dest / name, **kwargs)) for name in names if (dest / name / "run.json").is_file()]

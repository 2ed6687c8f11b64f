"""What a colony looks like: one row per island (status, dashboard) and its migrations (log).

Every island is opened as ``avo status --run ISLAND`` opens it, its record checked against
its lineage: a score the single-run view refuses is never shown (nor made the colony's
best) because it was reached through the colony.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avo.colony import load_colony, read_events
from avo.contract import better, gain
from avo.errors import AvoError
from avo.numbers import fmt_number, fmt_pct
from avo.state import read_trajectory

if TYPE_CHECKING:
    from rich.console import RenderableType

    from avo.engine import Run
    from avo.islands import ColonyProgress


@dataclass
class Island:
    """One island as the colony views see it: its checked run, or why it is not shown."""

    name: str
    path: Path
    run: Run | None = None
    refused: str | None = None  # the record check's (or the layout's) reason; None when shown

    @property
    def started(self) -> bool:
        return self.run is not None or self.refused is not None


def open_island(folder: Path, name: str) -> Island:
    """Island ``name`` of the colony at ``folder``, its record checked (:func:`avo.engine.open_run`).

    Not started: no ``run.json``. Refused, with the reason: the island (or its ``run.json``) is a
    link, which could show another run's record as this island's, or its record disagrees
    with its lineage (an agent's edit of ``run.json`` or ``trajectory.jsonl``).
    """
    from avo.engine import open_run

    path = folder / name
    island = Island(name, path)
    if os.path.islink(path) or os.path.islink(path / "run.json"):
        island.refused = f"{path} is a symlink: a colony's island is a folder of its own"
    elif os.path.lexists(path / "run.json"):
        try:
            island.run = open_run(path, folder)
        except AvoError as exc:
            island.refused = str(exc)
    return island


def refused_line(path: Path | str, reason: str) -> str:
    """The first line of why the island at ``path`` is refused, and where the whole reason is."""
    why = (reason.splitlines() or [""])[0].rstrip(": ")
    return f"record refused: {why} (`avo status --run {path}` says why)"


def colony_summary(folder: Path) -> dict[str, Any]:
    """The colony side by side: every island's best, steps and migrants, and the colony's best.

    A refused island's row says ``refused`` (the reason) instead of its claimed scores, and
    the colony's best comes only from islands whose record checks.
    """
    from avo.evolve import steps_taken

    colony = load_colony(folder)
    rows: list[dict[str, Any]] = []
    direction = "maximize"
    for spec in colony.islands:
        island = open_island(folder, spec.name)
        if island.run is None:
            rows.append({"island": spec.name, "started": island.started, "run": str(island.path),
                         **({"refused": island.refused} if island.refused is not None else {})})
            continue
        paths, state = island.run.paths, island.run.state
        direction = state.target.direction
        records = read_trajectory(paths)
        migrants = [r for r in records if r.get("kind") == "submit" and r.get("migrant")]
        best = state.best_version
        found = "seed" if best.n == 0 else (
            "migrant from " + str(next((r["migrant"]["island"] for r in migrants if r.get("version") == best.n),
                                       "")) if any(r.get("version") == best.n for r in migrants) else "own agent")
        rows.append({"island": spec.name, "started": True, "run": str(paths.root), "steps": steps_taken(records),
                     "max_steps": state.options.max_steps, "versions": len(state.versions),
                     "best_version": best.n, "best": best.scalar, "seed": state.seed_version.scalar,
                     "gain_over_seed": gain(best.scalar, state.seed_version.scalar, direction),
                     "best_from": found, "migrants_in": len(migrants),
                     "migrants_accepted": sum(r.get("outcome") == "accepted" for r in migrants),
                     "backend": spec.backend, "model": spec.model, "seed_option": spec.seed,
                     "options": spec.options})
    scored = [r for r in rows if r.get("started") and "refused" not in r]
    top = None
    for r in scored:
        if top is None or better(r["best"], top["best"], direction):  # type: ignore[arg-type]
            top = r
    events = [e for e in read_events(folder) if e.get("kind") == "migration"]
    return {"colony": colony.id, "path": str(folder), "target": colony.target, "direction": direction,
            "migration": colony.migration.model_dump(), "migration_text": colony.migration.describe(),
            "islands": rows, "refused": [r["island"] for r in rows if "refused" in r],
            "best_island": top["island"] if top else None,
            "best": top["best"] if top else None, "best_version": top["best_version"] if top else None,
            "migrations": {k: sum(e.get("outcome") == k for e in events)
                           for k in ("accepted", "rejected", "failed", "skipped")}}


def status_lines(folder: Path) -> list[str]:
    """``avo status --run COLONY``."""
    s = colony_summary(folder)
    lines = [f"colony {s['colony']} — target {s['target']} — {len(s['islands'])} islands; {s['migration_text']}"]
    lines.append(f"{'island':<10} {'steps':>7} {'best':>14} {'vs x_0':>8}  {'from':<22} migrants in (accepted)")
    for r in s["islands"]:
        if not r.get("started"):
            lines.append(f"{r['island']:<10} (not started)")
            continue
        if "refused" in r:
            lines.append(f"{r['island']:<10} {refused_line(r['run'], r['refused'])}")
            continue
        steps = f"{r['steps']}/{r['max_steps']}" if r["max_steps"] else str(r["steps"])
        star = "★" if r["island"] == s["best_island"] else " "
        lines.append(f"{r['island']:<10} {steps:>7} {'v' + str(r['best_version']) + '=' + fmt_number(r['best']):>14} "
                     f"{fmt_pct(r['gain_over_seed']):>8}{star} {r['best_from']:<22} "
                     f"{r['migrants_in']} ({r['migrants_accepted']})")
    m = s["migrations"]
    if s["best_island"]:
        lines.append(f"colony best: {s['best_island']} v{s['best_version']} = {fmt_number(s['best'])}; "
                     f"migrations: {m['accepted']} accepted, {m['rejected']} rejected, {m['failed']} failed, "
                     f"{m['skipped']} skipped")
    if s["refused"]:  # said beside the best: it is the best of the islands whose record checks
        lines.append(f"not compared (record refused): {', '.join(s['refused'])}")
    lines.append(f"one island: --run {s['path']}/island-K")
    return lines


def log_lines(folder: Path) -> list[str]:
    """``avo log --run COLONY``: every island's steps, interleaved by time, and the migrations."""
    colony = load_colony(folder)
    entries: list[tuple[float, str]] = []
    refused: list[str] = []
    for name in colony.names():
        island = open_island(folder, name)
        if island.refused is not None:  # its steps are not shown: they are what the check refused
            refused.append(f"{name:<10} {refused_line(island.path, island.refused)}")
        if island.run is None:
            continue
        for r in read_trajectory(island.run.paths):
            if r.get("kind") == "submit":
                m = r.get("migrant")
                came = f" [migrant from {m['island']} v{m['version']}]" if isinstance(m, dict) else ""
                score = fmt_number(r["scalar"]) if r.get("scalar") is not None else "-"
                kept = f" -> v{r['version']}" if r.get("version") is not None else ""
                entries.append((float(r.get("time") or 0), f"{name:<10} step {r.get('step'):>3} {r.get('outcome'):<9}"
                                f"{score:>12}{kept}{came}  {str(r.get('message') or '').splitlines()[0][:60]}"))
            elif r.get("kind") == "migration_skipped":
                entries.append((float(r.get("time") or 0), f"{name:<10} migration skipped: {r.get('reason')}"))
    return refused + [line for _, line in sorted(entries, key=lambda e: e[0])]


def render(progress: ColonyProgress) -> RenderableType:
    """The live dashboard: one row per island and the colony's best."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    best = progress.best()
    elapsed = int(progress.elapsed())
    head = Text(f"avo colony {progress.colony} — {progress.target} — {len(progress.rows)} islands, "
                f"{progress.parallel} at once — {elapsed // 60}m{elapsed % 60:02d}s — spend ${progress.spend():.4f}"
                + (f" / ${progress.max_cost:.2f}" if progress.max_cost is not None else ""))
    table = Table(expand=True)
    for col in ("island", "backend", "steps", "best", "vs x_0", "migrants in", "now", "last step"):
        table.add_column(col)
    for name, r in progress.rows.items():
        steps = f"{r.steps}/{r.max_steps}" if r.max_steps else str(r.steps)
        over = fmt_pct(gain(r.best, r.seed, progress.direction)) if r.best is not None and r.seed else "-"  # type: ignore[arg-type]
        mark = " ★" if best and best[0] == name else ""
        table.add_row(name, r.backend, steps, f"v{r.best_version}={fmt_number(r.best)}{mark}" if r.best is not None
                      else "-", over, f"{r.migrants_in} ({r.accepted_in} kept)", r.activity[:40], r.last[:50])
    foot = Text(f"colony best: {best[0]} v{best[1].best_version} = {fmt_number(best[1].best)}" if best and best[1].best
                is not None else "colony best: -")
    return Group(head, table, foot)


class LiveColonyDashboard:
    """The rich Live view of a colony (a terminal)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.live import Live

        self.console = Console()
        self._progress: ColonyProgress | None = None
        self.live = Live(console=self.console, refresh_per_second=4, get_renderable=self._renderable)
        self._started = False

    def _renderable(self) -> RenderableType:
        from rich.text import Text

        return Text("starting …") if self._progress is None else render(self._progress)

    def handle(self, event: str, progress: ColonyProgress, data: dict[str, Any]) -> None:
        self._progress = progress
        if not self._started:
            self.live.start()
            self._started = True
        self.live.refresh()
        if event == "stop":
            self.close()
            self.console.print(f"stopped: {data.get('reason')}; `avo status --run {progress.colony}` "
                               "shows every island", markup=False)

    def close(self) -> None:
        if self._started:
            self.live.stop()
            self._started = False

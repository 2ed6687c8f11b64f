"""What a colony looks like: one row per island (status, dashboard) and its migrations (log)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from avo.colony import load_colony, read_events
from avo.contract import better, gain
from avo.numbers import fmt_number, fmt_pct
from avo.state import RunPaths, load_state, read_trajectory

if TYPE_CHECKING:
    from rich.console import RenderableType

    from avo.islands import ColonyProgress


def colony_summary(folder: Path) -> dict[str, Any]:
    """The colony side by side: every island's best, steps and migrants, and the colony's best."""
    from avo.evolve import steps_taken

    colony = load_colony(folder)
    rows = []
    direction = "maximize"
    for spec in colony.islands:
        paths = RunPaths((folder / spec.name).resolve())
        if not paths.run_json.is_file():
            rows.append({"island": spec.name, "started": False})
            continue
        state = load_state(paths)
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
    scored = [r for r in rows if r.get("started")]
    top = None
    for r in scored:
        if top is None or better(r["best"], top["best"], direction):  # type: ignore[arg-type]
            top = r
    events = [e for e in read_events(folder) if e.get("kind") == "migration"]
    return {"colony": colony.id, "path": str(folder), "target": colony.target, "direction": direction,
            "migration": colony.migration.model_dump(), "migration_text": colony.migration.describe(),
            "islands": rows, "best_island": top["island"] if top else None,
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
    lines.append(f"one island: --run {s['path']}/island-K")
    return lines


def log_lines(folder: Path) -> list[str]:
    """``avo log --run COLONY``: every island's steps, interleaved by time, and the migrations."""
    colony = load_colony(folder)
    entries: list[tuple[float, str]] = []
    for name in colony.names():
        paths = RunPaths((folder / name).resolve())
        if not paths.run_json.is_file():
            continue
        for r in read_trajectory(paths):
            if r.get("kind") == "submit":
                m = r.get("migrant")
                came = f" [migrant from {m['island']} v{m['version']}]" if isinstance(m, dict) else ""
                score = fmt_number(r["scalar"]) if r.get("scalar") is not None else "-"
                kept = f" -> v{r['version']}" if r.get("version") is not None else ""
                entries.append((float(r.get("time") or 0), f"{name:<10} step {r.get('step'):>3} {r.get('outcome'):<9}"
                                f"{score:>12}{kept}{came}  {str(r.get('message') or '').splitlines()[0][:60]}"))
            elif r.get("kind") == "migration_skipped":
                entries.append((float(r.get("time") or 0), f"{name:<10} migration skipped: {r.get('reason')}"))
    return [line for _, line in sorted(entries, key=lambda e: e[0])]


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

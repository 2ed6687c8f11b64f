"""Colony commands: ``avo evolve --islands N`` / ``--resume COLONY`` and the colony views."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import typer

from avo.cli.common import EXIT_ERROR, runs_root, say, shout

EXIT_INTERRUPTED = 130


def _reporter(json_log: bool, plain: bool) -> Any:
    from avo.islands import JsonColonyReporter, PlainColonyReporter

    if json_log:
        return JsonColonyReporter(sys.stdout)
    if plain or not sys.stdout.isatty():
        return PlainColonyReporter(sys.stdout)
    from avo.colony_view import LiveColonyDashboard

    return LiveColonyDashboard()


def colony_evolve(*, target: str | None, backend: str | None, colony: Path | None, islands: int | None,
                  parallel: int | None, migration: str | None, migrate_every: int | None,
                  island_option: list[str] | None, max_steps: int | None, time_budget: float | None,
                  step_timeout: float | None, supervisor_timeout: float | None, max_cost: float | None,
                  quick: bool, stall_limit: int | None, seed: int | None, model: str | None,
                  base_url: str | None, options: dict[str, str], json_log: bool, plain: bool,
                  sandbox: str | None, executor: str | None, executor_options: dict[str, str],
                  runs_dir: Path | None) -> None:
    """Start a colony (``--islands N``) or continue one (``--resume COLONY``), then drive it."""
    from avo.colony import TOPOLOGIES, MigrationPolicy, island_specs, parse_island_options
    from avo.errors import AvoError
    from avo.evolve import EvolveConfig
    from avo.islands import evolve_colony, last_colony_config, start_colony, start_missing
    from avo.plugins import find_backend

    previous: dict[str, Any] = {}
    if colony is not None:
        if target or islands:
            raise AvoError("give either --target/--islands (a new colony) or --resume COLONY, not both")
        if migration or migrate_every or island_option or quick or stall_limit or executor_options:
            say("note: --migration, --migrate-every, --island-option, --quick, --stall-limit and the executor "
                "are fixed when a colony starts; ignored on --resume", err=True)
        previous = last_colony_config(colony) or {}
    chosen = backend or previous.get("backend")
    if not chosen:
        raise AvoError("say which backend runs the agents: --backend NAME (see `avo backends`)")
    find_backend(chosen)
    same = chosen == previous.get("backend")
    opts = {k: v for k, v in (previous.get("options") or {}).items() if v != "***"} if same else {}
    opts.update(options)
    config = EvolveConfig(
        backend=chosen, max_steps=max_steps if max_steps is not None else previous.get("max_steps"),
        time_limit=time_budget, step_timeout=step_timeout or previous.get("step_timeout") or 2700.0,
        supervisor_timeout=supervisor_timeout or previous.get("supervisor_timeout") or 1200.0,
        max_cost=max_cost if max_cost is not None else previous.get("max_cost"),
        model=model or (previous.get("model") if same else None),
        base_url=base_url or (previous.get("base_url") if same else None),
        seed=seed if seed is not None else previous.get("seed"), options=opts)
    if colony is None:
        if not target:
            raise AvoError("say which target the colony evolves: --target NAME|PATH")
        assert islands is not None
        topology = migration or "ring"
        if topology not in TOPOLOGIES:
            raise AvoError(f"--migration {topology!r}: choose one of {', '.join(TOPOLOGIES)}")
        policy = MigrationPolicy(topology=topology, **({"every": migrate_every} if migrate_every else {}))
        specs = island_specs(islands, parse_island_options(island_option, islands))
        for spec in specs:  # before any seed is evaluated
            info = find_backend(spec.backend or chosen)
            if not info.available:
                raise AvoError(f"backend {spec.backend or chosen!r} of {spec.name} cannot run here: "
                               f"{info.reason or 'not available'}; nothing was started")
        colony = start_colony(target, runs_root(runs_dir), specs, policy, progress=lambda m: say(m, err=True),
                              parallel=parallel,
                              max_steps=config.max_steps, quick=quick, stall_limit=stall_limit, sandbox=sandbox,
                              executor=executor, executor_options=executor_options)
        say(f"started colony {colony.name} at {colony}", err=True)
    else:
        for name in start_missing(colony, progress=lambda m: say(m, err=True), parallel=parallel):
            say(f"started {name}, which the interrupted start had not reached", err=True)
    reporter = _reporter(json_log, plain)
    try:
        summary = evolve_colony(colony, config, parallel=parallel, reporter=reporter)
    finally:
        close = getattr(reporter, "close", None)
        if close is not None:
            close()
    if summary.interrupted:
        say(f"interrupted; continue with: avo evolve --resume {colony}", err=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    if summary.failed:
        shout("error:", "bold red", f"{summary.stop_reason} (see each island's logs/colony-driver.log)")
        raise typer.Exit(EXIT_ERROR)


def colony_ref(run: str | None, runs_dir: Path | None) -> Path | None:
    """The colony ``--run`` names, if it names one (an island or a run gives None)."""
    from avo.colony import resolve_colony

    return resolve_colony(run, runs_root(runs_dir)) if run else None

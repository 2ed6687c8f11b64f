"""``avo evolve``: unattended mode (a backend agent per step) and its dashboard."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from avo.cli.common import (
    EXIT_ERROR,
    ExecutorOpt,
    ExecutorOptionsOpt,
    RunsDir,
    SandboxOpt,
    key_values,
    runs_root,
    say,
    shout,
    user_errors,
)

if TYPE_CHECKING:
    from avo.evolve import Reporter

EXIT_INTERRUPTED = 130


def _options(pairs: list[str]) -> dict[str, str]:
    from avo.errors import AvoError

    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise AvoError(f"--option expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = value
    return out


def _duration(value: str | None, flag: str) -> float | None:
    from avo.errors import AvoError
    from avo.models import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise AvoError(f"{flag}: {exc}") from None


def _reporter(json_log: bool, plain: bool) -> Reporter:
    from avo.dashboard import JsonReporter, LiveDashboard, PlainReporter

    if json_log:
        return JsonReporter(sys.stdout)
    if plain or not sys.stdout.isatty():
        return PlainReporter(sys.stdout)
    return LiveDashboard()


Target = Annotated[str | None, typer.Option("--target", "-t", help="Target name or folder with target.yaml.")]
Backend = Annotated[str | None, typer.Option("--backend", "-b", help="Agent backend (see `avo backends`).")]
Resume = Annotated[str | None, typer.Option("--resume", help="Continue a run (or a colony): its id or path.")]
MaxSteps = Annotated[int | None, typer.Option(
    "--max-steps", min=1, help="Steps in the whole run (a step that changed nothing counts).")]
TimeBudget = Annotated[str | None, typer.Option("--time", help="Wall-time budget of this invocation, e.g. 90m, 12h.")]
StepTimeout = Annotated[str | None, typer.Option("--step-timeout", help="Per-step agent timeout (default 45m).")]
SupTimeout = Annotated[str | None, typer.Option(
    "--supervisor-timeout", help="Timeout of a supervisor answer (default 20m).")]
MaxCost = Annotated[float | None, typer.Option(
    "--max-cost", min=0.0, help="Stop before a step would start past this spend in USD (as the backend reports it).")]
Quick = Annotated[bool, typer.Option("--quick", help="Start the run in the target's quick mode.")]
StallLimit = Annotated[int | None, typer.Option(
    "--stall-limit", min=1, help="Steps without a new best before the supervisor (default: the target's).")]
Seed = Annotated[int | None, typer.Option("--seed", help="RNG seed for reproducible backends (step k gets seed+k).")]
Model = Annotated[str | None, typer.Option("--model", help="Model name passed to the backend.")]
BaseUrl = Annotated[str | None, typer.Option("--base-url", help="API endpoint (api and openai backends).")]
Options = Annotated[list[str] | None, typer.Option("--option", "-o", help="Backend option KEY=VALUE (repeatable).")]
JsonLog = Annotated[bool, typer.Option("--json-log", help="One JSON object per event on stdout.")]
Plain = Annotated[bool, typer.Option("--plain", help="Plain log lines even on a terminal.")]
Islands = Annotated[int | None, typer.Option(
    "--islands", min=2, help="Start a colony of N islands (N ordinary runs) that evolve at once, with migration.")]
Parallel = Annotated[int | None, typer.Option(
    "--parallel", min=1, help="Islands stepping at the same time (default: all of them).")]
Migration = Annotated[str | None, typer.Option(
    "--migration", help="Migration topology of a new colony: ring (default), best or none.")]
MigrateEvery = Annotated[int | None, typer.Option(
    "--migrate-every", min=1, help="An island's steps between two migrant offers (default 3).")]
IslandOptions = Annotated[list[str] | None, typer.Option(
    "--island-option", help="Per-island setting ISLAND:KEY=VALUE (keys backend, model, seed, or a backend option).")]


def register(app: typer.Typer) -> None:
    """Add ``avo evolve`` to ``app``."""

    @app.command()
    def evolve(
        target: Target = None,
        backend: Backend = None,
        resume: Resume = None,
        max_steps: MaxSteps = None,
        time_budget: TimeBudget = None,
        step_timeout: StepTimeout = None,
        supervisor_timeout: SupTimeout = None,
        max_cost: MaxCost = None,
        quick: Quick = False,
        stall_limit: StallLimit = None,
        seed: Seed = None,
        model: Model = None,
        base_url: BaseUrl = None,
        option: Options = None,
        json_log: JsonLog = False,
        plain: Plain = False,
        sandbox: SandboxOpt = None,
        executor: ExecutorOpt = None,
        executor_option: ExecutorOptionsOpt = None,
        runs_dir: RunsDir = None,
        islands: Islands = None,
        parallel: Parallel = None,
        migration: Migration = None,
        migrate_every: MigrateEvery = None,
        island_option: IslandOptions = None,
    ) -> None:
        """Run the search unattended: a backend agent performs each variation step.

        Start with --target and --backend, or continue with --resume RUN (settings of the
        last invocation are reused unless given again). Ctrl-C stops cleanly. --islands N
        evolves a colony of N runs at once (continue it with --resume COLONY).
        """
        from avo.cli.colony import colony_evolve
        from avo.colony import resolve_colony
        from avo.errors import AvoError

        with user_errors():
            colony = resolve_colony(resume, runs_root(runs_dir)) if resume else None
            if islands is not None or colony is not None:
                colony_evolve(
                    target=target, backend=backend, colony=colony, islands=islands, parallel=parallel,
                    migration=migration, migrate_every=migrate_every, island_option=island_option,
                    max_steps=max_steps, time_budget=_duration(time_budget, "--time"),
                    step_timeout=_duration(step_timeout, "--step-timeout"),
                    supervisor_timeout=_duration(supervisor_timeout, "--supervisor-timeout"),
                    max_cost=max_cost, quick=quick, stall_limit=stall_limit, seed=seed, model=model,
                    base_url=base_url, options=_options(option or []), json_log=json_log, plain=plain,
                    sandbox=sandbox, executor=executor,
                    executor_options=key_values(executor_option, "--executor-option"), runs_dir=runs_dir)
                return
            if parallel is not None or migration or migrate_every or island_option:
                raise AvoError("--parallel, --migration, --migrate-every and --island-option apply to a colony: "
                               "add --islands N (or --resume COLONY)")
        from avo.engine import open_run, start_run
        from avo.errors import AvoError
        from avo.evolve import EvolveConfig, last_config
        from avo.evolve import evolve as run_evolve
        from avo.plugins import find_backend
        from avo.state import read_trajectory

        with user_errors():
            root = runs_root(runs_dir)
            if resume and target:
                raise AvoError("give either --target (a new run) or --resume RUN, not both")
            previous: dict[str, Any] = {}
            if resume:
                run = open_run(resume, root)
                previous = last_config(read_trajectory(run.paths)) or {}
            chosen = backend or previous.get("backend")
            if not chosen:
                raise AvoError("say which backend runs the agent: --backend NAME (see `avo backends`)")
            info = find_backend(chosen)
            if not info.available:
                raise AvoError(f"backend {chosen!r} cannot run here: {info.reason or 'not available'}"
                               + (f"; it needs: {', '.join(info.needs)}" if info.needs else ""))
            opts = dict(previous.get("options") or {}) if chosen == previous.get("backend") else {}
            opts = {k: v for k, v in opts.items() if v != "***"}
            opts.update(_options(option or []))
            same = chosen == previous.get("backend")
            config = EvolveConfig(
                backend=chosen,
                max_steps=max_steps if max_steps is not None else previous.get("max_steps"),
                time_limit=_duration(time_budget, "--time"),
                step_timeout=_duration(step_timeout, "--step-timeout") or previous.get("step_timeout") or 2700.0,
                supervisor_timeout=_duration(supervisor_timeout, "--supervisor-timeout")
                or previous.get("supervisor_timeout") or 1200.0,
                max_cost=max_cost if max_cost is not None else previous.get("max_cost"),
                model=model or (previous.get("model") if same else None),
                base_url=base_url or (previous.get("base_url") if same else None),
                seed=seed if seed is not None else previous.get("seed"),
                options=opts,
            )
            missing = info.missing_options(config.options)
            if missing:  # before a run is created, the seed evaluated and baselines measured
                raise AvoError(f"backend {chosen!r} needs {', '.join(missing)}; nothing was started")
            if not resume:
                if not target:
                    raise AvoError("say which target to evolve: --target NAME|PATH (or --resume RUN)")
                run = start_run(target, root, max_steps=config.max_steps, quick=quick, stall_limit=stall_limit,
                                progress=lambda m: say(m, err=True), sandbox=sandbox, executor=executor,
                                executor_options=key_values(executor_option, "--executor-option"))
                say(f"started {run.state.id} at {run.paths.root}", err=True)
            elif quick or stall_limit or executor_option or (executor and executor != run.state.options.executor):
                say("note: --quick, --stall-limit, --executor and --executor-option are fixed when a run "
                    f"starts; ignored on --resume (this run evaluates on {run.state.options.executor})", err=True)
            reporter = _reporter(json_log, plain)
            try:
                summary = run_evolve(run, config, reporter)
            finally:
                close = getattr(reporter, "close", None)
                if close is not None:
                    close()
            if summary.interrupted:
                say(f"interrupted; continue with: avo evolve --resume {run.paths.root}", err=True)
                raise typer.Exit(EXIT_INTERRUPTED)
            if summary.backend_failed:
                shout("error:", "bold red", f"stopped: {summary.stop_reason}")
                raise typer.Exit(EXIT_ERROR)

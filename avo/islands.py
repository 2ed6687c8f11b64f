"""Unattended colonies: start N islands, then step them concurrently (``avo evolve --islands N``).

Each island is driven by its own ``avo evolve --resume ISLAND --json-log`` child process:
the same loop, engine and executor as a single run, so islands evaluate at the same time
(``--parallel K`` children at once) and a kill of any of them is recovered by that island's
journal. The children die with this process (``PR_SET_PDEATHSIG``), so a SIGKILL of
``avo evolve --islands N`` stops every island where its own crash safety takes over, and
``--resume COLONY`` continues each. With fewer workers than islands, the islands take
turns in rounds of ``every`` steps (the migration interval), so a migrant is always fresh.
Migration itself happens inside each island's loop (:func:`avo.evolve._migration_step`).
"""

from __future__ import annotations

import ctypes
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Protocol

from avo.colony import ColonyState, IslandSpec, MigrationPolicy, append_event, create_colony, load_colony, read_events
from avo.errors import AvoError
from avo.evolve import EvolveConfig, spend_of, steps_taken
from avo.state import RunPaths, load_state, read_trajectory

EXIT_INTERRUPTED = 130


@dataclass
class IslandRow:
    """One island as the dashboard shows it."""

    name: str
    backend: str
    steps: int = 0
    max_steps: int | None = None
    best: float | None = None
    best_version: int = 0
    seed: float | None = None
    spend: float = 0.0
    activity: str = "waiting"
    last: str = ""
    migrants_in: int = 0
    accepted_in: int = 0
    exit: str | None = None


@dataclass
class ColonyProgress:
    """A snapshot of the colony for reporters."""

    colony: str
    target: str
    direction: str
    rows: dict[str, IslandRow]
    parallel: int
    started: float = field(default_factory=time.monotonic)
    time_limit: float | None = None
    max_cost: float | None = None
    stop_reason: str | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def spend(self) -> float:
        return sum(r.spend for r in self.rows.values())

    def best(self) -> tuple[str, IslandRow] | None:
        scored = [(n, r) for n, r in self.rows.items() if r.best is not None]
        if not scored:
            return None
        pick = max if self.direction == "maximize" else min
        return pick(scored, key=lambda x: x[1].best)  # type: ignore[arg-type, return-value]


class ColonyReporter(Protocol):
    """Receives ``start``, ``island`` (a child's event, with ``island``), ``exit`` and ``stop``."""

    def handle(self, event: str, progress: ColonyProgress, data: dict[str, Any]) -> None: ...


@dataclass
class ColonySummary:
    colony: str
    stop_reason: str
    interrupted: bool
    best_island: str | None
    best_scalar: float | None
    spend: float
    failed: list[str]


# -- starting --------------------------------------------------------------------------------


def start_colony(target: str, runs_root: Path, islands: list[IslandSpec], policy: MigrationPolicy, *,
                 progress: Callable[[str], None] | None = None, parallel: int | None = None, **start: Any) -> Path:
    """Create the colony and start every island (each an ordinary run: seed, baselines, v0)."""
    from avo.plugins import find_target

    spec = find_target(target)
    folder = create_colony(spec.name, runs_root, islands, policy,
                           {"target": str(Path(target).resolve()) if spec.directory is not None else target,
                            **start})
    start_missing(folder, progress=progress, parallel=parallel)
    return folder


def _staging(folder: Path, name: str) -> Path:
    return folder / f".starting-{name}"


def _start_island(folder: Path, name: str, loud: bool) -> str:
    """Start one island in its own staging folder (concurrent starts never meet there: a start
    removes the unfinished folders it finds beside it), then move the finished run into place."""
    from avo.engine import start_run
    from avo.partials import remove_stale

    def say(line: str) -> None:
        if loud:
            print(f"  [{name}] {line}", file=sys.stderr, flush=True)

    args = dict(load_colony(folder).start)
    staging = _staging(folder, name)
    staging.mkdir(exist_ok=True)
    if not (staging / name / "run.json").is_file():  # else a killed start finished it already
        remove_stale(staging)
        start_run(args.pop("target"), staging, run_id=name, progress=say, **args)
    os.rename(staging / name, folder / name)
    shutil.rmtree(staging, ignore_errors=True)
    return name


def start_missing(folder: Path, *, progress: Callable[[str], None] | None = None,
                  parallel: int | None = None) -> list[str]:
    """Start the islands a killed start left out, ``parallel`` at once (each in a process of its own:
    the evaluator's signal handling belongs to a main thread)."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    from avo.partials import remove_stale

    say = progress or (lambda line: None)
    colony = load_colony(folder)
    remove_stale(folder)
    todo = [n for n in colony.names() if not (folder / n / "run.json").is_file()]
    if not todo:
        return []
    say(f"starting {', '.join(todo)} of {colony.id} (each evaluates its seed and baselines) ...")
    workers = max(1, min(parallel or len(todo), len(todo)))
    if workers == 1:
        done = [_start_island(folder, n, progress is not None) for n in todo]
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("fork")) as pool:
            done = list(pool.map(_start_island, [folder] * len(todo), todo, [progress is not None] * len(todo)))
    for name in done:
        append_event(folder, {"kind": "island_start", "island": name})
    return done


# -- driving ---------------------------------------------------------------------------------


SEED_STRIDE = 1000  # island k's seed is --seed + 1000 (k-1): distinct streams, no overlap in short runs


def island_config(base: EvolveConfig, spec: IslandSpec, index: int = 0) -> EvolveConfig:
    """The colony's settings with the island's own (``--island-option``) on top.

    With ``--seed S`` and no seed of its own, island ``index`` (0-based) gets ``S + 1000 index``:
    islands that share a backend then still explore differently.
    """
    data = base.model_dump()
    if base.seed is not None:
        data["seed"] = base.seed + SEED_STRIDE * index
    if spec.backend and spec.backend != base.backend:
        data["options"] = {}  # another backend's options are not this one's
        data["backend"] = spec.backend
    data["options"] = {**data["options"], **spec.options}
    if spec.model:
        data["model"] = spec.model
    if spec.seed is not None:
        data["seed"] = spec.seed
    return EvolveConfig(**data)


def _log_tail(log: Path) -> list[str]:
    """The driver log's lines, read without following a link (an island's agent can write logs/)."""
    from avo.regular_files import open_regular

    try:
        with os.fdopen(open_regular(log, follow_links=False, why="not read"), "rb") as fh:
            return fh.read().decode("utf-8", errors="replace").strip().splitlines()
    except (OSError, AvoError):
        return []


def _die_with_parent() -> None:
    """In the child: SIGKILL when the colony driver dies, however it dies (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def child_command(island: Path, config: EvolveConfig, max_steps: int | None, time_left: float | None,
                  cost_cap: float | None) -> list[str]:
    cmd = [sys.executable, "-m", "avo", "evolve", "--resume", str(island), "--json-log", "--backend", config.backend,
           "--step-timeout", f"{config.step_timeout}s", "--supervisor-timeout", f"{config.supervisor_timeout}s"]
    if max_steps is not None:
        cmd += ["--max-steps", str(max_steps)]
    if time_left is not None:
        cmd += ["--time", f"{max(1, int(time_left))}s"]
    if cost_cap is not None:
        cmd += ["--max-cost", repr(cost_cap)]
    if config.model:
        cmd += ["--model", config.model]
    if config.base_url:
        cmd += ["--base-url", config.base_url]
    if config.seed is not None:
        cmd += ["--seed", str(config.seed)]
    for key, value in config.options.items():
        cmd += ["--option", f"{key}={value}"]
    return cmd


def _row(paths: RunPaths, spec: IslandSpec, config: EvolveConfig) -> IslandRow:
    state = load_state(paths)
    records = read_trajectory(paths)
    row = IslandRow(spec.name, config.backend, steps=steps_taken(records), max_steps=config.max_steps,
                    best=state.best_version.scalar, best_version=state.best_version.n,
                    seed=state.seed_version.scalar, spend=spend_of(records)[0])
    migrants = [r for r in records if r.get("kind") == "submit" and r.get("migrant")]
    row.migrants_in, row.accepted_in = len(migrants), sum(r.get("outcome") == "accepted" for r in migrants)
    return row


@dataclass
class _Child:
    name: str
    proc: subprocess.Popen[str]
    target_steps: int | None
    log: Path
    stop: str | None = None
    buffer: str = ""


def last_colony_config(folder: Path) -> dict[str, Any] | None:
    """The settings of the last ``avo evolve`` of this colony (what ``--resume`` reuses)."""
    for e in reversed(read_events(folder)):
        if e.get("kind") == "evolve_start" and isinstance(e.get("config"), dict):
            return dict(e["config"])
    return None


def evolve_colony(folder: Path, config: EvolveConfig, *, parallel: int | None = None,
                  reporter: ColonyReporter | None = None) -> ColonySummary:
    """Step every island until each island's budget (``max_steps`` steps each), the colony's
    wall time (``time_limit``) or spend (``max_cost``, the islands together) is spent."""
    colony = load_colony(folder)
    missing = [n for n in colony.names() if not (folder / n / "run.json").is_file()]
    if missing:
        raise AvoError(f"islands {', '.join(missing)} of {colony.id} were never started; "
                       f"`avo evolve --resume {folder}` starts them")
    from avo.plugins import find_backend

    configs = {s.name: island_config(config, s, i) for i, s in enumerate(colony.islands)}
    for name, cfg in configs.items():
        info = find_backend(cfg.backend)
        if not info.available:
            raise AvoError(f"backend {cfg.backend!r} of {name} cannot run here: {info.reason or 'not available'}")
        lacking = info.missing_options(cfg.options)
        if lacking:
            raise AvoError(f"backend {cfg.backend!r} of {name} needs {', '.join(lacking)}")
    workers = max(1, min(parallel or len(colony.islands), len(colony.islands)))
    state0 = load_state(RunPaths(folder / colony.islands[0].name))
    progress = ColonyProgress(colony.id, colony.target, state0.target.direction,
                              {s.name: _row(RunPaths(folder / s.name), s, configs[s.name]) for s in colony.islands},
                              workers, time_limit=config.time_limit, max_cost=config.max_cost)
    report = reporter or _Null()
    append_event(folder, {"kind": "evolve_start", "parallel": workers, "config": config.public()})
    report.handle("start", progress, {"migration": colony.migration.describe()})
    rounds = None if workers >= len(colony.islands) else colony.migration.every
    queue = list(colony.names())
    running: dict[str, _Child] = {}
    failed: list[str] = []
    interrupted = False
    stop_reason = ""
    sel = selectors.DefaultSelector()
    try:
        while queue or running:
            while queue and len(running) < workers and not stop_reason:
                name = queue.pop(0)
                child = _spawn(folder, colony, name, configs[name], progress, rounds)
                if isinstance(child, str):
                    stop_reason = stop_reason or child if child.startswith(("time", "spend")) else stop_reason
                    progress.rows[name].activity = progress.rows[name].exit = child
                    continue
                running[name] = child
                assert child.proc.stdout is not None
                sel.register(child.proc.stdout, selectors.EVENT_READ, child)
                progress.rows[name].activity = "starting"
                report.handle("island", progress, {"island": name, "event": "spawn"})
            if not running:
                break
            for key, _ in sel.select(timeout=1.0):
                child = key.data
                chunk = os.read(key.fd, 65536).decode("utf-8", "replace")
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                child.buffer += chunk
                *lines, child.buffer = child.buffer.split("\n")
                for line in lines:
                    _take(child, line, progress, report)
            for name, child in list(running.items()):
                if child.proc.poll() is None or any(k.data is child for k in sel.get_map().values()):
                    continue
                del running[name]
                rc = child.proc.wait()
                row = _row(RunPaths(folder / name), colony.islands[colony.names().index(name)], configs[name])
                row.activity, row.last = "idle", progress.rows[name].last
                progress.rows[name] = row
                again = rc == 0 and _another_round(child, row, config)
                if rc == EXIT_INTERRUPTED:
                    interrupted = True
                    row.exit = "interrupted"
                elif rc != 0:
                    failed.append(name)
                    tail = _log_tail(child.log)
                    row.exit = f"exit {rc}: " + (tail or [""])[-1][:200]
                elif not again:
                    row.exit = child.stop or "done"
                row.activity = row.exit or "waiting for a worker"
                report.handle("exit", progress, {"island": name, "rc": rc, "reason": row.exit})
                if again and not interrupted:
                    queue.append(name)
    except KeyboardInterrupt:
        interrupted = True
        for child in running.values():  # each island records its step in flight and keeps what it accepted
            child.proc.send_signal(signal.SIGINT)
        for child in running.values():
            child.proc.wait()
    finally:
        sel.close()
    for name in colony.names():
        if name not in failed:
            keep = progress.rows[name]
            progress.rows[name] = _row(RunPaths(folder / name), colony.islands[colony.names().index(name)],
                                       configs[name])
            progress.rows[name].exit, progress.rows[name].last = keep.exit, keep.last
            progress.rows[name].activity = keep.exit or "stopped"
    if interrupted:
        stop_reason = "interrupted (Ctrl-C)"
    elif failed:
        stop_reason = f"islands {', '.join(failed)} stopped on an error"
    else:
        stop_reason = stop_reason or "every island's budget is spent"
    progress.stop_reason = stop_reason
    best = progress.best()
    append_event(folder, {"kind": "evolve_stop", "reason": stop_reason, "spend_usd": round(progress.spend(), 6),
                          "best_island": best[0] if best else None, "best": best[1].best if best else None})
    report.handle("stop", progress, {"reason": stop_reason})
    return ColonySummary(colony.id, stop_reason, interrupted, best[0] if best else None,
                         best[1].best if best else None, progress.spend(), failed)


class _Null:
    def handle(self, event: str, progress: ColonyProgress, data: dict[str, Any]) -> None:
        return None


def _spawn(folder: Path, colony: ColonyState, name: str, config: EvolveConfig, progress: ColonyProgress,
           rounds: int | None) -> _Child | str:
    """Start the island's child for its next round, or say why it has nothing left to do."""
    row = progress.rows[name]
    budget = config.max_steps
    if budget is not None and row.steps >= budget:
        return f"step budget spent ({row.steps}/{budget} steps)"
    target = budget if rounds is None else min(budget if budget is not None else row.steps + rounds,
                                               row.steps + rounds)
    time_left = None if config.time_limit is None else config.time_limit - progress.elapsed()
    if time_left is not None and time_left < 1.0:
        return "time budget spent"
    cap = None
    if config.max_cost is not None:
        left = config.max_cost - progress.spend()
        if left <= 0:
            return f"spend ${progress.spend():.4f} reached --max-cost ${config.max_cost:.4f}"
        # What the colony has left is shared by the islands that may still step, so together
        # they stay within it (each may finish the step it started, as a single run does).
        sharing = sum(1 for r in progress.rows.values() if r.exit is None or r is row)
        cap = row.spend + left / max(1, sharing)
    from avo.regular_files import linked_on_the_way

    linked = linked_on_the_way(folder, folder / name)
    if linked:  # its logs and its evolve would go wherever it leads
        return f"not started: {linked}; an island is a folder of the colony's own, never a link"
    cmd = child_command(folder / name, config, target, time_left, cap)
    log = folder / name / "logs" / "colony-driver.log"  # a file, not a pipe: a full pipe would stall the child
    from avo.regular_files import open_own

    with os.fdopen(open_own(log, append=True, own=1), "a", encoding="utf-8") as stderr:  # never through a link
        stderr.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd[2:])}\n")
        stderr.flush()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True,
                                start_new_session=True, preexec_fn=_die_with_parent)
    return _Child(name, proc, target, log=log)


def _take(child: _Child, line: str, progress: ColonyProgress, report: ColonyReporter) -> None:
    try:
        event = json.loads(line)
    except ValueError:
        return
    if not isinstance(event, dict):
        return
    row = progress.rows[child.name]
    row.steps = int(event.get("step") or row.steps)
    row.best = event.get("best", row.best)
    row.best_version = int(event.get("best_version") or row.best_version)
    row.spend = float(event.get("spend_usd") or row.spend)
    kind = event.get("event")
    if kind == "step_begin":
        row.activity = f"step {event.get('attempt')}: agent working"
    elif kind == "note":
        row.activity = str(event.get("text") or row.activity)[:80]
    elif kind == "supervisor_begin":
        row.activity = "supervisor review"
    elif kind == "step_end":
        row.activity = "between steps"
        row.last = f"{event.get('outcome')}: {str(event.get('message') or '')[:60]}"
        if str(event.get("message") or "").startswith("migrant from"):
            row.migrants_in += 1
            row.accepted_in += event.get("outcome") == "accepted"
    elif kind == "stop":
        child.stop = str(event.get("reason") or "")
        row.activity = "stopping"
    report.handle("island", progress, {"island": child.name, "event": kind, "data": event})


def _another_round(child: _Child, row: IslandRow, config: EvolveConfig) -> bool:
    """A child that ended on its round's step budget goes back in the queue (others are done)."""
    reason = child.stop or ""
    if not reason.startswith("step budget reached"):
        return False
    return config.max_steps is None or row.steps < config.max_steps


# -- reporting ---------------------------------------------------------------------------------


class PlainColonyReporter:
    """One line per finished step of any island (no terminal, or ``--plain``)."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream or sys.stdout

    def handle(self, event: str, progress: ColonyProgress, data: dict[str, Any]) -> None:
        from avo.numbers import fmt_number

        if event == "start":
            self.stream.write(f"colony {progress.colony}: {len(progress.rows)} islands, {progress.parallel} at once; "
                              f"{data.get('migration')}\n")
        elif event == "island" and data.get("event") == "step_end":
            e = data.get("data") or {}
            score = fmt_number(e["scalar"]) if e.get("scalar") is not None else "-"
            self.stream.write(f"[{data['island']}] step {e.get('step')}: {e.get('outcome')} {score}  "
                              f"best v{e.get('best_version')}={fmt_number(e.get('best') or 0)}  "
                              f"{str(e.get('message') or '')[:70]}\n")
        elif event == "exit":
            self.stream.write(f"[{data['island']}] {data.get('reason') or 'round done'}\n")
        elif event == "stop":
            best = progress.best()
            where = f"; colony best {best[0]} v{best[1].best_version} = {fmt_number(best[1].best or 0)}" if best else ""
            self.stream.write(f"stopped: {data.get('reason')}{where}; spend ${progress.spend():.4f}\n")
        self.stream.flush()


class JsonColonyReporter:
    """Each island's events as its child wrote them, with ``island`` added (``--json-log``)."""

    def __init__(self, stream: IO[str] | None = None):
        self.stream = stream or sys.stdout

    def handle(self, event: str, progress: ColonyProgress, data: dict[str, Any]) -> None:
        if event == "island" and isinstance(data.get("data"), dict):
            obj = {**data["data"], "island": data["island"], "colony": progress.colony}
        else:
            obj = {"event": f"colony_{event}", "colony": progress.colony,
                   **{k: v for k, v in data.items() if k != "data"}}
            best = progress.best()
            obj.update({"best_island": best[0] if best else None, "best": best[1].best if best else None,
                        "spend_usd": round(progress.spend(), 6)})
        self.stream.write(json.dumps(obj, default=str) + "\n")
        self.stream.flush()

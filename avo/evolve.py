"""Unattended mode: the loop of ``avo evolve``. A backend agent is the operator of each step.

It drives the same engine as session mode: :func:`avo.prompts.variation_prompt` builds the
prompt, the backend's ``avo_agent_step`` works in ``work/``, :func:`avo.engine.submit`
evaluates and applies the one commit policy (a score the agent claims is never used), and
when the engine says the supervisor is due, :func:`avo.engine.write_brief` ->
``avo_supervise`` -> :func:`avo.engine.record_redirect`. Budgets bound steps, wall time
and spend; Ctrl-C records the step in flight as interrupted and a later ``--resume``
continues. What a reporter (the dashboard) sees is a :class:`Progress` snapshot.
"""

from __future__ import annotations

import signal
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from avo.colony import colony_of
from avo.contract import better, gain
from avo.engine import Run, record_redirect, revert, submit, write_brief
from avo.errors import AvoError, BlockedError
from avo.models import BackendInfo, StepRequest, StepResult, SupervisorBrief
from avo.recovery import recover
from avo.state import RunState, append_trajectory, load_state, read_trajectory, run_lock, save_state

STEP_KINDS = ("submit", "agent_step")  # trajectory records that count as a step taken
BACKEND_ERROR_LIMIT = 3
RECENT = 8
SECRET_WORDS = ("key", "token", "secret", "password")


class EvolveConfig(BaseModel):
    """How ``avo evolve`` drives a run (recorded in the trajectory so a resume can reuse it)."""

    model_config = ConfigDict(extra="forbid")

    backend: str
    max_steps: int | None = Field(None, ge=1, description="Steps in the whole run, counting steps without a change")
    time_limit: float | None = Field(None, gt=0, description="Wall seconds for this invocation")
    step_timeout: float = Field(2700.0, gt=0)
    supervisor_timeout: float = Field(1200.0, gt=0)
    max_cost: float | None = Field(None, ge=0, description="Stop before a step would start past this spend (USD)")
    model: str | None = None
    base_url: str | None = None
    seed: int | None = None
    options: dict[str, str] = Field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The config as recorded: option values that look like secrets are masked."""
        data = self.model_dump()
        data["options"] = {k: ("***" if any(w in k.lower() for w in SECRET_WORDS) else v)
                           for k, v in self.options.items()}
        return data


@dataclass
class StepEvent:
    """One finished step as the dashboard shows it."""

    attempt: int
    step: int
    outcome: str  # accepted | rejected | failed | no_change | timeout | error
    status: str  # what the backend reported: ok | error | timeout
    message: str
    scalar: float | None = None
    gain: float | None = None  # against the best before the step
    reason: str = ""
    wall_s: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    version: int | None = None
    new_best: bool = False
    parent: int | None = None  # the best version the step started from
    where: str | None = None  # the executor and node that measured it


@dataclass
class Progress:
    """A snapshot of the run for reporters."""

    run_id: str
    target: str
    backend: str
    direction: str
    model: str | None = None
    attempt: int = 0
    max_steps: int | None = None
    started: float = field(default_factory=time.monotonic)
    time_limit: float | None = None
    seed_scalar: float = 0.0
    best_scalar: float = 0.0
    best_version: int = 0
    best_metrics: dict[str, float] = field(default_factory=dict)
    seed_metrics: dict[str, float] = field(default_factory=dict)
    baseline: tuple[str, float] | None = None  # the strongest baseline
    recent: deque[StepEvent] = field(default_factory=lambda: deque(maxlen=RECENT))
    supervisor_briefs: int = 0
    supervisor_due: bool = False
    running_best: list[float] = field(default_factory=list)
    spend: float = 0.0
    input_tokens: int = 0
    output_tokens: int = 0
    max_cost: float | None = None
    activity: str = "starting"
    stop_reason: str | None = None

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def time_left(self) -> float | None:
        return None if self.time_limit is None else max(0.0, self.time_limit - self.elapsed())

    def gain_over_seed(self) -> float:
        return gain(self.best_scalar, self.seed_scalar, self.direction)  # type: ignore[arg-type]

    def gain_over_baseline(self) -> float | None:
        if self.baseline is None:
            return None
        return gain(self.best_scalar, self.baseline[1], self.direction)  # type: ignore[arg-type]

    def refresh(self, state: RunState) -> None:
        """Take the lineage figures from the run's state."""
        best = state.best_version
        self.best_scalar, self.best_version, self.best_metrics = best.scalar, best.n, dict(best.metrics)
        self.supervisor_briefs = state.supervisor.briefs
        self.supervisor_due = state.supervisor.due


class Reporter(Protocol):
    """Receives every event of the loop (``start``, ``step_begin``, ``step_end``,
    ``supervisor_begin``, ``supervisor_end``, ``note``, ``stop``)."""

    def handle(self, event: str, progress: Progress, data: dict[str, Any]) -> None: ...


class NullReporter:
    """Reports nothing (library use)."""

    def handle(self, event: str, progress: Progress, data: dict[str, Any]) -> None:
        return None


@dataclass
class EvolveSummary:
    """How an ``avo evolve`` invocation ended."""

    run_id: str
    stop_reason: str
    interrupted: bool
    steps_taken: int
    best_version: int
    best_scalar: float
    spend: float
    #: stopped because the backend failed too many steps in a row
    backend_failed: bool = False


@dataclass
class _InFlight:
    phase: str  # migration | agent | submit | supervisor
    attempt: int
    step: int


# -- reading the record ----------------------------------------------------------------------


def steps_taken(records: list[dict[str, Any]]) -> int:
    """Steps the run has taken: submits plus agent steps that left no change."""
    return sum(1 for r in records if r.get("kind") in STEP_KINDS)


def spend_of(records: list[dict[str, Any]]) -> tuple[float, int, int]:
    """Cost (USD) and tokens the backends have reported over the whole run."""
    cost, tin, tout = 0.0, 0, 0
    for r in records:
        usage = r.get("usage")
        if isinstance(usage, dict):
            cost += float(usage.get("cost_usd") or 0.0)
            tin += int(usage.get("input_tokens") or 0)
            tout += int(usage.get("output_tokens") or 0)
    return cost, tin, tout


def running_best(state: RunState, records: list[dict[str, Any]]) -> list[float]:
    """The best scalar after each step (x_0 first)."""
    best = state.seed_version.scalar
    series = [best]
    for r in records:
        if r.get("kind") == "submit":
            if r.get("outcome") == "accepted" and r.get("scalar") is not None \
                    and better(float(r["scalar"]), best, state.target.direction):
                best = float(r["scalar"])
            series.append(best)
        elif r.get("kind") == "agent_step":
            series.append(best)
    return series


def last_config(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The settings of the last ``avo evolve`` on this run (what ``--resume`` reuses)."""
    for r in reversed(records):
        if r.get("kind") == "evolve_start" and isinstance(r.get("config"), dict):
            return dict(r["config"])
    return None


def _event_from_record(r: dict[str, Any]) -> StepEvent:
    usage = r.get("usage") if isinstance(r.get("usage"), dict) else {}
    assert isinstance(usage, dict)
    return StepEvent(
        attempt=int(usage.get("attempt") or r.get("attempt") or 0), step=int(r.get("step") or 0),
        outcome=str(r.get("outcome")), status=str(usage.get("status", "ok")), message=str(r.get("message") or ""),
        scalar=r.get("scalar"), reason=str(r.get("reason") or r.get("error") or ""),
        wall_s=float(usage.get("wall_s") or 0.0), input_tokens=int(usage.get("input_tokens") or 0),
        output_tokens=int(usage.get("output_tokens") or 0), cost_usd=float(usage.get("cost_usd") or 0.0),
        version=r.get("version"), parent=r.get("best_before"), where=r.get("where"),
        # Records before "new_best" was stored: an accepted step that "improves" (or was confirmed) was one.
        new_best=bool(r.get("new_best", r.get("outcome") == "accepted"
                            and str(r.get("reason", "")).startswith(("improves", "confirmed")))),
    )


# -- the loop -------------------------------------------------------------------------------


def _strongest_baseline(state: RunState) -> tuple[str, float] | None:
    scored = [(b.name, b.scalar) for b in state.baselines if b.correct and b.scalar is not None]
    if not scored:
        return None
    pick = max if state.target.direction == "maximize" else min
    return pick(scored, key=lambda x: x[1])  # type: ignore[arg-type, return-value]


def _prepare(run: Run, config: EvolveConfig) -> list[str]:
    """Recover from a kill, set the step budget, and discard an unfinished candidate."""
    with run_lock(run.paths):
        run.state = load_state(run.paths)
        notes = recover(run)
        if config.max_steps is not None and run.state.options.max_steps != config.max_steps:
            run.state.options.max_steps = config.max_steps  # the engine's budget follows --max-steps
            save_state(run.paths, run.state)
    best = run.state.best_version
    if run.lineage.is_dirty(best.sha):
        path = revert(run)  # archived in rejected/, never lost
        notes.append(f"work/ held an unfinished candidate; archived it in {path} and reset to v{best.n}")
    return notes


def make_progress(run: Run, config: EvolveConfig) -> Progress:
    """The dashboard's view of a run, from its state and trajectory."""
    state = run.state
    records = read_trajectory(run.paths)
    cost, tin, tout = spend_of(records)
    progress = Progress(
        run_id=state.id, target=state.target.name, backend=config.backend, direction=state.target.direction,
        model=config.model, attempt=steps_taken(records),
        max_steps=config.max_steps or state.options.max_steps, time_limit=config.time_limit,
        seed_scalar=state.seed_version.scalar, seed_metrics=dict(state.seed_version.metrics),
        baseline=_strongest_baseline(state), running_best=running_best(state, records),
        spend=cost, input_tokens=tin, output_tokens=tout, max_cost=config.max_cost,
    )
    for r in records:
        if r.get("kind") in STEP_KINDS:
            progress.recent.append(_event_from_record(r))
    progress.refresh(state)
    return progress


def _stop_reason(state: RunState, progress: Progress, config: EvolveConfig) -> str | None:
    max_steps = progress.max_steps
    if max_steps is not None and progress.attempt >= max_steps:
        return f"step budget reached ({progress.attempt}/{max_steps} steps)"
    if state.steps_left() == 0:
        return f"the run's step budget is spent ({state.steps}/{state.options.max_steps})"
    left = progress.time_left()
    if left is not None and left < 1.0:
        return "time budget spent"
    if config.max_cost is not None and progress.spend >= config.max_cost:
        return f"spend ${progress.spend:.4f} reached --max-cost ${config.max_cost:.4f}"
    return None


def _bounded(timeout: float, progress: Progress) -> float:
    left = progress.time_left()
    return timeout if left is None else max(1.0, min(timeout, left))


def evolve(run: Run, config: EvolveConfig, reporter: Reporter | None = None) -> EvolveSummary:
    """Run steps until a budget is spent, the user interrupts, or something fails for good."""
    from avo.plugins import find_backend

    info = find_backend(config.backend)
    if not info.available:
        needs = f"; it needs: {', '.join(info.needs)}" if info.needs else ""
        raise AvoError(f"backend {config.backend!r} cannot run here: {info.reason or 'not available'}{needs}")
    missing = info.missing_options(config.options)
    if missing:
        raise AvoError(f"backend {config.backend!r} needs {', '.join(missing)}")
    report = reporter or NullReporter()
    notes = _prepare(run, config)
    progress = make_progress(run, config)
    append_trajectory(run.paths, {"kind": "evolve_start", "step": run.state.steps + 1,
                                  "resumed_at_step": progress.attempt, "config": config.public()})
    report.handle("start", progress, {"notes": notes})
    island = colony_of(run.paths) is not None
    taken = 0
    backend_errors = 0
    backend_failed = False
    in_flight: _InFlight | None = None
    interrupted = False
    try:
        while True:
            run.state = load_state(run.paths)
            progress.refresh(run.state)
            reason = _stop_reason(run.state, progress, config)
            if reason:
                break
            if run.state.supervisor.due:
                in_flight = _InFlight("supervisor", progress.attempt, run.state.steps + 1)
                _supervise(run, config, info, progress, report)
                in_flight = None
                continue
            attempt = progress.attempt + 1
            step = run.state.steps + 1
            in_flight = _InFlight("migration", attempt, step)
            migrated = _migration_step(run, progress, report, in_flight) if island else None
            in_flight = _InFlight("agent", attempt, step)
            event = migrated or _step(run, config, info, progress, report, in_flight)
            in_flight = None
            taken += 1
            progress.attempt = attempt
            progress.recent.append(event)
            progress.running_best.append(progress.best_scalar if event.scalar is None or not event.new_best
                                         else event.scalar)
            run.state = load_state(run.paths)
            progress.refresh(run.state)
            report.handle("step_end", progress, {"event": event})
            backend_errors = backend_errors + 1 if event.outcome == "error" else 0
            if backend_errors >= BACKEND_ERROR_LIMIT:
                reason = f"the backend failed {backend_errors} steps in a row (last: {event.reason})"
                backend_failed = True
                break
    except KeyboardInterrupt:
        interrupted = True
        reason = "interrupted (Ctrl-C)"
        _record_interrupt(run, config, in_flight)
        progress.refresh(run.state)
    except AvoError as exc:
        append_trajectory(run.paths, {"kind": "evolve_stop", "step": run.state.steps, "reason": f"error: {exc}",
                                      "steps_taken": taken, "spend_usd": round(progress.spend, 6)})
        progress.stop_reason = f"error: {exc}"
        report.handle("stop", progress, {"reason": progress.stop_reason})
        raise
    progress.stop_reason = reason
    progress.activity = "stopped"
    append_trajectory(run.paths, {"kind": "evolve_stop", "step": run.state.steps, "reason": reason,
                                  "steps_taken": taken, "spend_usd": round(progress.spend, 6)})
    report.handle("stop", progress, {"reason": reason})
    return EvolveSummary(run.state.id, reason, interrupted, taken, progress.best_version, progress.best_scalar,
                         progress.spend, backend_failed)


def _usage(result: StepResult, wall: float, config: EvolveConfig, attempt: int) -> dict[str, Any]:
    usage: dict[str, Any] = {
        "input_tokens": int(result.input_tokens), "output_tokens": int(result.output_tokens),
        "cost_usd": float(result.cost_usd), "wall_s": round(wall, 3), "backend": config.backend,
        "status": result.status, "attempt": attempt,
    }
    if config.model:
        usage["model"] = config.model
    if result.error:
        usage["agent_error"] = result.error[:500]
    for key in ("num_turns", "session_id", "tool_calls"):
        value = getattr(result, key, None)
        if value is not None:
            usage[key] = value
    return usage


def _step(run: Run, config: EvolveConfig, info: BackendInfo, progress: Progress, report: Reporter,
          in_flight: _InFlight) -> StepEvent:
    from avo.plugins import PluginError, call_backend_hook
    from avo.prompts import variation_prompt

    paths, state = run.paths, run.state
    attempt, step = in_flight.attempt, in_flight.step
    prompt = variation_prompt(run)
    request = StepRequest(
        run_dir=paths.root, work_dir=paths.work, prompt=prompt, step=step,
        timeout=_bounded(config.step_timeout, progress), target=state.target,
        log_path=paths.logs / f"agent-{attempt:04d}.log", model=config.model, base_url=config.base_url,
        seed=None if config.seed is None else config.seed + attempt, options=dict(config.options),
    )
    progress.activity = f"step {attempt}: {config.backend} agent working"
    report.handle("step_begin", progress, {"attempt": attempt, "step": step})
    started = time.monotonic()
    try:
        result = call_backend_hook(info, "avo_agent_step", request=request)
    except PluginError as exc:  # a backend bug or a malformed result is a failed step, not a dead run
        if exc.deliberate:
            raise
        result = StepResult(status="error", error=str(exc))
    wall = result.wall_s if result.wall_s > 0 else time.monotonic() - started
    usage = _usage(result, wall, config, attempt)
    progress.spend += result.cost_usd
    progress.input_tokens += result.input_tokens
    progress.output_tokens += result.output_tokens
    message = " ".join(result.message.split())[:300] or f"{config.backend} step {step} ({result.status})"
    event = StepEvent(attempt=attempt, step=step, outcome="", status=result.status, message=message,
                      wall_s=wall, input_tokens=result.input_tokens, output_tokens=result.output_tokens,
                      cost_usd=result.cost_usd)
    in_flight.phase = "submit"
    progress.activity = f"step {attempt}: avo evaluating the work tree"
    report.handle("note", progress, {"text": progress.activity})
    event.parent = run.state.best_version.n
    try:
        out = submit(run, message, extra=usage)
    except BlockedError:
        raise
    except AvoError as exc:
        if not str(exc).startswith("nothing to submit"):
            raise
        event.wall_s = time.monotonic() - started
        event.outcome = "no_change" if result.status == "ok" else result.status
        event.reason = result.error or "the agent left work/ unchanged"
        append_trajectory(paths, {"kind": "agent_step", "id": f"attempt{attempt}", "step": step,
                                  "attempt": attempt, "outcome": event.outcome, "message": message,
                                  "error": result.error, "usage": usage})
        return event
    event.wall_s = time.monotonic() - started  # the step as the user waits for it: agent + evaluation
    event.outcome = out.outcome
    event.scalar = out.evaluation.scalar
    event.reason = out.reason
    event.where = out.evaluation.where
    event.gain = out.gain  # what the decision stood on, as its reason says
    if out.version is not None:
        event.version = out.version.n
        event.new_best = out.version.new_best
        event.scalar = out.version.scalar
    return event


def _migration_step(run: Run, progress: Progress, report: Reporter, in_flight: _InFlight) -> StepEvent | None:
    """An island's step is a migration when one is due and a migrant was evaluated."""
    from avo.colony import load_colony
    from avo.migration import is_due, offer

    colony = colony_of(run.paths)
    if colony is None:
        return None
    try:
        due = is_due(load_colony(colony), read_trajectory(run.paths))
    except AvoError:
        due = True  # another island's agent may write colony.json: offer() records why nothing arrives
    if not due:
        return None
    progress.activity = f"step {in_flight.attempt}: a migrant arrives"
    report.handle("note", progress, {"text": progress.activity})
    best_before = run.state.best_version
    started = time.monotonic()
    done = offer(run, progress=lambda line: report.handle("note", progress, {"text": line}))
    if done is None or done.submitted is None:
        if done is not None:
            report.handle("note", progress, {"text": f"migration skipped: {done.reason}"})
        return None
    out = done.submitted
    assert done.origin is not None
    event = StepEvent(attempt=in_flight.attempt, step=out.step, outcome=out.outcome, status="ok",
                      message=f"migrant from {done.origin.island} v{done.origin.version}",
                      scalar=out.evaluation.scalar, reason=out.reason, wall_s=time.monotonic() - started,
                      parent=best_before.n, where=out.evaluation.where)
    event.gain = out.gain
    if out.version is not None:
        event.version, event.new_best, event.scalar = out.version.n, out.version.new_best, out.version.scalar
    return event


def _supervise(run: Run, config: EvolveConfig, info: BackendInfo, progress: Progress, report: Reporter) -> None:
    from avo.plugins import call_backend_hook

    paths = run.paths
    reason = run.state.supervisor.reason or "a review was requested"
    progress.activity = f"supervisor: {reason}"
    report.handle("supervisor_begin", progress, {"reason": reason})
    path, text = write_brief(run)
    n = run.state.supervisor.briefs
    brief = SupervisorBrief(run_dir=paths.root, prompt=text, reason=reason,
                            timeout=_bounded(config.supervisor_timeout, progress),
                            log_path=paths.logs / f"supervisor-{n:03d}.log", model=config.model,
                            base_url=config.base_url, options=dict(config.options))
    answer = call_backend_hook(info, "avo_supervise", brief=brief)
    if not answer.redirect.strip():
        raise AvoError(f"backend {config.backend!r} answered the supervisor brief with an empty redirect")
    usage = {"input_tokens": answer.input_tokens, "output_tokens": answer.output_tokens,
             "cost_usd": answer.cost_usd, "backend": config.backend}
    redirect_path = record_redirect(run, answer.redirect)
    append_trajectory(paths, {"kind": "supervisor_answer", "step": run.state.steps + 1, "backend": config.backend,
                              "path": str(redirect_path.relative_to(paths.root)), "usage": usage})
    progress.spend += answer.cost_usd
    progress.input_tokens += answer.input_tokens
    progress.output_tokens += answer.output_tokens
    run.state = load_state(paths)
    progress.refresh(run.state)
    report.handle("supervisor_end", progress, {"redirect": answer.redirect, "path": str(redirect_path)})


def _record_interrupt(run: Run, config: EvolveConfig, in_flight: _InFlight | None) -> None:
    """Record the step in flight as interrupted; keep everything accepted; clean work/."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not tear the record
    try:
        with run_lock(run.paths):
            run.state = load_state(run.paths)
            recover(run)  # finishes or undoes a submit that was cut half-way
        state = run.state
        if in_flight is not None and not (in_flight.phase != "supervisor" and state.steps >= in_flight.step):
            append_trajectory(run.paths, {
                "kind": "interrupted", "id": f"interrupted-attempt{in_flight.attempt}", "step": in_flight.step,
                "attempt": in_flight.attempt, "phase": in_flight.phase, "backend": config.backend,
                "note": "stopped by the user (SIGINT) while the step was in flight; nothing accepted is lost"})
        if run.lineage.is_dirty(state.best_version.sha):
            revert(run)  # the unfinished candidate is archived in rejected/
        run.state = load_state(run.paths)
    finally:
        signal.signal(signal.SIGINT, previous)

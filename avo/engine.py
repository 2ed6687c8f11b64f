"""The run engine: start, evaluate, submit, revert. One engine for every driver.

Session mode (CLI, MCP) and unattended mode (``avo evolve``) call these same functions, so
there is one commit policy and one record. Every mutation happens under the run's lock;
``run.json`` is the commit point, and a journal lets the next command finish or undo a
submit that was killed half-way (:mod:`avo.recovery`; what a step writes: :mod:`avo.step_record`).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import stat
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from avo import __version__
from avo.contract import failed, gain
from avo.draws import Medians
from avo.errors import AvoError, BlockedError, IntegrityError
from avo.eval_inputs import strip_meta
from avo.evaluation import MALFORMED_BASELINES, MALFORMED_PREFIX, Evaluation, ignored_settings, recorded_settings
from avo.integrity import compare, hash_tree
from avo.lineage import META_DIR, CandidateError, Lineage, diff_fingerprint, read_any
from avo.models import EvalJob, JobResult, TargetSpec, WorkLimits
from avo.partials import builds_partials
from avo.policy import confirm, first_look, single_decision
from avo.prompts import fmt_number
from avo.record_check import SCORES_FILE, check_record
from avo.record_format import clean_message, scores_file, scores_line, terms, terms_digest, trailer_lines
from avo.recovery import recover
from avo.regular_files import write_json_atomic
from avo.state import (
    Baseline,
    RunOptions,
    RunPaths,
    RunState,
    Version,
    append_trajectory,
    list_runs,
    load_state,
    parse_state,
    read_trajectory,
    resolve_run,
    run_json_bytes,
    run_lock,
    save_state,
    trajectory_bytes,
    validated,
)
from avo.step_record import (
    Started,
    archive_late_edits,
    count_not_accepted,
    count_step,
    kept_files_folder,
    record_interrupted,
    unused_name,
    update_supervisor,
    version_tags,
    write_journal,
)
from avo.work_guard import check_work_limits

if TYPE_CHECKING:
    from avo.colony import Migrant

NOTES_TEMPLATE = """# NOTES

Scratch memory for this run. avo never resets this file: record what you tried, what
measured better or worse, and what to try next.
"""


@dataclass
class Run:
    """An open run: where it lives, what avo believes, and its lineage."""

    paths: RunPaths
    state: RunState
    # The trajectory's bytes as this command's check under the lock verified them (before the
    # command's own appends): read once, not again for what the command looks up in it.
    checked: bytes | None = None
    # run.json's bytes as open_run(check=False) parsed them into ``state``, for the mutating
    # function it opened the run for (which takes them once, under the lock).
    opened: bytes | None = None
    # The trajectory's bytes as open_run's check (without the lock) read them, for what a
    # read-only command shows (`avo status`'s repairs): not read again.
    viewed: bytes | None = None

    @property
    def lineage(self) -> Lineage:
        return Lineage(self.paths.work, self.paths.private / "index")

    def save(self) -> None:
        save_state(self.paths, self.state)


@dataclass
class EvalReport:
    """One evaluation of the work tree, as shown to the agent."""

    evaluation: Evaluation
    tree: str
    compared_to: Version
    gain: float | None
    warning: str | None = None
    screening: bool = False  # the target's quick mode inside a full run: not comparable


@dataclass
class SubmitOutcome:
    """What a submit did."""

    step: int
    outcome: str  # accepted | rejected | failed
    evaluation: Evaluation
    version: Version | None
    best: Version
    reason: str
    diff_path: Path | None = None
    supervisor_due: bool = False
    supervisor_reason: str | None = None
    notes: list[str] = field(default_factory=list)
    #: the gain the decision stood on (the candidate against the best; their medians after a
    #: confirmation, so it matches ``reason``), None when nothing was decided on a score
    gain: float | None = None
    #: after a confirmation, the per-config figures it decided on (each side at its median)
    medians: Medians | None = None


# -- helpers -------------------------------------------------------------------------------


def _evaluator_tree(spec: TargetSpec) -> tuple[Path, set[Path]]:
    from avo.evaluator_copy import evaluator_source

    root, exclude, _ = evaluator_source(spec)
    return root, exclude


def _plugin_module(spec: TargetSpec) -> str | None:
    from avo.evaluator_copy import evaluator_source

    return evaluator_source(spec)[2]


def _hashes(spec: TargetSpec, kb: Path, runs_root: Path) -> dict[str, dict[str, str]]:
    from avo.evaluator_copy import RUNTIME_KEY, runtime_hashes

    root, exclude = _evaluator_tree(spec)
    # `cd my_target && avo start --target .` puts ./runs inside the target folder: the runs
    # are not the evaluator, and they change with every command.
    return {"evaluator": hash_tree(root, exclude | {runs_root}), "kb": hash_tree(kb),
            RUNTIME_KEY: runtime_hashes(plugin=spec.directory is None)}


def _recorded_evaluator(
    spec: TargetSpec, recorded: dict[str, str], runs_dir: Path | None
) -> tuple[Path, set[Path], dict[str, str]]:
    """``(root, excluded, recorded)``: the evaluator's tree and the recorded hashes that count."""
    root, exclude = _evaluator_tree(spec)
    if runs_dir is not None:
        exclude.add(runs_dir)  # the runs directory, when it sits inside the target
    skipped = {p.relative_to(root).as_posix() + "/" for p in exclude if p.is_relative_to(root)}
    # Runs recorded before seed/ and kb/ were left out still compare like with like.
    kept = {k: v for k, v in recorded.items() if not any(k.startswith(prefix) for prefix in skipped)}
    return root, exclude, kept


def evaluator_hashes(
    spec: TargetSpec, recorded: dict[str, str], runs_dir: Path | None = None
) -> tuple[Path, dict[str, str], dict[str, str]]:
    """``(root, recorded, current)`` hashes of the evaluator, compared like with like."""
    root, exclude, kept = _recorded_evaluator(spec, recorded, runs_dir)
    return root, kept, hash_tree(root, exclude)


def runs_home(folder: Path) -> Path:
    """The runs directory that holds ``folder``'s runs: a colony's islands live one level down
    (and start two levels down, in the colony's staging folders)."""
    from avo.colony import is_colony

    if is_colony(folder):
        return folder.parent
    return folder.parent.parent if is_colony(folder.parent) else folder


def check_integrity(run: Run) -> None:
    """Refuse to evaluate when the evaluator or the KB changed after the run started."""
    root, recorded, current = evaluator_hashes(
        run.state.target, run.state.hashes.get("evaluator", {}), runs_home(run.paths.root.parent))
    compare("evaluator", recorded, current, root)
    compare("knowledge base", run.state.hashes.get("kb", {}), hash_tree(run.paths.kb), run.paths.kb)


def _job_fields(run: Run) -> dict[str, Any]:
    """What every job of this run carries: the recorded hashes, the sandbox, the secret."""
    from avo import evaluator_copy

    spec = run.state.target
    # The job's executor hashes the evaluator where it runs; no need to hash it here too.
    _, _, recorded = _recorded_evaluator(spec, run.state.hashes.get("evaluator", {}), runs_home(run.paths.root.parent))
    runtime = run.state.hashes.get(evaluator_copy.RUNTIME_KEY)
    if runtime is None:  # a run recorded before the copy existed: what runs now is its baseline
        runtime = run.state.hashes[evaluator_copy.RUNTIME_KEY] = evaluator_copy.runtime_hashes(
            _plugin_module(spec) is not None)
        run.save()
    level = run.state.sandbox if run.state.sandbox in ("bwrap", "none") else "none"
    return {"run_id": run.state.id, "evaluator_hashes": recorded, "runtime_hashes": runtime, "sandbox": level,
            # A fresh secret per evaluation, recorded only after it: nobody, the agent included,
            # can know the inputs a candidate will meet before they are drawn.
            "secret": secrets.token_hex(16), "workspace": run.paths.private}


def _executor(run: Run, override: str | None = None, options: dict[str, str] | None = None
              ) -> tuple[str, dict[str, str]]:
    """The executor of this evaluation: the run's, unless this call names another."""
    name = override or run.state.options.executor
    if options is None:
        options = run.state.options.executor_options if name == run.state.options.executor else {}
    return name, options


def _capacity(run: Run, name: str, options: dict[str, str]) -> int:
    from avo import executors

    return 1 if name == executors.DEFAULT else executors.check(name, run.state.target, options).capacity


def _new_run_id(spec: TargetSpec, root: Path) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = f"{spec.name}-{stamp}"
    run_id, n = base, 1
    while (root / run_id).exists() or (root / f".{run_id}.partial").exists():
        n += 1
        run_id = f"{base}-{n}"
    return run_id


def _write_avo_eval(paths: RunPaths) -> None:
    script = (
        "#!/bin/sh\n"
        "# f, the scoring function: evaluates this run's work/ and prints a short summary.\n"
        "# Full output goes to logs/. Every call is recorded in trajectory.jsonl.\n"
        f'exec "{sys.executable}" -m avo eval --run "$(cd "$(dirname "$0")" && pwd)" "$@"\n'
    )
    paths.avo_eval.write_text(script)
    paths.avo_eval.chmod(paths.avo_eval.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _log_path(paths: RunPaths, label: str) -> Path:
    return paths.logs / f"{time.strftime('%Y%m%d-%H%M%S')}-{label}.log"


def _tree_job(run: Run, tree: str, label: str, *, screening: bool = False) -> EvalJob | Evaluation:
    """The job that evaluates exactly ``tree`` (exported, packed), or the failed evaluation."""
    from avo.executors import make_job

    snap = run.paths.private / "eval" / label
    shutil.rmtree(snap, ignore_errors=True)
    log_path = _log_path(run.paths, label)
    try:
        run.lineage.export(tree, snap)
        meta = snap / META_DIR
        if meta.is_symlink() or (meta.exists() and not meta.is_dir()):
            # Its score file is committed there: anything else fails the submit after the commit.
            raise CandidateError(f"work/{META_DIR} is avo's folder (it holds scores.jsonl) but it is "
                                 f"{'a symlink' if meta.is_symlink() else 'a file'}; remove it and try again")
        strip_meta(snap)
        configs = sorted(run.state.configs) if run.state.configs and not screening else None
        return make_job(run.state.target, label, snapshot=snap, tree=tree, quick=run.state.options.quick or screening,
                        screening=screening, configs=configs, log_path=log_path, **_job_fields(run))
    except CandidateError as exc:  # not self-contained: a failed candidate, named
        write_json_atomic(log_path, f"[avo] the candidate was not evaluated: {exc}\n", sync="none", own=1)
        return Evaluation(failed(str(exc)), None, 0.0, log_path, label=label)
    finally:
        shutil.rmtree(snap, ignore_errors=True)


def _finish(res: JobResult, log_path: Path, secret: str | None = None, label: str | None = None) -> Evaluation:
    """The evaluation a job's result stands for; a log that came back is kept in logs/."""
    from avo.contract import scalar_of
    from avo.executors import where

    if res.log or not log_path.exists():
        write_json_atomic(log_path, res.log or f"[avo] no log came back from {where(res)}\n", sync="none", own=1)
    if res.refused:  # not the run's evaluator, or no sandbox there: nothing was measured, nothing is counted
        raise IntegrityError(res.refused)
    result = res.result or failed(f"{where(res)} returned no result")
    scalar, why = scalar_of(result)
    if scalar is None and result.correct:
        result = failed(why or "no scalar", result.notes)
    return Evaluation(result, scalar, res.wall_s, log_path, where(res), secret, res.cpu, label)


def _run_jobs(run: Run, jobs: list[EvalJob | Evaluation], *, executor: str | None = None,
              options: dict[str, str] | None = None,
              drawn: Callable[[Evaluation], None] | None = None) -> list[Evaluation]:
    """Run the jobs on the run's executor, as many at once as it has room for.

    ``drawn``: called with each evaluation as it is finished, so a submit keeps every draw it
    had when it ends before its decision (killed, or a job refused: :class:`IntegrityError`).
    """
    from avo import executors

    name, opts = _executor(run, executor, options)
    todo = [j for j in jobs if isinstance(j, EvalJob)]
    capacity = _capacity(run, name, opts) if len(todo) > 1 else 1
    done = iter(executors.execute_many(name, todo, opts, capacity))
    out = []
    for job in jobs:
        if isinstance(job, EvalJob):
            assert job.log_path is not None
            out.append(_finish(next(done), job.log_path, job.secret, job.label))
        else:
            out.append(job)
        if drawn is not None:
            drawn(out[-1])
    return out


def _evaluate_tree(run: Run, tree: str, label: str, *, screening: bool = False, executor: str | None = None,
                   options: dict[str, str] | None = None,
                   drawn: Callable[[Evaluation], None] | None = None) -> Evaluation:
    """Export ``tree`` to a private snapshot and evaluate exactly that, on the run's executor.

    ``screening``: the target's quick mode inside a full run (its configs differ).
    """
    return _run_jobs(run, [_tree_job(run, tree, label, screening=screening)], executor=executor,
                     options=options, drawn=drawn)[0]


def _baselines_job(run: Run, quick: bool) -> EvalJob:
    from avo.executors import make_job

    return make_job(run.state.target, "baselines", snapshot=None, baselines=True, quick=quick,
                    log_path=_log_path(run.paths, "baselines"), **_job_fields(run))


def _baseline_evaluations(res: JobResult, log_path: Path) -> dict[str, Evaluation]:
    from avo.contract import scalar_of
    from avo.executors import where

    if res.baselines is None:
        return {"(baselines)": _finish(res, log_path)}
    _finish(res, log_path)  # keeps the log
    out: dict[str, Evaluation] = {}
    for name, result in res.baselines.items():
        scalar, why = scalar_of(result)
        if scalar is None and result.correct:
            result = failed(why or "no scalar")
        out[name] = Evaluation(result, scalar, res.wall_s, log_path, where(res))
    return out


def _commit_message(n: int, message: str, scalar: float, metrics: dict[str, float], target: str,
                    sandbox: str, terms_sha: str | None = None, origin: str = "") -> str:
    # The first line is the subject `git log --oneline` shows; further lines are the body.
    # avo's trailers come last, as their own paragraph, in a format that round-trips exactly.
    subject, _, body = message.strip().partition("\n")
    body = f"{body.strip()}\n\n" if body.strip() else ""
    return (f"v{n}: {subject.strip() or '(no message)'}\n\n{body}"
            + trailer_lines(target, scalar, metrics, terms_sha, sandbox=sandbox) + origin)


# -- opening -------------------------------------------------------------------------------


def open_run(ref: str | Path | None, runs_root: Path, *, check: bool = True) -> Run:
    """Open a run (newest when ``ref`` is ``None``) without taking the lock.

    ``check``: refuse a record that disagrees with its lineage (:mod:`avo.record_check`).
    Opened unchecked: by ``avo recover``, and by every command that goes on to a mutating
    function here (submit, evaluate_work, revert, record_redirect, write_brief), which checks
    it under the lock; checked here too, the record would be read and checked twice (at
    10,000 versions that is about 0.2 s). Writes nothing.
    """
    paths = resolve_run(ref, runs_root)
    if not check:
        raw = run_json_bytes(paths)
        return Run(paths, parse_state(paths, raw, validate=False), opened=raw)
    state = load_state(paths)
    data = trajectory_bytes(paths)
    return Run(paths, check_record(paths, state, locked=False, data=data), viewed=data)


def _locked_state(run: Run) -> RunState:
    """run.json as it is now (the caller holds the lock). The state open_run parsed is taken
    when the file still holds exactly the bytes it was parsed from, validated as a fresh read
    is; only once (``opened`` is cleared): a run of 10,000 versions is not parsed twice."""
    raw = run_json_bytes(run.paths)
    opened, run.opened = run.opened, None
    return parse_state(run.paths, raw) if opened is None or opened != raw else validated(run.paths, run.state)


def _scores_with(run: Run, version: Version) -> str:
    """The score file committed with ``version``: every version's line, the new one last.

    The last version's committed file already holds all the others (the record check holds
    each file to that), so it is read back from the backup (hash-checked) and extended: one
    line formatted per submit, not one per version of the run.
    """
    last = run.state.versions[-1]
    # read_any walks commit, trees and blob each hashed to its id: git's own `sha:path` checks
    # only the blob, so a tree rewritten in the backup under its old name would hand out a
    # file of the agent's making, to be committed with every version from here on.
    got = read_any(run.paths.backup, f"{last.sha}:{SCORES_FILE}")
    if got is not None and got[1] == "blob" and got[2].endswith(scores_line(last).encode()):
        return got[2].decode() + scores_line(version)
    return scores_file([*run.state.versions, version])


# -- start ---------------------------------------------------------------------------------


def command_warnings(spec: TargetSpec) -> list[str]:
    """What is fragile in a directory target's commands (said once, when a run starts)."""
    out = []
    for label, command in (("evaluate", spec.evaluate_command), ("baselines", spec.baselines_command)):
        named = next((p for p in command or [] if re.fullmatch(r"python(3(\.\d+)?)?", Path(p).name)), None)
        if named is not None:
            out.append(f"the {label} command of target {spec.name!r} names {named!r} instead of {{python}}: it runs "
                       f"whichever {named} is first on PATH, whose packages may differ from avo's ({sys.executable}); "
                       "write \"{python}\" in target.yaml")
    if spec.evaluate_command is not None and not spec.isolate_candidate:
        out.append(f"the evaluator of target {spec.name!r} shares its sandbox with the candidate processes it "
                   "starts, which can reach its stdout (where its result goes) through /proc; set `isolation: "
                   "candidate` under `evaluate:` in target.yaml and start them through $AVO_CANDIDATE_PREFIX "
                   "(docs/TARGETS.md, Isolation)")
    return out


def _parse_from(ref: str) -> tuple[str, int | None]:
    match = re.match(r"^(.*):v(\d+)$", ref)
    if match:
        return match.group(1), int(match.group(2))
    return ref, None


@builds_partials
def start_run(
    target_ref: str | None,
    runs_root: Path,
    *,
    max_steps: int | None = None,
    quick: bool = False,
    stall_limit: int | None = None,
    failure_limit: int = 3,
    from_ref: str | None = None,
    progress: Any = None,
    sandbox: str | None = None,
    executor: str | None = None,
    executor_options: dict[str, str] | None = None,
    run_id: str | None = None,
) -> Run:
    """Create a run: seed, KB, evaluate x_0 (the gate must pass), baselines, commit ``v0``.

    ``executor`` (default ``$AVO_EXECUTOR``, else ``local``) runs every evaluation of the run.
    ``run_id``: the run's folder name (a colony names its islands), else ``target-stamp``.
    """
    from avo import executors
    from avo.plugins import call_target_hook, find_target

    say = progress or (lambda msg: None)
    if max_steps is not None and max_steps < 1:
        raise AvoError(f"--max-steps must be at least 1, got {max_steps}: a run with no step budget can never step")
    if stall_limit is not None and stall_limit < 1:
        raise AvoError(f"--stall-limit must be at least 1, got {stall_limit}")
    source: Run | None = None
    source_state: RunState | None = None
    source_version: Version | None = None
    example: Path | None = None
    if from_ref is not None:
        from avo.examples import is_example, load_example

        src_ref, n = _parse_from(from_ref)
        if is_example(Path(src_ref)):
            # A shipped example (`avo export`) has a bundle instead of a live lineage.
            example = Path(src_ref)
            source_state, source_version = load_example(example, n)
        else:
            source = open_run(src_ref, runs_root)
            source_state = source.state
            source_version = source.state.best_version if n is None else next(
                (v for v in source.state.versions if v.n == n), None)
        if source_version is None:
            raise AvoError(f"run {source_state.id} has no version v{n}; it has v0..v{len(source_state.versions) - 1}")
    if target_ref is None and source_state is None:
        raise AvoError("say which target to start: --target NAME|PATH (or --from RUN[:vN])")
    if target_ref is None:
        # The target as installed now, not as recorded then: its evaluator, noise band and
        # goal may have changed since the source run (a recorded band 0 under a target that
        # now draws fresh games would make every comparison exact where it is not).
        recorded = source_state.target  # type: ignore[union-attr]
        target_ref = str(recorded.directory) if recorded.directory is not None and recorded.directory.is_dir() \
            else recorded.name
    spec = find_target(target_ref)
    if source_state is not None and spec.name != source_state.target.name:
        raise AvoError(
            f"run {source_state.id} evolved target {source_state.target.name!r}, not {spec.name!r}: its "
            f"files are no seed for {spec.name!r}. Drop --target to continue {source_state.target.name!r}, "
            f"or start {spec.name!r} from its own seed (without --from)."
        )

    if runs_root.exists() and not runs_root.is_dir():
        raise AvoError(f"the runs directory {runs_root} is a file, not a directory; "
                       "pass --runs-dir (or set AVO_RUNS_DIR) to a folder")
    try:
        runs_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AvoError(f"cannot create the runs directory {runs_root}: {exc.strerror or exc}") from None
    from avo.partials import mark_creator, remove_stale
    from avo.sandbox import requested_level, resolve_level

    for stale in remove_stale(runs_root):
        say(f"removed the unfinished run folder {stale.path.name} of an earlier failed start")
    for warning in command_warnings(spec):
        say(f"WARNING: {warning}")
    spec = recorded_settings(spec)
    if spec.settings_env:
        recorded = spec.settings or {}
        say("settings recorded for every evaluation of this run: " + ", ".join(
            f"{n}={recorded[n]}" if n in recorded else f"{n} unset" for n in spec.settings_env))
    sandbox = requested_level(sandbox)
    level, level_why = resolve_level(sandbox)
    if level == "none" and sandbox == "auto":
        say(f"warning: {level_why}. Candidates will run without isolation; the run records "
            "'avo-sandbox: none' (see `avo doctor`).")
    else:
        say(f"sandbox: {level_why}")
    executor = executor or os.environ.get(executors.ENV, "").strip() or executors.DEFAULT
    executor_options = dict(executor_options or {})
    executors.find_executor(executor)
    if executor != executors.DEFAULT:
        ready = executors.check(executor, spec, executor_options)
        for line in ready.lines:
            say(line)
        if not ready.ok:
            raise AvoError(f"executor {executor!r} cannot run {spec.name}: " + "; ".join(ready.problems))
    if run_id is not None and ((runs_root / run_id).exists() or (runs_root / f".{run_id}.partial").exists()):
        raise AvoError(f"{runs_root / run_id} exists already")
    run_id = run_id or _new_run_id(spec, runs_root)
    partial = runs_root / f".{run_id}.partial"
    paths = RunPaths(partial.resolve())
    for d in (paths.work, paths.kb, paths.rejected, paths.supervisor, paths.logs, paths.private):
        d.mkdir(parents=True)
    mark_creator(partial)
    if source_state is not None and source_version is not None:
        if example is not None:
            from avo.examples import export_example_version

            export_example_version(example, source_version, paths.work)
        else:
            assert source is not None
            source.lineage.export(source_version.sha, paths.work)
        shutil.rmtree(paths.work / META_DIR, ignore_errors=True)
        origin = f"{source_state.id}:v{source_version.n}"
        say(f"seeded from {origin}")
    else:
        call_target_hook(spec, "avo_seed", dest=paths.work)
        origin = None
    call_target_hook(spec, "avo_knowledge", dest=paths.kb)
    paths.notes.write_text(NOTES_TEMPLATE)
    options = RunOptions(
        max_steps=max_steps, quick=quick, failure_limit=failure_limit,
        stall_limit=stall_limit or spec.stall_limit, noise=spec.noise, sandbox=sandbox,
        executor=executor, executor_options=executor_options, signed_lines=True,
    )
    state = RunState(
        id=run_id, created=time.time(), avo_version=__version__, target=spec, options=options,
        hashes=_hashes(spec, paths.kb, runs_home(runs_root)), origin=origin, sandbox=level,
    )
    run = Run(paths, state)
    lineage = run.lineage
    lineage.init()
    tree = lineage.snapshot_tree()
    say(f"evaluating the seed x_0 of {spec.name}{' (quick)' if quick else ''} ...")
    seed_job = _tree_job(run, tree, "seed")
    base_job = _baselines_job(run, quick) if spec.has_baselines or spec.baselines_command else None
    name, opts = _executor(run)
    # With room on the executor, the baselines are measured while the seed is.
    both = base_job is not None and isinstance(seed_job, EvalJob) and _capacity(run, name, opts) > 1
    if both:
        say("measuring the baselines at the same time ...")
        seed_res, base_res = executors.execute_many(name, [seed_job, base_job], opts, 2)  # type: ignore[list-item]
        evaluation = _finish(seed_res, seed_job.log_path, seed_job.secret)  # type: ignore[union-attr,arg-type]
    else:
        evaluation = _run_jobs(run, [seed_job])[0]
    if evaluation.scalar is None:
        raise AvoError(
            # not only the gate: an evaluator may refuse to time (a busy machine) or to score
            f"the seed of {spec.name} could not be scored, so there is nothing to evolve from:\n"
            f"{evaluation.result.error}\nfull log: {evaluation.log_path}\n"
            f"(the unfinished run folder {partial.name} is removed by `avo runs --clean` or the next start)"
        )
    say(f"  x_0 = {fmt_number(evaluation.scalar)} ({evaluation.wall_s:.1f} s)")
    state.configs = sorted(evaluation.result.metrics) if evaluation.result.primary is None else []
    state.evaluations = 1
    warnings: list[str] = []
    if base_job is not None:
        from avo.progress import says_baseline, shown_by

        assert base_job.log_path is not None
        live: list[str] = []  # the target's own progress lines, shown as they came

        def show(line: str) -> None:
            live.append(line)
            say(f"  {line}")

        if not both:
            say(f"measuring baselines (log: {base_job.log_path.relative_to(paths.root)}) ...")
            with shown_by(show):
                base_res = executors.execute(name, base_job, opts)
        for bname, ev in _baseline_evaluations(base_res, base_job.log_path).items():
            if bname == MALFORMED_BASELINES or (ev.result.error or "").startswith(MALFORMED_PREFIX):
                warnings.append(ev.result.error or "baselines failed")  # not a baseline: kept out of every view
                say(f"WARNING: {ev.result.error}")
                continue
            state.baselines.append(Baseline(name=bname, correct=ev.scalar is not None, scalar=ev.scalar,
                                            metrics=ev.result.metrics, error=ev.result.error))
            shown = fmt_number(ev.scalar) if ev.scalar is not None else f"failed: {ev.result.error}"
            # One line per baseline: a progress line that said the same is not repeated.
            if not any(says_baseline(line, bname, shown) for line in live):
                say(f"  baseline {bname}: {shown}")
    v0 = Version(n=0, sha="", tree="", scalar=evaluation.scalar, metrics=evaluation.result.metrics,
                 message="seed x_0" if origin is None else f"seed from {origin}", step=0,
                 time=time.time(), notes=evaluation.result.notes, new_best=True, secret=evaluation.secret)
    final_tree = lineage.tree_with_file(tree, SCORES_FILE, scores_line(v0).encode())
    started_on = terms(state)
    sha = lineage.commit_tree(final_tree, None, _commit_message(0, v0.message, v0.scalar, v0.metrics, spec.name,
                                                                state.sandbox, terms_digest(started_on)))
    lineage.verify_commit_tree(sha, tree, SCORES_FILE, scores_line(v0).encode())
    lineage.reset_hard(sha)
    v0 = v0.model_copy(update={"sha": sha, "tree": final_tree})
    state.versions.append(v0)
    lineage.set_tags(version_tags(state))
    lineage.backup(paths.backup, sha)
    save_state(paths, state)
    append_trajectory(paths, {"kind": "start", "id": "start", "target": spec.name, "origin": origin,
                              "options": options.model_dump(), "terms": started_on})
    append_trajectory(paths, {"kind": "eval", "id": "seed", "step": 0, "tree": lineage.code_tree(tree),
                              "scalar": v0.scalar,
                              "metrics": v0.metrics, "correct": True, "wall_s": round(evaluation.wall_s, 3),
                              "sandbox": state.sandbox, "where": evaluation.where, "cpu": evaluation.cpu,
                              "secret": evaluation.secret,
                              "notes": evaluation.result.notes, "log": str(evaluation.log_path.name)})
    for b in state.baselines:
        append_trajectory(paths, {"kind": "baseline", "name": b.name, "scalar": b.scalar, "metrics": b.metrics,
                                  "correct": b.correct, "error": b.error})
    for warning in [*command_warnings(spec), *warnings]:
        append_trajectory(paths, {"kind": "warning", "step": 0, "text": warning})
    final = runs_root / run_id
    partial.rename(final)
    run = Run(RunPaths(final.resolve()), state)
    _write_avo_eval(run.paths)
    with run_lock(run.paths):
        # The full check, once, writes the first checkpoint: from here every reader
        # (`avo status`, the MCP tools) takes the incremental path, in-process.
        return Run(run.paths, check_record(run.paths, load_state(run.paths), locked=True))


# -- evaluate ------------------------------------------------------------------------------


def _nondeterminism(run: Run, tree: str, evaluation: Evaluation, screening: bool = False) -> str | None:
    """On a target that declares no noise, the same tree must score the same every time."""
    noise = run.state.options.noise
    if noise.band > 0 or evaluation.scalar is None:
        return None
    # Only lines naming the tree are parsed, in the bytes the command's check read.
    for record in read_trajectory(run.paths, mentioning=tree.encode(), data=run.checked):
        if record.get("tree") == tree and record.get("scalar") is not None \
                and bool(record.get("screening")) == screening \
                and record.get("metrics") != evaluation.result.metrics:
            return (f"this exact tree scored {fmt_number(record['scalar'])} in {record.get('id')} and "
                    f"{fmt_number(evaluation.scalar)} now, but the target declares no noise: the candidate "
                    "is not deterministic (pacing by the clock?), so its score depends on the machine's load")
    return None


def evaluate_work(run: Run, *, quick: bool = False, executor: str | None = None,
                  executor_options: dict[str, str] | None = None) -> EvalReport:
    """Evaluate the current work tree; the lineage does not change.

    ``executor``: run this evaluation elsewhere than the run's executor (its options then).

    ``quick`` in a full run is a screening: the target's cheap mode, recorded but not
    compared with the lineage (its configs and scale differ).
    """
    with run_lock(run.paths):
        run.state = _locked_state(run)
        recovered = recover(run)  # said with the result (a killed submit it recorded as a step, say)
        check_integrity(run)
        check_work_limits(run.paths.work, run.state.target.work_limits)
        tree = run.lineage.snapshot_tree()
        code = run.lineage.code_tree(tree)  # the same code has one name, whatever .avo/scores.jsonl holds
        n = run.state.evaluations + 1
        screening = quick and not run.state.options.quick
        evaluation = _evaluate_tree(run, tree, f"eval{n}", screening=screening, executor=executor,
                                    options=executor_options)
        best = run.state.best_version
        g = None
        if evaluation.scalar is not None and not screening:
            g = gain(evaluation.scalar, best.scalar, run.state.target.direction)
        warning = "; ".join(filter(None, [*recovered, _nondeterminism(run, code, evaluation, screening),
                                         *ignored_settings(run.state.target)])) or None
        diff = _archive_evaluated(run, n, tree, code, evaluation)
        run.state.evaluations = n
        run.save()
        append_trajectory(run.paths, {
            "kind": "eval", "id": f"eval{n}", "step": run.state.steps + 1, "tree": code,
            "correct": evaluation.scalar is not None, "scalar": evaluation.scalar,
            "metrics": evaluation.result.metrics, "error": evaluation.result.error, "notes": evaluation.result.notes,
            "gain_vs_best": g, "wall_s": round(evaluation.wall_s, 3), "log": evaluation.log_path.name,
            "warning": warning, "screening": screening, "sandbox": run.state.sandbox, "where": evaluation.where,
            "cpu": evaluation.cpu, "secret": evaluation.secret, "best_before": best.n, "diff": diff,
        })
        return EvalReport(evaluation, code, best, g, warning, screening)


def _archive_evaluated(run: Run, n: int, tree: str, code: str, evaluation: Evaluation) -> str | None:
    """Keep an evaluated work tree retrievable once work/ moves on: its diff against the best, in
    rejected/ beside the attempts' diffs (so ``avo export`` ships it); the path, for its record.

    ``None`` when it is the best's code. The same code evaluated again against the same best
    names the diff its first evaluation wrote.
    """
    best = run.state.best_version
    for r in read_trajectory(run.paths, mentioning=code.encode(), data=run.checked):
        if (r.get("kind") == "eval" and r.get("tree") == code and r.get("best_before") == best.n
                and isinstance(r.get("diff"), str) and (run.paths.root / r["diff"]).is_file()):
            return str(r["diff"])
    diff = run.lineage.diff(best.sha, tree)
    if not diff.strip():
        return None
    path = run.paths.rejected / f"eval{n:04d}.diff"
    scored = fmt_number(evaluation.scalar) if evaluation.scalar is not None else f"failed: {evaluation.result.error}"
    header = f"# eval{n}: work/ as avo-eval measured it ({scored}), against v{best.n}; not a submit"
    # Renamed into place, as every archive: a link put at the name is replaced, not written through.
    write_json_atomic(path, " ".join(header.split()) + "\n" + diff, sync="file", own=1)
    return str(path.relative_to(run.paths.root))


# -- submit --------------------------------------------------------------------------------


def _check_can_step(state: RunState) -> None:
    # A spent budget comes first: a supervisor review would only unblock a step that cannot run.
    left = state.steps_left()
    if left == 0:
        raise BlockedError(
            f"the step budget of this run is spent ({state.steps}/{state.options.max_steps} steps). "
            f"Continue from its best with `avo start --from {state.id}`.",
            reason="budget",
        )
    if state.supervisor.due:
        raise BlockedError(
            f"the supervisor is due ({state.supervisor.reason}). Run `avo supervisor brief`, "
            "answer it with several concrete, distinct directions, and store the answer with "
            "`avo supervisor record`; then continue.",
            reason="supervisor",
        )


def _confirm_runs(run: Run, tree: str, measured: list[Evaluation], drawn: Callable[[Evaluation], None]
                  ) -> tuple[list[Evaluation], list[Evaluation], list[str]]:
    """Re-measure candidate and best alternately; failures of either abort the confirmation.

    ``measured``: the candidate's evaluations so far (they count with its re-measurements).
    Returns the candidate's draws (each with the secret it drew its inputs with, so ``avo
    verify`` can replay every draw the median came from), the best's draws, and the errors.
    ``drawn`` is called with each draw as it is finished (see :func:`_run_jobs`).

    With room on the executor the pairs run at the same time, each best next to its
    candidate on the same resource shape, so drift still hits both alike.
    """
    k = run.state.options.noise.confirm_runs
    jobs: list[EvalJob | Evaluation] = []
    for i in range(k):
        jobs.append(_tree_job(run, run.state.best_version.sha, f"confirm{i}-best"))
        jobs.append(_tree_job(run, tree, f"confirm{i}-cand"))
    name, opts = _executor(run)
    if _capacity(run, name, opts) > 1:
        done = _run_jobs(run, jobs, drawn=drawn)
    else:  # one at a time, stopping at the first failure as before
        done = []
        for job in jobs:
            done.extend(_run_jobs(run, [job], drawn=drawn))
            if done[-1].scalar is None:
                break
    cand = [e for e in measured if e.scalar is not None]
    errors: list[str] = []
    for b, c in zip(done[0::2], done[1::2], strict=False):
        if b.scalar is None or c.scalar is None:
            errors.append((b.result.error if b.scalar is None else c.result.error) or "failed")
            break
        cand.append(c)
    if not errors and len(done) % 2 and done[-1].scalar is None:
        errors.append(done[-1].result.error or "failed")
    # Every draw of the best that finished counts, its pair's fate aside: kept only with a
    # finished pair, a draw that came out high could be dropped by killing its candidate's
    # evaluator (red team, round ten). A decision is taken only on complete pairs (no error).
    best = [b for b in done[0::2] if b.scalar is not None]
    return cand, best, errors


@dataclass
class _Judgement:
    """What a submit's draws decided, before anything of it is recorded."""

    evaluation: Evaluation  # the draw the record's log, secret and CPU are of (the first, or a second look)
    outcome: str  # accepted | rejected | failed
    reason: str
    scalar: float | None
    metrics: dict[str, float]  # the ones that go with ``scalar`` (at the median after a confirmation)
    notes: str | None
    accepted: bool = False
    new_best: bool = False
    decided: float | None = None
    confirm: dict[str, Any] | None = None
    recheck: dict[str, Any] | None = None
    medians: Medians | None = None  # after a confirmation: both sides' per-config figures at their medians


def _judge(run: Run, tree: str, step: int, say: Callable[[str], None],
           drawn: Callable[[Evaluation], None]) -> _Judgement:
    """Measure the candidate ``tree`` (more than once near or inside the noise band) and apply the
    commit policy against the best; ``drawn`` is called with every draw as it is finished."""
    from avo.draws import at_median, draw_record

    state = run.state
    best = state.best_version
    say(f"evaluating the candidate of step {step} ...")
    evaluation = _evaluate_tree(run, tree, f"step{step}", drawn=drawn)
    scalar = evaluation.scalar
    if scalar is None:
        return _Judgement(evaluation, "failed", evaluation.result.error or "failed the gate", None,
                          evaluation.result.metrics, evaluation.result.notes)
    direction = state.target.direction
    band = state.options.noise.band
    j = _Judgement(evaluation, "rejected", "", scalar, evaluation.result.metrics, evaluation.result.notes)
    first, again = evaluation, None  # again: the second look at a gain beyond the band
    # On a noisy target the best's score drifts with the machine: compare with the
    # median of what was recorded and every later re-measurement of the same version.
    # Re-measurements exist only where a band sends gains to the confirmation: on a target
    # without one, none was measured by avo (a line re-chained onto the trajectory can
    # claim some, and `avo recover` takes them from there).
    remeasured = state.remeasured.get(best.n, []) if band > 0 else []
    reference = statistics.median([best.scalar, *remeasured])
    tie = state.target.tie_tolerance
    verdict = first_look(scalar, reference, direction, band, tie)
    g = gain(scalar, reference, direction)
    measured = [scalar]
    if verdict == "accept" and band > 0 and g > band and state.options.noise.recheck_gains:
        # The case where one draw would decide is the one a lucky draw, or a machine
        # that slowed the reference (a false 2-thread attention_c score did), gets in.
        say(f"gain {g:+.1%} is beyond the noise band (±{band:.0%}): measuring the candidate once more ...")
        again = _evaluate_tree(run, tree, f"step{step}-again", drawn=drawn)
        if again.scalar is not None:
            measured.append(again.scalar)
            if gain(again.scalar, reference, direction) <= band:
                verdict = "confirm"
            elif gain(again.scalar, scalar, direction) < 0:  # the score both draws support
                j.evaluation, j.scalar = again, again.scalar
                j.metrics, j.notes = again.result.metrics, again.result.notes
        j.recheck = {"scalars": measured, "logs": [first.log_path.name, again.log_path.name],
                     "error": again.result.error}
    if again is not None and again.scalar is None:
        j.reason = (f"measured again to confirm a gain of {g:+.1%} beyond the noise band, it failed: "
                    f"{again.result.error or 'failed the gate'}")
    elif verdict != "confirm":
        assert j.scalar is not None
        decision = single_decision(j.scalar, reference, best.n, direction, tie)
        j.accepted, j.new_best, j.reason = decision.accepted, decision.new_best, decision.reason
        j.decided = decision.gain
        if len(measured) > 1:
            j.reason += f"; measured twice ({fmt_number(measured[0])}, {fmt_number(measured[1])}), the lower kept"
    else:
        say(f"gain {gain(measured[-1], reference, direction):+.1%} is inside the noise band "
            f"(±{band:.0%}): re-measuring the candidate and "
            f"v{best.n} {state.options.noise.confirm_runs}× each, interleaved ...")
        looks = [first] if again is None else [first, again]
        cands, bests, errors = _confirm_runs(run, tree, looks, drawn)
        best_runs = [e.scalar for e in bests if e.scalar is not None]
        cand_runs = [e.scalar for e in cands if e.scalar is not None]
        if best_runs:
            state.remeasured.setdefault(best.n, []).extend(best_runs)
        # Every draw's own figures (notes, metrics, log), beside the scalars the policy used.
        j.confirm = {"candidate": cand_runs, "best": best_runs,
                     "candidate_draws": [draw_record(e) for e in cands], "best_draws": [draw_record(e) for e in bests]}
        if all(e.secret for e in cands):  # every draw the median comes from can be replayed (avo verify)
            j.confirm["candidate_secrets"] = [e.secret for e in cands]
        if errors:
            j.reason = f"a confirmation run failed: {errors[0]}"
        else:
            decision = confirm(cand_runs, best_runs, direction, band)
            j.accepted, j.new_best, j.decided = decision.accepted, decision.new_best, decision.gain
            j.scalar, j.reason = decision.scalar, decision.reason
            j.metrics, j.notes = at_median(cands)  # the figures of the median the scalar is
            j.medians = Medians(j.metrics, at_median(bests)[0], len(cands), len(bests))
    j.outcome = "accepted" if j.accepted else "rejected"
    return j


def _migrant_tree(lineage: Lineage, migrant: Migrant, limits: WorkLimits) -> str:
    """Copy the migrant's tree from the donor's backup into this lineage's store; its id.

    Content-addressed objects, written only after the work/.git check every git call makes
    (recover() has moved a foreign one aside); the donor's .avo/scores.jsonl in it is
    replaced by this run's own when it is committed. A tree past this run's work limits (a
    donor record forged around them) is refused before anything of it is copied.
    """
    from avo.lineage import BackupReader

    lineage.objects()
    reader = BackupReader(migrant.source)
    try:  # the donor's backup is its agent's to damage, even while it is read: a refused migrant
        tree = reader.verified_tree_of(migrant.origin.commit)
        files, size = reader.tree_size(tree)
        if files > limits.files or size > limits.bytes:
            raise CandidateError(f"the migrant holds {files:,} files of {size:,} bytes, past this run's work "
                                 f"limits ({limits.files:,} files, {limits.bytes:,} bytes)")
        return reader.copy_tree_into(lineage.git_dir, tree)
    except CandidateError:
        raise
    except AvoError as exc:
        raise CandidateError(f"the donor's backup cannot be read: {str(exc).splitlines()[0]}") from None


def _kept_note(moved: list[str], where: Path) -> str:
    shown = ", ".join(moved[:5]) + (f" and {len(moved) - 5} more" if len(moved) > 5 else "")
    return (f"{shown}: ignored only by the discarded candidate's own .gitignore (so in no diff), and untracked "
            f"under the best version's: moved to {where} instead of deleted")


def submit(
    run: Run, message: str, *, extra: dict[str, Any] | None = None, progress: Callable[[str], None] | None = None,
    migrant: Migrant | None = None,
) -> SubmitOutcome:
    """Evaluate the work tree and apply the commit policy against the best committed score.

    ``progress`` receives a line before each long phase (the evaluation, re-measurements).
    ``migrant``: another island's best, offered to this run (:mod:`avo.migration`): its tree
    (already in this lineage's object store) is the candidate instead of the work tree's,
    one candidate like any other: this run's evaluator, a fresh secret, the same policy,
    journal and backup; its commit's trailers and its record name its origin. Only a clean
    work tree takes one (a reset would destroy an agent's unsubmitted edits).
    """
    say = progress or (lambda line: None)
    if not message.strip():
        raise AvoError("the message is empty; say what changed and why (it becomes the commit message)")
    message = clean_message(message)
    with run_lock(run.paths):
        run.state = _locked_state(run)
        notes = recover(run)
        state, paths, lineage = run.state, run.paths, run.lineage
        _check_can_step(state)
        check_integrity(run)
        notes += ignored_settings(state.target)
        best = state.best_version
        if migrant is not None and lineage.is_dirty(best.sha):  # an agent's candidate is never reset away
            raise AvoError(f"work/ holds an unsubmitted candidate; a migrant is only offered to a clean "
                           f"work tree (at v{best.n})")
        head = lineage.head()
        if head != best.sha:
            notes.append(f"work/ HEAD was moved off v{best.n} (agent commits or resets); "
                         "its content is taken as one candidate")
        check_work_limits(paths.work, state.target.work_limits)
        # Taken before the snapshot: any edit from here on changes it (see archive_late_edits).
        signature = lineage.work_signature() if migrant is None else None
        # The index the snapshot fills is kept (under the lock, one submit at a time) for a reset.
        kept = paths.private / f"index-snapshot-{secrets.token_hex(8)}"
        tree = (lineage.snapshot_tree(kept) if migrant is None
                else _migrant_tree(lineage, migrant, state.target.work_limits))
        diff = lineage.diff(best.sha, tree)
        if not diff.strip():
            raise AvoError(f"nothing to submit: work/ is identical to the best version v{best.n}. "
                           "Edit the candidate first (or `avo revert` to discard experiments).")
        step = state.steps + 1
        code = lineage.code_tree(tree)  # what the evaluator sees: the record's name for the candidate
        body: dict[str, Any] = {"step": step, "message": message, "tree": code, "measured": tree,
                                "best_before": best.n, "time": round(time.time(), 3)}
        if migrant is not None:
            body["migrant"] = migrant.origin.model_dump()
        if extra:
            body["usage"] = extra
        started = Started(run, body)
        try:
            j = _judge(run, tree, step, say, started.draw)
        except Exception as exc:  # a refused draw, a broken executor: the step is used all the same
            first = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
            if isinstance(exc, IntegrityError) and not started.draws:
                # Only a refused job raises it (avo._finish), before the candidate ran; the first
                # draw runs alone, so nothing of the candidate was measured or seen.
                started.cancel(first)
                raise
            said = record_interrupted(run, body, started.draws, f"its evaluation stopped: {first}")
            if type(exc) in (AvoError, IntegrityError):
                raise type(exc)(f"{exc}\n{said}") from exc
            raise AvoError(f"{type(exc).__name__}: {exc}\n{said}") from exc
        evaluation, scalar, accepted, new_best, outcome = j.evaluation, j.scalar, j.accepted, j.new_best, j.outcome
        fingerprint = diff_fingerprint(diff)
        warning = _nondeterminism(run, code, evaluation)
        if warning:
            notes.append(warning)
        count_step(state, step, extra)
        record: dict[str, Any] = {
            "kind": "submit", "id": f"step{step}", "step": step, "outcome": outcome, "message": message,
            "tree": code, "scalar": scalar, "metrics": j.metrics,
            "error": evaluation.result.error, "notes": j.notes,
            "best_before": best.n, "reason": j.reason, "wall_s": round(evaluation.wall_s, 3),
            "log": evaluation.log_path.name, "fingerprint": fingerprint, "sandbox": state.sandbox,
            "new_best": new_best,
            "where": evaluation.where, "cpu": evaluation.cpu, "secret": evaluation.secret,
        }
        if j.confirm:
            record["confirm"] = j.confirm
        if j.recheck is not None:
            record["recheck"] = j.recheck
        if migrant is not None:
            record["migrant"] = migrant.origin.model_dump()
        if extra:
            record["usage"] = extra
        version: Version | None = None
        diff_path: Path | None = None
        if accepted and scalar is not None:
            n = len(state.versions)
            version = Version(n=n, sha="", tree="", scalar=scalar, metrics=j.metrics,
                              message=message, step=step, time=time.time(), notes=j.notes,
                              spread=evaluation.result.spread, new_best=new_best, secret=evaluation.secret)
            scores = _scores_with(run, version)
            # Built from tree objects, no index: nothing another process writes can change it;
            # verified anyway before anything points at it.
            final_tree = lineage.tree_with_file(tree, SCORES_FILE, scores.encode())
            sha = lineage.commit_tree(final_tree, best.sha,
                                      _commit_message(n, message, scalar, version.metrics, state.target.name,
                                                      state.sandbox,
                                                      origin=migrant.origin.trailers() if migrant else ""))
            lineage.verify_commit_tree(sha, tree, SCORES_FILE, scores.encode())
            version = version.model_copy(update={"sha": sha, "tree": lineage.tree_of(sha)})
            record["version"] = n
            if migrant is not None:  # its checkout below replaces work/: keep what was written there meanwhile
                archive_late_edits(run, step, best.sha, notes)
            # The commit is named: finishing a killed submit copies into the backup only what
            # this signed journal vouches for, never what run.json (unchecked then) names.
            write_journal(paths, {"kind": "accept", "step": step, "record": record, "sha": sha})
            lineage.move_branch(sha)
            if migrant is not None:
                lineage.reset_hard(sha)  # work/ takes the migrant (ignored files stay, as in every reset)
            else:
                # Keep the work tree's copy of the score file in step with the commit.
                meta = paths.work / META_DIR
                if meta.is_symlink():  # linked elsewhere (and ignored): the score file is written here, not there
                    meta.unlink()
                meta.mkdir(exist_ok=True)
                write_json_atomic(paths.work / SCORES_FILE, scores, sync="none", own=1)  # a link there is replaced
            state.versions.append(version)
            state.best = n
            state.failures_in_row = 0
            state.steps_since_best = 0 if new_best else state.steps_since_best + 1
            lineage.add_tag(f"v{n}", sha, version_tags(state))  # recover() made every other tag exact already
            update_supervisor(state, None, outcome)
            save_state(paths, state)  # the commit point
            append_trajectory(paths, record)
            # Before the journal goes: a kill or a failed copy here is finished by recover().
            lineage.backup(paths.backup, sha)
            paths.journal.unlink(missing_ok=True)
        else:
            diff_path = paths.rejected / f"step{step:04d}-{outcome}.diff"
            came = f"\n# migrant from {migrant.origin.describe()}" if migrant is not None else ""
            header = f"# step {step} {outcome}: {message}{came}\n# {j.reason}\n"
            # Renamed into place: a link the agent put at this name (into .avo/, say) is replaced,
            # never written through (its key was overwritten with a diff it could rebuild).
            write_json_atomic(diff_path, header + diff, sync="file", own=1)
            record["diff"] = str(diff_path.relative_to(paths.root))
            # Edits made to work/ while the candidate was being measured are not part of it,
            # and the reset below would destroy them: archive them too (a migrant left work/ alone).
            unchanged = archive_late_edits(run, step, tree if migrant is None else best.sha, notes,
                                            since=signature)
            write_journal(paths, {"kind": "reject", "step": step, "record": record, "diff_path": str(diff_path),
                                   "measured": tree})
            count_not_accepted(state, step, outcome, fingerprint)
            save_state(paths, state)  # the commit point
            # Tags stay as recover() left them; work/ untouched since the snapshot (so no migrant's):
            # reset from its index. Not when the snapshot started from another HEAD: its index holds
            # files work/.git's own index may not track (an ignored file `git rm --cached` kept).
            ignored = kept_files_folder(diff_path)
            moved = lineage.reset_hard(best.sha, (tree, kept) if unchanged and head == best.sha else None,
                                       keep_into=ignored)
            if moved:
                notes.append(_kept_note(moved, ignored.relative_to(paths.root)))
            append_trajectory(paths, record)
            paths.journal.unlink(missing_ok=True)
        kept.unlink(missing_ok=True)
        if state.supervisor.due:
            append_trajectory(paths, {"kind": "supervisor_due", "step": step, "reason": state.supervisor.reason})
        return SubmitOutcome(step, outcome, evaluation, version, state.best_version, j.reason, diff_path,
                             state.supervisor.due, state.supervisor.reason, notes, j.decided, j.medians)


def revert(run: Run, message: str | None = None) -> Path | None:
    """Discard the uncommitted experiment (its diff is archived, never lost).

    A revert with changes is an attempt: the trajectory records its diff and ``message``
    (why it was abandoned), and every view that lists attempts shows it.
    """
    with run_lock(run.paths):
        run.state = _locked_state(run)
        recover(run)
        best = run.state.best_version
        tree = run.lineage.snapshot_tree()
        diff = run.lineage.diff(best.sha, tree)
        path = None
        step = run.state.steps + 1
        note = clean_message(message or "").strip()
        if diff.strip():
            stamp = time.strftime("%Y%m%d-%H%M%S")
            # Named by the step it came after: a revert uses no step of the budget.
            path = unused_name(run.paths.rejected / f"reverted-{stamp}-after-step{step - 1:04d}.diff")
            header = f"# reverted after step {step - 1} (not submitted, no step used)" + (f": {note}" if note else "")
            write_json_atomic(path, header.replace("\n", " ") + "\n" + diff, sync="file", own=1)
        # A changed .gitignore is in the diff: files only it ignored go beside the diff (revert_line names them).
        run.lineage.reset_hard(best.sha, keep_into=kept_files_folder(path) if path else None)
        append_trajectory(run.paths, {"kind": "revert", "step": step, "message": note or None,
                                      "diff": str(path.relative_to(run.paths.root)) if path else None,
                                      "tree": run.lineage.code_tree(tree) if path else None,
                                      "best_before": best.n})
        return path


# -- supervisor ----------------------------------------------------------------------------


def record_redirect(run: Run, text: str) -> Path:
    """Store the supervisor's redirect; it unblocks the run and rides on the next step."""
    if not text.strip():
        raise AvoError("the redirect is empty; give several concrete, distinct directions")
    with run_lock(run.paths):
        run.state = _locked_state(run)
        recover(run)
        sup = run.state.supervisor
        k = sup.briefs if sup.briefs else 1
        path = run.paths.supervisor / f"redirect-{k:03d}.md"
        n = 1
        while os.path.lexists(path):  # a dangling link is a name taken too
            n += 1
            path = run.paths.supervisor / f"redirect-{k:03d}-{n}.md"
        write_json_atomic(path, text.strip() + "\n", sync="file", own=1)
        sup.due, sup.reason = False, None
        sup.pending_redirect = text.strip()
        sup.redirect_step = run.state.steps + 1
        # The stall count restarts at the redirect, but "since the last new best" stays true.
        sup.stall_since = run.state.steps
        run.state.failures_in_row = 0
        run.save()
        append_trajectory(run.paths, {"kind": "supervisor_record", "step": run.state.steps + 1,
                                      "path": str(path.relative_to(run.paths.root))})
        return path


def write_brief(run: Run) -> tuple[Path, str]:
    """Write the supervisor's review prompt for the whole trajectory."""
    from avo.prompts import supervisor_brief

    with run_lock(run.paths):
        run.state = _locked_state(run)
        recover(run)
        sup = run.state.supervisor
        sup.briefs += 1
        text = supervisor_brief(run)
        path = run.paths.supervisor / f"brief-{sup.briefs:03d}.md"
        write_json_atomic(path, text, sync="file", own=1)
        run.save()
        append_trajectory(run.paths, {"kind": "supervisor_brief", "step": run.state.steps + 1,
                                      "reason": sup.reason, "path": str(path.relative_to(run.paths.root))})
        return path, text


def all_runs(runs_root: Path) -> list[RunState]:
    """States of every run under ``runs_root``, oldest first (unreadable ones skipped)."""
    out = []
    for paths in list_runs(runs_root):
        try:
            out.append(load_state(paths))
        except AvoError:
            continue
    return out

"""Evaluate a candidate directory through its target: always in a child process.

Plugin targets run :mod:`avo.evaluator` from the run's private evaluator copy with
``python -I``, outside the sandbox (the evaluator is the judge; the candidate processes it
starts are sandboxed), and answer on a private result pipe. Directory targets run their
configured command from the copy and answer on stdout: inside the sandbox as a whole, or, with
``isolation: candidate``, outside it, starting each candidate process through the sandbox
command avo hands them in ``$AVO_CANDIDATE_PREFIX`` (then no candidate can reach that stdout). Either way
:func:`avo.runner.run_child` supplies the timeout, the limits, the output caps and the
strict parsing of the contract.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from avo.contract import check_configs, count_results, failed, last_json_object, parse_object, scalar_of
from avo.errors import AvoError
from avo.eval_env import CANDIDATE_PREFIX, EVAL_SECRET, LOG_DIR, QUICK, SANDBOX
from avo.models import EvalResult, TargetSpec
from avo.programs import search_path
from avo.regular_files import open_own, own_folder
from avo.runner import ChildOutcome, run_child
from avo.sandbox import Level


@dataclass
class Evaluation:
    """A parsed result plus its scalar (``None`` when the gate is closed)."""

    result: EvalResult
    scalar: float | None
    wall_s: float
    log_path: Path
    where: str | None = None  # the executor and node that produced it (avo.executors.where)
    secret: str | None = None  # the fresh secret it drew its inputs with (recorded after it ended)
    cpu: str | None = None  # the class of the CPU it ran on (avo.host_cpu): a timed score is comparable under it
    label: str | None = None  # what it was within its command (step3, step3-again, confirm0-best), for the record


@dataclass(frozen=True)
class Runtime:
    """How a run's evaluations execute: the private evaluator copy and the sandbox level.

    ``module``/``plugin`` name a plugin target's package and entry point; both are ``None``
    for a directory target, whose command runs inside the sandbox as a whole.
    """

    copy_root: Path
    package: str | None  # the folder of the copy holding the plugin's package
    module: str | None
    plugin: str | None
    sandbox: Level
    scratch: Path  # a private folder for this evaluation's working files
    secret: str | None = None  # the run's evaluation secret (plugin evaluators only)
    distribution: str | None = None  # the plugin's distribution, for error messages
    files: dict[str, str] = field(default_factory=dict)  # modules of the copy and their recorded hashes


def _fill(template: list[str], target_dir: Path, workdir: Path | None) -> list[str]:
    values = {"target": str(target_dir), "workdir": str(workdir or ""), "python": sys.executable}
    try:
        return [part.format(**values) for part in template]
    except (KeyError, IndexError, ValueError) as exc:
        raise ValueError(
            f"bad placeholder in the command {template!r}: {exc}; "
            "only {target}, {workdir} and {python} are known"
        ) from None


# Variables of the shell that ran avo which change how the trusted evaluator, or the libraries
# it measures with, behave: a preloaded or substituted library runs inside the evaluator
# (LD_PRELOAD, LD_AUDIT, LD_LIBRARY_PATH), and a BLAS, OpenMP, NumPy, torch or allocator knob
# slows a reference down (OPENBLAS_CORETYPE, NPY_DISABLE_CPU_FEATURES, GLIBC_TUNABLES, ...).
# An agent runs `avo submit` from its own shell; none of these reach the evaluator.
# The compiler's own search paths too (an evaluator that builds its trusted helpers with cc:
# gcc runs the `as` it finds on COMPILER_PATH, outside any sandbox; round seven made attention_c's
# request loop burn CPU in the twin worker that way, 5.34 recorded for an honest 0.39), and the
# temporary folders, which each evaluator child gets fresh (``_private_tmp``).
SCRUBBED_PREFIXES = ("LD_", "GLIBC_", "MALLOC_", "PYTHON", "OPENBLAS", "GOTO", "OMP_", "GOMP_", "KMP_", "MKL_",
                     "BLIS_", "VECLIB_", "NPY_", "NUMPY_", "TORCH_", "PYTORCH_", "MLX_",
                     "COMPILER_PATH", "GCC_", "CPATH", "C_INCLUDE_PATH", "CPLUS_INCLUDE_PATH", "OBJC_INCLUDE_PATH",
                     "LIBRARY_PATH", "DEPENDENCIES_OUTPUT", "SUNPRO_DEPENDENCIES", "CCACHE_", "TMPDIR", "TEMP", "TMP")


def inherited_env() -> dict[str, str]:
    """The environment a plugin target's evaluator inherits: this process's, less what
    :data:`SCRUBBED_PREFIXES` names (the target's own ``AVO_*`` variables pass, except its
    declared settings: see :func:`pinned_settings`)."""
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(SCRUBBED_PREFIXES)}
    env["PATH"] = search_path()  # the system's programs first, never an agent's of the same name
    return env


def _private_tmp(rt: Runtime) -> dict[str, str]:
    """A fresh temporary folder for an evaluator child (in its scratch, removed with it): never
    one the agent's shell named, where it could have put links or files for a compiler to take."""
    folder = rt.scratch / "tmp"
    folder.mkdir(parents=True, exist_ok=True)
    return {"TMPDIR": str(folder), "TMP": str(folder), "TEMP": str(folder)}


def recorded_settings(spec: TargetSpec) -> TargetSpec:
    """``spec`` with the values its ``settings_env`` variables have now, at a run's start."""
    return spec.model_copy(update={"settings": {n: os.environ[n] for n in spec.settings_env if n in os.environ}})


def pinned_settings(env: dict[str, str], spec: TargetSpec) -> dict[str, str]:
    """``env`` with the target's settings exactly as the run recorded them: an agent's shell
    that sets a thread count (or unsets one) cannot change what its candidates are measured at."""
    if spec.settings is None:  # not a run's spec: the settings come from the environment
        return env
    out = {k: v for k, v in env.items() if k not in spec.settings_env}
    out.update(spec.settings)
    return out


def ignored_settings(spec: TargetSpec) -> list[str]:
    """A note for each setting this shell holds otherwise than the run recorded it."""
    notes: list[str] = []
    if spec.settings is None:
        return notes
    for name in spec.settings_env:
        here, run = os.environ.get(name), spec.settings.get(name)
        if here != run:
            now = f"{name}={here}" if here is not None else f"{name} unset"
            then = f"{name}={run}" if run is not None else "it unset"
            notes.append(f"{now} in this shell is not used: the run started with {then}, and every evaluation "
                         "of a run uses its recorded settings (start another run to measure in another mode)")
    return notes


def _launch(
    spec: TargetSpec, rt: Runtime, workdir: Path | None, log_path: Path, *, quick: bool, baselines: bool,
    pid_file: Path | None = None,
) -> ChildOutcome:
    """Run the evaluator child for ``workdir`` (or the baselines) and return how it ended."""
    from avo.evaluator_copy import NO_BYTECODE, python_command
    from avo.sandbox import Sandbox, installed_package_dirs, wrap

    template = spec.baselines_command if baselines else spec.evaluate_command
    timeout = spec.baseline_timeout if baselines else spec.eval_timeout
    # A directory evaluator's interpreter neither reads nor writes bytecode (evaluator_copy.NO_BYTECODE).
    env = {QUICK: "1" if quick else "0", SANDBOX: rt.sandbox, "PYTHONUNBUFFERED": "1",
           "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": NO_BYTECODE}
    rt.scratch.mkdir(parents=True, exist_ok=True)
    if template is not None and spec.isolate_candidate:
        return _launch_isolating(spec, rt, workdir, log_path, template, timeout, env, pid_file)
    if template is not None:  # a directory target: its whole command is sandboxed
        cmd = _fill(template, rt.copy_root, workdir)
        logs = rt.scratch / "logs"
        logs.mkdir(exist_ok=True)
        cwd = workdir or rt.scratch
        box = Sandbox(writable=tuple(p for p in (workdir, rt.scratch) if p is not None),
                      readable=(rt.copy_root,), hide=tuple(installed_package_dirs()),
                      env={**(spec.settings or {}), **env, LOG_DIR: str(logs)}, cwd=cwd)
        command, child_env = wrap(cmd, box, rt.sandbox)
        child_env = {**pinned_settings(child_env, spec), **env}  # avo's own variables are never a setting's
        outcome = run_child(command, cwd=cwd, timeout=timeout, limits=spec.limits, log_path=log_path,
                            env=child_env, pid_file=pid_file)
        _keep_logs(logs, log_path)
        return outcome
    assert rt.module is not None and rt.plugin is not None
    from avo.plugins import check_target_hook

    check_target_hook(spec, "avo_baselines" if baselines else "avo_evaluate")
    spec_file = rt.scratch / "spec.json"
    spec_file.write_text(spec.model_dump_json())
    cmd = [*python_command(rt.copy_root, rt.files), "--module", rt.module, "--plugin", rt.plugin,
           "--spec", str(spec_file), "--distribution", rt.distribution or "?"]
    if workdir is not None:
        cmd += ["--workdir", str(workdir)]
    if baselines:
        cmd.append("--baselines")
    if quick:
        cmd.append("--quick")
    child_env = {**pinned_settings(inherited_env(), spec), **env, **_private_tmp(rt), LOG_DIR: str(log_path.parent)}
    if rt.secret:
        child_env[EVAL_SECRET] = rt.secret
    cwd = rt.scratch / "cwd"  # never the candidate's folder: nothing there can be imported
    cwd.mkdir(exist_ok=True)
    return run_child(cmd, cwd=cwd, timeout=timeout, limits=spec.limits, log_path=log_path, env=child_env,
                     pid_file=pid_file, result_channel=True)


def _launch_isolating(
    spec: TargetSpec, rt: Runtime, workdir: Path | None, log_path: Path, template: list[str], timeout: float,
    env: dict[str, str], pid_file: Path | None,
) -> ChildOutcome:
    """Run a directory target's evaluator outside the sandbox (``isolation: candidate``).

    Its candidate processes start inside one, each through ``$AVO_CANDIDATE_PREFIX``: in a PID
    namespace of their own they cannot reach the evaluator's stdout (``/proc/<pid>/fd/1``), where
    its result goes. They may write the workdir alone.
    """
    from avo.sandbox import Sandbox, candidate_prefix, installed_package_dirs

    box = Sandbox(writable=(workdir,) if workdir is not None else (), hide=tuple(installed_package_dirs()),
                  env={**(spec.settings or {}), **env}, cwd=workdir)
    prefix = candidate_prefix(box, rt.sandbox)
    cwd = rt.scratch / "cwd"  # never the candidate's folder: nothing there can be imported
    cwd.mkdir(exist_ok=True)
    logs = rt.scratch / "logs"  # kept beside the run's log afterwards, as a sandboxed evaluator's
    logs.mkdir(exist_ok=True)
    child_env = {**pinned_settings(inherited_env(), spec), **env, **_private_tmp(rt), LOG_DIR: str(logs),
                 CANDIDATE_PREFIX: json.dumps(prefix)}
    outcome = run_child(_fill(template, rt.copy_root, workdir), cwd=cwd, timeout=timeout, limits=spec.limits,
                        log_path=log_path, env=child_env, pid_file=pid_file)
    _keep_logs(logs, log_path)
    return outcome


@contextmanager
def _fresh(spec: TargetSpec, label: str) -> Iterator[Runtime]:
    from avo.evaluator_copy import fresh_runtime

    with tempfile.TemporaryDirectory(prefix="avo-private-") as private:
        yield fresh_runtime(spec, Path(private), label)


KEPT_LOG_FILES = 100  # files of a sandboxed evaluator's log folder kept per evaluation


def _keep_logs(logs: Path, log_path: Path) -> None:
    """Move what a sandboxed evaluator wrote to its log folder next to the run's log.

    The candidate shares the sandbox and can write there too, so what is kept is capped like
    its output (``OUTPUT_CAP`` bytes in all, ``KEPT_LOG_FILES`` files); the rest is named.
    """
    from avo.runner import OUTPUT_CAP

    room, kept, dropped = OUTPUT_CAP, 0, 0
    for entry in sorted(logs.iterdir()) if logs.is_dir() else []:
        if not entry.is_file() or entry.is_symlink():
            continue
        size = entry.stat().st_size
        if kept >= KEPT_LOG_FILES or room <= 0:
            dropped += 1
            continue
        dest = log_path.parent / f"{log_path.stem}-{entry.name}"
        if size <= room:
            # Renamed, never moved "into": shutil.move into a folder linked at ``dest`` (.avo/, say)
            # would put the candidate's file there under its own name (check.key, say).
            try:
                folder = own_folder(dest.parent, 1)
                try:
                    os.replace(entry, dest.name, dst_dir_fd=folder)
                finally:
                    os.close(folder)
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise AvoError(f"cannot keep the evaluator's log {entry.name} as {dest}: {exc}") from None
                with open(entry, "rb") as src, os.fdopen(open_own(dest, append=False, own=1), "wb") as out:
                    shutil.copyfileobj(src, out)
        else:
            with open(entry, "rb") as src, os.fdopen(open_own(dest, append=False, own=1), "wb") as out:
                out.write(src.read(room))
                out.write(f"\n[avo] cut at the {OUTPUT_CAP >> 20} MiB cap on kept logs ({size} bytes)\n".encode())
        room -= min(size, room)
        kept += 1
    if dropped:
        with os.fdopen(open_own(log_path, append=True, own=1), "a", encoding="utf-8") as fh:
            fh.write(f"[avo] {dropped} more file(s) in the evaluator's log folder were not kept "
                     f"(at most {KEPT_LOG_FILES} files and {OUTPUT_CAP >> 20} MiB)\n")


def evaluate_dir(
    spec: TargetSpec,
    workdir: Path,
    log_path: Path,
    rt: Runtime | None = None,
    *,
    quick: bool = False,
    configs: set[str] | None = None,
    pid_file: Path | None = None,
) -> Evaluation:
    """Evaluate the candidate files in ``workdir`` with the target's evaluator.

    ``rt`` is the run's runtime; without one (tests, tools) a fresh copy of the evaluator as
    installed now is made for this evaluation alone.
    """
    if rt is None:
        with _fresh(spec, "eval") as fresh:
            return evaluate_dir(spec, workdir, log_path, fresh, quick=quick, configs=configs, pid_file=pid_file)
    try:
        outcome = _launch(spec, rt, workdir, log_path, quick=quick, baselines=False, pid_file=pid_file)
    except (ValueError, AvoError) as exc:
        return Evaluation(failed(str(exc)), None, 0.0, log_path)
    result = check_configs(outcome.result, configs)
    scalar, why = scalar_of(result)
    if scalar is None and result.correct:
        result = failed(why or "no scalar", result.notes)
    return Evaluation(result, scalar, outcome.wall_s, log_path)


MALFORMED_BASELINES = "(baselines)"
MALFORMED_PREFIX = "malformed baselines output"
BASELINES_SHAPE = '{"baselines": {"NAME": {"correct": true, "metrics": {...}}, ...}}'


def measure_baselines(spec: TargetSpec, log_path: Path, rt: Runtime | None = None, *,
                      quick: bool = False) -> dict[str, Evaluation]:
    """Run the target's baselines once: ``{name: evaluation}`` (empty when it has none)."""
    if not spec.has_baselines and spec.baselines_command is None:
        return {}
    if rt is None:
        with _fresh(spec, "baselines") as fresh:
            return measure_baselines(spec, log_path, fresh, quick=quick)
    try:
        outcome = _launch(spec, rt, None, log_path, quick=quick, baselines=True)
    except (ValueError, AvoError) as exc:
        return {MALFORMED_BASELINES: Evaluation(failed(f"baselines failed: {exc}"), None, 0.0, log_path)}
    data, problem = last_json_object(outcome.payload)
    many = count_results(outcome.payload)
    if data is None or outcome.returncode != 0 or many > 1:
        error = (problem if data is None else
                 f"{many} result objects" if many > 1 else (outcome.result.error or f"exit {outcome.returncode}"))
        return {MALFORMED_BASELINES: Evaluation(failed(f"baselines failed: {error}"), None, outcome.wall_s, log_path)}
    table = data.get("baselines", data)
    out: dict[str, Evaluation] = {}
    if not isinstance(table, dict) or not table or not all(isinstance(raw, dict) for raw in table.values()):
        shape = "a single result" if isinstance(table, dict) and "correct" in table else "something else"
        return {MALFORMED_BASELINES: Evaluation(failed(
            f"{MALFORMED_PREFIX} of target {spec.name!r}: its last line is {shape}, expected {BASELINES_SHAPE}; "
            "no baselines are recorded for this run"), None, outcome.wall_s, log_path)}
    for name, raw in table.items():
        result = parse_object(raw)
        scalar, why = scalar_of(result)
        if scalar is None and result.correct:
            result = failed(why or "no scalar")
        out[str(name)] = Evaluation(result, scalar, outcome.wall_s, log_path)
    return out


def baselines_payload(results: dict[str, EvalResult]) -> str:
    """The JSON line a baselines child prints (used by :mod:`avo.evaluator`)."""
    return json.dumps({"baselines": {k: v.model_dump(exclude_none=True) for k, v in results.items()}})

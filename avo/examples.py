"""Ship a run as an example, and re-check a shipped example against its recorded score.

An example folder holds the lineage as a git bundle (every version, every tag), the record
(run.json, trajectory.jsonl), the archive (rejected/, supervisor/, NOTES.md) and, when
matplotlib is installed, the plot and the HTML report. ``verify`` re-evaluates the best
version from the bundle with the installed target and compares it with the record: exactly
for a deterministic target, within the declared noise band otherwise.
"""

from __future__ import annotations

import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from avo.contract import gain
from avo.errors import AvoError
from avo.eval_inputs import strip_meta
from avo.lineage import BRANCH, Lineage, git_env
from avo.programs import program
from avo.record_format import parse_trailers
from avo.regular_files import set_aside
from avo.state import RunPaths, RunState, Version, parse_state, run_json_bytes

if TYPE_CHECKING:
    from avo.evaluation import Evaluation
    from avo.host_references import HostReference, HostReferences
    from avo.models import TargetSpec

BUNDLE = "lineage.bundle"
COPIED = ("run.json", "trajectory.jsonl", "NOTES.md")
COPIED_DIRS = ("rejected", "supervisor")


def export_run(run: object, dest: Path, *, plot: bool = True) -> list[Path]:
    """Write ``run`` (an :class:`avo.engine.Run`) into ``dest`` as a self-contained example."""
    from avo.engine import Run

    assert isinstance(run, Run)
    _refuse_overlap(run.paths.root, dest)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    bundle = dest / BUNDLE
    # Under a fresh name, renamed into place: git's lock file follows a link planted at the name.
    # The lineage only (main and the version tags), not whatever other refs the agent made.
    tmp = dest / f".{BUNDLE}.{secrets.token_hex(6)}.tmp"
    try:
        run.lineage.git("bundle", "create", str(tmp.resolve()), BRANCH, "--tags=v[0-9]*")
        os.replace(tmp, bundle)
    finally:
        tmp.unlink(missing_ok=True)
    written.append(bundle)
    for name in COPIED:
        if (run.paths.root / name).exists():
            copy_record_file(run.paths.root / name, dest / name)
            written.append(dest / name)
    for name in COPIED_DIRS:
        folder = run.paths.root / name
        if folder.is_dir() and not folder.is_symlink():
            there = dest / name
            if there.is_symlink() or (os.path.lexists(there) and not there.is_dir()):
                set_aside(there)  # a link planted in the destination is not written through
            shutil.rmtree(there, ignore_errors=True)
            shutil.copytree(folder, there, symlinks=True, ignore=_not_record)
            written.append(there)
    if plot:
        from avo.plot import plot_run
        from avo.report import write_report

        written.append(plot_run(run, dest / "trajectory.png", attempts=True))
        written.append(write_report(run, dest / "report.html"))
    return written


def _refuse_overlap(root: Path, dest: Path) -> None:
    """An export into the run (or into a folder holding it) would replace what it copies from."""
    here, there = root.resolve(), dest.resolve()
    if there == here or there.is_relative_to(here) or here.is_relative_to(there):
        how = "is" if there == here else "holds" if here.is_relative_to(there) else "is inside"
        raise AvoError(f"cannot export into {dest}: it {how} the run {root}; name a folder outside it "
                       "(nothing was written)")


MAX_EXPORTED_FILE = 64 << 20  # of a file in rejected/ or supervisor/: a sparse one can claim terabytes


def copy_record_file(src: Path, dst: Path) -> None:
    """Copy one record file, never through a link at either end: a link at ``src`` (or a second
    name, a hard link to avo's key) is refused, and one planted at ``dst`` is replaced."""
    from avo.regular_files import open_regular, write_json_atomic

    with os.fdopen(open_regular(src, follow_links=False, why="not exported"), "rb") as fh:
        if os.fstat(fh.fileno()).st_nlink > 1:
            raise AvoError(f"{src} has a second name (a hard link to another file); it is not exported. "
                           "Copy its text into a file of its own and export again")
        data = fh.read()
    write_json_atomic(dst, data, sync="none")


def _not_record(folder: str, names: list[str]) -> set[str]:
    """What an export leaves out of rejected/ and supervisor/: links (the agent's, into .avo/
    say, whose target would be shipped), files with a second name (a hard link to the key),
    files over :data:`MAX_EXPORTED_FILE` and anything not a plain file or folder; and the files a
    discarded candidate's own .gitignore ignored (build output, data: the agent's working files,
    kept in the run; the export is the record)."""
    out = set()
    for name in names:
        st = os.lstat(os.path.join(folder, name))
        regular = stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_size <= MAX_EXPORTED_FILE
        if name.endswith("-ignored-files") or not (regular or stat.S_ISDIR(st.st_mode)):
            out.add(name)
    return out


def is_example(folder: Path) -> bool:
    """A folder written by :func:`export_run` (a record and a bundle, no live ``work/``)."""
    return (folder / "run.json").is_file() and (folder / BUNDLE).is_file() and not (folder / "work").is_dir()


def load_example(folder: Path, version: int | None = None) -> tuple[RunState, Version]:
    """A shipped example's record and its best (or ``version``) version, without evaluating."""
    paths = RunPaths(folder)
    state = parse_state(paths, run_json_bytes(paths))  # a damaged file is named, not a traceback
    wanted = state.best_version if version is None else next(
        (v for v in state.versions if v.n == version), None)
    if wanted is None:
        raise AvoError(f"the example {folder} has no version v{version}; it has v0..v{len(state.versions) - 1}")
    return state, wanted


def export_example_version(folder: Path, wanted: Version, dest: Path) -> None:
    """Write the files of ``wanted`` from the example's bundle into ``dest`` (as a run evaluates them).

    The bundle's tag must name the commit the record names, so a seed is what was scored.
    """
    with tempfile.TemporaryDirectory(prefix="avo-example-") as tmp:
        clone = Path(tmp) / "work"
        proc = subprocess.run([program("git"), "clone", "-q", str((folder / BUNDLE).resolve()), str(clone)],
                              capture_output=True, text=True, env=git_env())
        if proc.returncode != 0:
            raise AvoError(f"cannot read {folder / BUNDLE}: {proc.stderr.strip()}")
        lineage = Lineage(clone, Path(tmp) / "index")
        tag_sha = lineage.git("rev-parse", f"v{wanted.n}^{{commit}}", check=False).strip()
        if tag_sha != wanted.sha:
            raise AvoError(f"the bundle's v{wanted.n} is {tag_sha or 'missing'}, the record says {wanted.sha}")
        # The commit's trailers are what was scored when it was committed: run.json edited
        # since (a doubled score) would otherwise be printed as the record beside the measurement.
        trailers = parse_trailers(lineage.git("cat-file", "commit", wanted.sha).partition("\n\n")[2])
        scalar_agrees = trailers.scalar_matches(wanted.scalar)
        if not (scalar_agrees and trailers.metrics_match(wanted.metrics)):
            what = (f"scored {wanted.scalar:.6g}, but its commit in {BUNDLE} says avo-scalar: {trailers.scalar}"
                    if not scalar_agrees else
                    f"has metrics {wanted.metrics}, but its commit in {BUNDLE} says avo-metrics: {trailers.metrics}")
            raise AvoError(f"{folder / 'run.json'} says v{wanted.n} {what}: the record was edited after the run; "
                           "nothing was measured")
        lineage.export(wanted.sha, dest)
    strip_meta(dest)


@dataclass
class Verification:
    """The outcome of re-evaluating a shipped example's best version."""

    ok: bool
    version: Version
    scalar: float | None
    metrics: dict[str, float]
    detail: str
    evaluator_changed: bool
    #: what the CPU it was measured on says about the verdict (another class than the record's)
    host_note: str | None = None


@dataclass
class _Measured:
    ev: Evaluation
    log_tail: str
    evaluator_changed: bool
    evaluator: dict[str, str]
    cpu: str


def _prepare(folder: Path, version: int | None) -> tuple[RunState, Version, TargetSpec]:
    from avo.plugins import find_target

    run_json, bundle = folder / "run.json", folder / BUNDLE
    for needed in (run_json, bundle):
        if not needed.exists():
            raise AvoError(f"{folder} is not a shipped example: {needed.name} is missing")
    state, wanted = load_example(folder, version)
    spec = state.target
    installed = _installed_plugin_target(spec.name)
    if installed is not None or spec.directory is None or not spec.directory.is_dir():
        # The judge is what is installed here, never what the example names: a record naming
        # game2048 plus a directory of its own (shipped in the example) was judged by that.
        spec = installed or find_target(spec.name)
    elif not spec.directory.is_absolute() or spec.directory.resolve().is_relative_to(folder.resolve()):
        raise AvoError(f"{folder}'s record names the evaluator folder {spec.directory}, "
                       f"{'a relative path' if not spec.directory.is_absolute() else 'inside the example itself'}: "
                       "an example cannot bring its own judge; verify it where its target is installed")
    else:  # the folder's target.yaml as it is now (its commands, its noise band), not the record's copy
        spec = find_target(str(spec.directory))
    if state.target.settings is not None:  # replayed in the mode the run was measured in
        spec = spec.model_copy(update={"settings": {
            k: v for k, v in state.target.settings.items() if k in spec.settings_env}})
    return state, wanted, spec


def _installed_plugin_target(name: str) -> TargetSpec | None:
    """The target an installed plugin announces under ``name``, if one does."""
    from avo.plugins import announced_targets

    specs, conflicts = announced_targets()
    if name in conflicts:
        raise AvoError(conflicts[name])
    return next((s for s in specs if s.name == name), None)


def _band(state: RunState, spec: TargetSpec) -> float:
    """The noise band a verify judges by: never wider than the installed target's (the example's
    run.json is its author's to edit); a run recorded before its target had a band replays exactly."""
    return min(state.options.noise.band, spec.noise.band)


def _prepare_draws(folder: Path, version: int | None, draws: int, flag: str,
                   no_band: str) -> tuple[RunState, Version, TargetSpec, float]:
    """:func:`_prepare` for a command that measures ``draws`` times and judges them by the band:
    refused for fewer than one draw, and for a target without a band (``no_band`` says why)."""
    if draws < 1:
        raise AvoError(f"{flag} must be at least 1, not {draws}")
    state, wanted, spec = _prepare(folder, version)
    band = _band(state, spec)
    if band == 0:
        raise AvoError(f"{folder}'s target is deterministic (no noise band): {no_band}")
    return state, wanted, spec, band


def _measure(folder: Path, state: RunState, wanted: Version, spec: TargetSpec, executor: str | None,
             executor_options: dict[str, str] | None, secret: str | None = None) -> _Measured:
    """One evaluation of ``wanted`` with the installed evaluator, drawing its inputs from
    ``secret`` (default: the version's own, the one its accepted evaluation drew)."""
    from avo import executors
    from avo.engine import _finish, evaluator_hashes
    from avo.evaluator_copy import evaluator_source, runtime_hashes
    from avo.host_cpu import cpu_class
    from avo.sandbox import requested_level, resolve_level

    with tempfile.TemporaryDirectory(prefix="avo-verify-") as tmp:
        snap = Path(tmp) / "candidate"
        export_example_version(folder, wanted, snap)
        _, recorded, current = evaluator_hashes(spec, state.hashes.get("evaluator", {}))
        name = executor or os.environ.get(executors.ENV, "").strip() or executors.DEFAULT
        level, _ = resolve_level(requested_level(state.options.sandbox))
        job = executors.make_job(
            spec, "verify", snapshot=snap, quick=state.options.quick, configs=sorted(state.configs) or None,
            evaluator_hashes=current, runtime_hashes=runtime_hashes(evaluator_source(spec)[2] is not None),
            sandbox=level, secret=secret or wanted.secret)
        res = executors.execute(name, job, executor_options or {})
        ev = _finish(res, Path(tmp) / "verify.log")
        log_tail = (Path(tmp) / "verify.log").read_text(errors="replace")[-2000:]
    # The CPU of the machine that measured (a worker's, under a remote executor).
    return _Measured(ev, log_tail, recorded != current, current, res.cpu or cpu_class())


def verify_example(folder: Path, *, version: int | None = None, executor: str | None = None,
                   executor_options: dict[str, str] | None = None) -> Verification:
    """Re-evaluate the best (or ``version``) of a shipped example and compare with the record.

    ``executor`` (default ``$AVO_EXECUTOR``, else ``local``) runs the evaluation, with the
    evaluator installed now. A timed target measured on another class of CPU than the record's
    is compared with the example's reference for that class (``hosts.json``) when it has one.
    """
    from avo.host_references import load_references

    state, wanted, spec = _prepare(folder, version)
    refs = load_references(folder)  # a file avo cannot read is refused before the evaluation
    m = _measure(folder, state, wanted, spec, executor, executor_options)
    ev = m.ev
    if ev.scalar is None:
        return Verification(False, wanted, None, {}, f"the recorded version now fails: {ev.result.error}\n{m.log_tail}",
                            m.evaluator_changed)
    band = _band(state, spec)
    if band == 0:
        def close(a: float, b: float) -> bool:
            return abs(a - b) <= 1e-9 * max(1.0, abs(b))

        # The scalar and every metric, and the same metrics: a record claiming 1e9 with its
        # metrics kept (or none at all) once "reproduced exactly".
        same = close(ev.scalar, wanted.scalar) and set(ev.result.metrics) == set(wanted.metrics) and all(
            close(ev.result.metrics[k], v) for k, v in wanted.metrics.items())
        detail = ("reproduced exactly" if same else
                  f"metrics differ: recorded {wanted.scalar:.6g} {wanted.metrics}, "
                  f"measured {ev.scalar:.6g} {ev.result.metrics}")
        return Verification(same, wanted, ev.scalar, ev.result.metrics, detail, m.evaluator_changed)
    recorded_cpu = recorded_cpu_class(folder, wanted) or refs.recorded_on
    ref = _usable_reference(refs, m, wanted.n, recorded_cpu)
    if ref is not None:
        g = gain(ev.scalar, ref.scalar, spec.direction)
        ok = abs(g) <= band
        detail = (f"measured {ev.scalar:.6g} vs {ref.scalar:.6g}, this CPU class's reference (the middle of "
                  f"{len(ref.draws)} draws, {ref.measured}) ({g:+.2%}; noise band ±{band:.0%})")
        against = (f"compared with the example's reference for it in hosts.json, not with the record "
                   f"({wanted.scalar:.6g}, {gain(wanted.scalar, ref.scalar, spec.direction):+.2%} against that "
                   "reference)")
        if m.cpu == recorded_cpu:
            note = (f"this CPU ({m.cpu}) is the one the run was recorded on, but the installed evaluator "
                    f"differs from the run's, and the reference was measured with the installed one: {against}")
        else:
            note = (f"this CPU ({m.cpu}) is not the one the run was recorded on "
                    f"({recorded_cpu or 'not recorded'}): {against}")
            if ref.evaluator and ref.evaluator != m.evaluator:
                note += "; the installed evaluator differs from the one that reference was measured with"
        return Verification(ok, wanted, ev.scalar, ev.result.metrics, detail, m.evaluator_changed, note)
    # A version accepted after re-measurements records their median; its secret replays the
    # first of them, which the submit record keeps: compare like with like.
    draws = _recorded_draws(folder, wanted)
    first = draws[0][0] if draws else None
    result: Verification | None = None
    if first is not None and abs(gain(first, wanted.scalar, spec.direction)) > band:
        if draws and all(secret for _, secret in draws) and _is_median_of(wanted.scalar, [x for x, _ in draws]):
            # A wide spread (game2048's quick mode, two games a draw): the median is not within
            # the band of its first draw, so every draw it came from is replayed.
            result = _verify_median(folder, state, wanted, spec, executor, executor_options, m, draws, band)
        else:
            first = None  # a first measurement the recorded median could not have come from: a forged line
    if result is None:
        reference = wanted.scalar if first is None else first
        g = gain(ev.scalar, reference, spec.direction)
        what = "recorded" if first is None else f"its first measurement (recorded median {wanted.scalar:.6g})"
        result = Verification(abs(g) <= band, wanted, ev.scalar, ev.result.metrics,
                              f"measured {ev.scalar:.6g} vs {what} {reference:.6g} ({g:+.2%}; noise band ±{band:.0%})",
                              m.evaluator_changed)
    ok = result.ok
    advice = None
    if not ok and m.cpu == recorded_cpu and m.evaluator_changed:
        advice = ("the installed evaluator differs from the one the run was measured with, so the record may "
                  "not be what it measures now, on this CPU class too. `avo verify --record-host` measures "
                  "this version here with the installed evaluator and keeps that as the reference (hosts.json)")
    elif not ok and m.cpu != recorded_cpu:
        advice = (f"this CPU ({m.cpu}) is not the one the run was recorded on "
                f"({recorded_cpu or 'the record does not say which'}), and the example has no reference "
                "for it: a speedup moves between CPU models, so this mismatch may be the machine's, not "
                "the record's. `avo verify --record-host` measures this version here and keeps that as "
                "the reference for this class (hosts.json)")
    result.host_note = advice
    return result


def verify_fresh(folder: Path, *, version: int | None = None, draws: int = 3, executor: str | None = None,
                 executor_options: dict[str, str] | None = None,
                 progress: Callable[[str], None] | None = None) -> Verification:
    """Evaluate a shipped example's best (or ``version``) ``draws`` times on fresh secrets (inputs
    nobody chose: new games, new tensors) and compare their median with the record, within the
    target's noise band.

    A replay (:func:`verify_example`) reproduces what the record's own secret measured, so it
    checks that the record is what its draw scored, not that the draw was a fair one: a record
    made with its secret chosen (the best of 30 draws of a game2048 player, 2.4x its median)
    replays "OK +0.00 %" (round seven of the red team). A reader who does not trust whoever
    produced the run asks for this. On another CPU class than the record's, the example's
    reference for that class (hosts.json) is what the median is compared with, as a replay's is.
    """

    from avo.host_references import load_references

    state, wanted, spec, band = _prepare_draws(
        folder, version, draws, "--fresh", "a draw on new inputs may score otherwise by design, and there is no "
        "band to judge it by (a replay, plain `avo verify`, is the check)")
    refs = load_references(folder)
    measured: list[_Measured] = []
    for i in range(draws):
        m = _measure(folder, state, wanted, spec, executor, executor_options, secret=secrets.token_hex(16))
        if m.ev.scalar is None:
            return Verification(False, wanted, None, {}, f"fresh draw {i + 1} of {draws} fails: "
                                f"{m.ev.result.error}\n{m.log_tail}", m.evaluator_changed)
        measured.append(m)
        if progress is not None:
            progress(f"fresh draw {i + 1} of {draws}: {m.ev.scalar:.6g}")
    median, scalars, near = _median_draw(measured)
    ref = _usable_reference(refs, measured[0], wanted.n, recorded_cpu_class(folder, wanted) or refs.recorded_on)
    reference, what = ((ref.scalar, f"this CPU class's reference {ref.scalar:.6g} (hosts.json)") if ref is not None
                       else (wanted.scalar, f"recorded {wanted.scalar:.6g}"))
    g = gain(median, reference, spec.direction)
    detail = (f"median {median:.6g} over {draws} fresh draw(s) ({', '.join(f'{x:.6g}' for x in scalars)}) vs "
              f"{what} ({g:+.2%}; noise band ±{band:.0%})")
    return Verification(abs(g) <= band, wanted, median, near.ev.result.metrics, detail,
                        any(m.evaluator_changed for m in measured))


def record_host_reference(folder: Path, *, version: int | None = None, draws: int = 3,
                          executor: str | None = None, executor_options: dict[str, str] | None = None,
                          progress: Callable[[str], None] | None = None) -> tuple[HostReference, Path]:
    """Measure a shipped example's best (or ``version``) ``draws`` times on this machine and keep
    the middle draw in ``hosts.json`` as the reference for this CPU class.

    Refused for a deterministic target (it reproduces exactly anywhere), on the CPU class the
    run was recorded on (its record is the reference there), when a draw fails, and when the
    draws spread wider than the noise band (the machine is too busy to say what it measures).
    """
    import time

    from avo.host_cpu import cpu_name
    from avo.host_references import HostReference, load_references, save_references

    state, wanted, spec, band = _prepare_draws(
        folder, version, draws, "--draws", "it reproduces exactly on any machine, so there is no reference per "
        "CPU to record")
    refs = load_references(folder)  # a file avo cannot read is refused before any measuring
    recorded_cpu = recorded_cpu_class(folder, wanted) or refs.recorded_on
    load = list(os.getloadavg()) if hasattr(os, "getloadavg") else []
    measured: list[_Measured] = []
    for i in range(draws):
        m = _measure(folder, state, wanted, spec, executor, executor_options)
        if m.ev.scalar is None:
            raise AvoError(f"v{wanted.n} fails on this machine, nothing recorded: {m.ev.result.error}")
        if m.cpu == recorded_cpu and not m.evaluator_changed:
            raise AvoError(f"this CPU ({m.cpu}) is the one the run was recorded on, with the evaluator the run "
                           "used: its record is the reference here; nothing recorded")
        if measured and m.cpu != measured[0].cpu:
            raise AvoError(f"the draws ran on two CPU classes ({measured[0].cpu}, {m.cpu}); nothing recorded")
        measured.append(m)
        if progress is not None:
            progress(f"draw {i + 1} of {draws}: {m.ev.scalar:.6g}")
    scalars = [m.ev.scalar for m in measured if m.ev.scalar is not None]
    spread = max(scalars) / min(scalars) - 1 if min(scalars) > 0 else float("inf")
    if spread > band:
        raise AvoError(f"the draws spread {spread:.1%}, wider than the noise band ±{band:.0%} "
                       f"({', '.join(f'{x:.6g}' for x in scalars)}): the machine is too busy to record a "
                       "reference; nothing recorded")
    # The middle draw (the lower middle of an even count): a real measurement, scalar and metrics alike.
    middle = sorted(measured, key=lambda m: m.ev.scalar or 0.0)[(len(measured) - 1) // 2]
    ref = HostReference(
        cpu=middle.cpu, cpu_name=cpu_name() if executor in (None, "local") else "", version=wanted.n,
        scalar=float(middle.ev.scalar or 0.0), metrics=middle.ev.result.metrics, draws=scalars,
        measured=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), load=[round(x, 2) for x in load],
        evaluator=middle.evaluator)
    refs.put(ref)
    return ref, save_references(folder, refs)


def _usable_reference(refs: HostReferences, m: _Measured, version: int, recorded_cpu: str | None
                      ) -> HostReference | None:
    """The reference in hosts.json a verify compares with, if any: one for this CPU class when
    that is not the class the run was recorded on; on the record's own class, only one measured
    with the evaluator installed now, and only when that differs from the run's (the record then
    says what another evaluator measured)."""
    ref = refs.find(m.cpu, version)
    if ref is None or m.cpu != recorded_cpu:
        return ref
    return ref if m.evaluator_changed and ref.evaluator == m.evaluator else None


def recorded_cpu_class(folder: Path, wanted: Version) -> str | None:
    """The CPU class the record of ``wanted`` was measured on, as its trajectory says (runs
    recorded before avo wrote it say nothing)."""
    from avo.state import read_trajectory

    for r in read_trajectory(RunPaths(folder)):
        if (r.get("kind") == "submit" and r.get("version") == wanted.n) or (
                wanted.n == 0 and r.get("kind") == "eval" and r.get("id") == "seed"):
            cpu = r.get("cpu")
            return cpu if isinstance(cpu, str) and cpu else None
    return None


def _recorded_draws(folder: Path, wanted: Version) -> list[tuple[float, str | None]] | None:
    """The candidate's draws of a version accepted after re-measurements, each with the secret it
    drew its inputs with when the record keeps them (runs since avo recorded them); the first
    is the one the version's own secret replays."""
    from avo.state import read_trajectory

    for r in read_trajectory(RunPaths(folder)):
        if r.get("kind") == "submit" and r.get("version") == wanted.n and isinstance(r.get("confirm"), dict):
            runs = r["confirm"].get("candidate") or []
            if not runs or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in runs):
                return None
            secrets = r["confirm"].get("candidate_secrets")
            if not (isinstance(secrets, list) and len(secrets) == len(runs)
                    and all(isinstance(x, str) and x for x in secrets) and secrets[0] == wanted.secret):
                secrets = [None] * len(runs)
            return [(float(x), secret) for x, secret in zip(runs, secrets, strict=True)]
    return None


def _is_median_of(scalar: float, runs: list[float]) -> bool:
    import statistics

    return abs(statistics.median(runs) - scalar) <= 1e-9 * max(1.0, abs(scalar))


def _median_draw(measured: list[_Measured]) -> tuple[float, list[float], _Measured]:
    """The median scalar of passing draws, their scalars, and the draw nearest the median (whose
    metrics a verdict shows: a real draw's, not an interpolation)."""
    import statistics

    scalars = [m.ev.scalar for m in measured if m.ev.scalar is not None]
    median = statistics.median(scalars)
    return median, scalars, min(measured, key=lambda m: abs((m.ev.scalar or 0.0) - median))


def _verify_median(folder: Path, state: RunState, wanted: Version, spec: TargetSpec, executor: str | None,
                   executor_options: dict[str, str] | None, first: _Measured,
                   draws: list[tuple[float, str | None]], band: float) -> Verification:
    """Replay every draw a recorded median came from (``first`` replayed the first already) and
    compare the median of the replays with the record."""
    replays = [first]
    for _, secret in draws[1:]:
        m = _measure(folder, state, wanted, spec, executor, executor_options, secret=secret)
        if m.ev.scalar is None:
            return Verification(False, wanted, None, {}, f"a replayed draw of the recorded median now fails: "
                                f"{m.ev.result.error}\n{m.log_tail}", m.evaluator_changed)
        replays.append(m)
    median, scalars, near = _median_draw(replays)
    g = gain(median, wanted.scalar, spec.direction)
    detail = (f"measured a median of {median:.6g} over the {len(scalars)} recorded draws, each replayed "
              f"({', '.join(f'{x:.6g}' for x in scalars)}), vs recorded median {wanted.scalar:.6g} "
              f"({g:+.2%}; noise band ±{band:.0%})")
    return Verification(abs(g) <= band, wanted, median, near.ev.result.metrics, detail,
                        any(r.evaluator_changed for r in replays))

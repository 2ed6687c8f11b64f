"""Ship a run as an example, and re-check a shipped example against its recorded score.

An example folder holds the lineage as a git bundle (every version, every tag), the record
(run.json, trajectory.jsonl), the archive (rejected/, supervisor/, NOTES.md) and, when
matplotlib is installed, the plot and the HTML report. ``verify`` re-evaluates the best
version from the bundle with the installed target and compares it with the record: exactly
for a deterministic target, within the declared noise band otherwise.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from avo.contract import gain
from avo.errors import AvoError
from avo.eval_inputs import strip_meta
from avo.lineage import Lineage
from avo.state import RunState, Version

BUNDLE = "lineage.bundle"
COPIED = ("run.json", "trajectory.jsonl", "NOTES.md")
COPIED_DIRS = ("rejected", "supervisor")


def export_run(run: object, dest: Path, *, plot: bool = True) -> list[Path]:
    """Write ``run`` (an :class:`avo.engine.Run`) into ``dest`` as a self-contained example."""
    from avo.engine import Run

    assert isinstance(run, Run)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    bundle = dest / BUNDLE
    run.lineage.git("bundle", "create", str(bundle.resolve()), "--all")
    written.append(bundle)
    for name in COPIED:
        if (run.paths.root / name).exists():
            shutil.copy2(run.paths.root / name, dest / name)
            written.append(dest / name)
    for name in COPIED_DIRS:
        if (run.paths.root / name).is_dir():
            shutil.rmtree(dest / name, ignore_errors=True)
            # Files a discarded candidate's own .gitignore ignored (build output, data) are the
            # agent's working files, kept in the run; the export is the record.
            shutil.copytree(run.paths.root / name, dest / name, ignore=shutil.ignore_patterns("*-ignored-files"))
            written.append(dest / name)
    if plot:
        from avo.plot import plot_run
        from avo.report import write_report

        written.append(plot_run(run, dest / "trajectory.png", attempts=True))
        written.append(write_report(run, dest / "report.html"))
    return written


def is_example(folder: Path) -> bool:
    """A folder written by :func:`export_run` (a record and a bundle, no live ``work/``)."""
    return (folder / "run.json").is_file() and (folder / BUNDLE).is_file() and not (folder / "work").is_dir()


def load_example(folder: Path, version: int | None = None) -> tuple[RunState, Version]:
    """A shipped example's record and its best (or ``version``) version, without evaluating."""
    state = RunState.model_validate_json((folder / "run.json").read_bytes())
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
        proc = subprocess.run(["git", "clone", "-q", str((folder / BUNDLE).resolve()), str(clone)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise AvoError(f"cannot read {folder / BUNDLE}: {proc.stderr.strip()}")
        lineage = Lineage(clone, Path(tmp) / "index")
        tag_sha = lineage.git("rev-parse", f"v{wanted.n}^{{commit}}", check=False).strip()
        if tag_sha != wanted.sha:
            raise AvoError(f"the bundle's v{wanted.n} is {tag_sha or 'missing'}, the record says {wanted.sha}")
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


def verify_example(folder: Path, *, version: int | None = None, executor: str | None = None,
                   executor_options: dict[str, str] | None = None) -> Verification:
    """Re-evaluate the best (or ``version``) of a shipped example and compare with the record.

    ``executor`` (default ``$AVO_EXECUTOR``, else ``local``) runs the evaluation, with the
    evaluator installed now.
    """
    from avo import executors
    from avo.engine import _finish, evaluator_hashes
    from avo.evaluator_copy import evaluator_source, runtime_hashes
    from avo.plugins import find_target
    from avo.sandbox import resolve_level

    run_json, bundle = folder / "run.json", folder / BUNDLE
    for needed in (run_json, bundle):
        if not needed.exists():
            raise AvoError(f"{folder} is not a shipped example: {needed.name} is missing")
    state, wanted = load_example(folder, version)
    spec = state.target
    if spec.directory is None or not spec.directory.is_dir():
        spec = find_target(spec.name)
        if state.target.settings is not None:  # replayed in the mode the run was measured in
            spec = spec.model_copy(update={"settings": {
                k: v for k, v in state.target.settings.items() if k in spec.settings_env}})
    with tempfile.TemporaryDirectory(prefix="avo-verify-") as tmp:
        snap = Path(tmp) / "candidate"
        export_example_version(folder, wanted, snap)
        _, recorded, current = evaluator_hashes(spec, state.hashes.get("evaluator", {}))
        evaluator_changed = recorded != current
        name = executor or os.environ.get(executors.ENV, "").strip() or executors.DEFAULT
        level, _ = resolve_level(state.options.sandbox or os.environ.get("AVO_SANDBOX", "").strip() or "auto")
        job = executors.make_job(
            spec, "verify", snapshot=snap, quick=state.options.quick, configs=sorted(state.configs) or None,
            evaluator_hashes=current, runtime_hashes=runtime_hashes(evaluator_source(spec)[2] is not None),
            sandbox=level, secret=wanted.secret)
        ev = _finish(executors.execute(name, job, executor_options or {}), Path(tmp) / "verify.log")
        log_tail = (Path(tmp) / "verify.log").read_text(errors="replace")[-2000:]
    if ev.scalar is None:
        return Verification(False, wanted, None, {}, f"the recorded version now fails: {ev.result.error}\n{log_tail}",
                            evaluator_changed)
    band = state.options.noise.band
    if band == 0:
        same = all(abs(ev.result.metrics.get(k, float("nan")) - v) <= 1e-9 * max(1.0, abs(v))
                   for k, v in wanted.metrics.items())
        detail = ("reproduced exactly" if same else
                  f"metrics differ: recorded {wanted.metrics}, measured {ev.result.metrics}")
        return Verification(same, wanted, ev.scalar, ev.result.metrics, detail, evaluator_changed)
    # A version accepted after re-measurements records their median; its secret replays the
    # first of them, which the submit record keeps: compare like with like.
    first = _first_measurement(folder, wanted)
    reference = wanted.scalar if first is None else first
    g = gain(ev.scalar, reference, spec.direction)
    ok = abs(g) <= band
    what = "recorded" if first is None else f"its first measurement (recorded median {wanted.scalar:.6g})"
    detail = f"measured {ev.scalar:.6g} vs {what} {reference:.6g} ({g:+.2%}; noise band ±{band:.0%})"
    return Verification(ok, wanted, ev.scalar, ev.result.metrics, detail, evaluator_changed)


def _first_measurement(folder: Path, wanted: Version) -> float | None:
    """The first scalar of a version accepted after re-measurements (the one its secret replays)."""
    from avo.state import RunPaths, read_trajectory

    for r in read_trajectory(RunPaths(folder)):
        if r.get("kind") == "submit" and r.get("version") == wanted.n and isinstance(r.get("confirm"), dict):
            runs = r["confirm"].get("candidate") or []
            return float(runs[0]) if runs and isinstance(runs[0], (int, float)) else None
    return None

"""``avo recover``: rebuild run.json's versions from avo's private backup; re-link the trajectory.

The backup (``.avo/lineage.git``) holds what was actually committed: each version's commit,
its trailers and its ``.avo/scores.jsonl``. The versions and the best are rebuilt from it
(the backup wins over run.json and over work/.git). No trajectory line is deleted: a
``recovered`` record names every broken line with the hash it had, so those lines are
flagged from then on, and re-links the chain.
"""

from __future__ import annotations

import json
from typing import Any

from avo.chain import RECOVERED, verify
from avo.contract import gain
from avo.errors import RecordError
from avo.lineage import BRANCH, read_any, read_commits, ref_of, set_branch
from avo.models import TargetSpec
from avo.record_check import SCORES_FILE, started_terms, trajectory_findings
from avo.record_checkpoint import Fold
from avo.record_format import parse_trailers, terms
from avo.run_key import trajectory_signatures
from avo.state import (
    RunOptions,
    RunPaths,
    RunState,
    Version,
    append_trajectory,
    read_trajectory,
    save_state,
    trajectory_bytes,
)
from avo.terms_compare import restored_terms, terms_differences


def _versions_from_backup(paths: RunPaths, state: RunState) -> list[Version]:
    main = ref_of(paths.backup, f"refs/heads/{BRANCH}") if (paths.backup / "HEAD").exists() else None
    if main is None:
        raise RecordError(f"avo's private backup {paths.backup} is missing or empty, so there is nothing to "
                          "rebuild the record from; restore the run folder from a copy of your own")
    chain = read_commits(paths.backup, main)
    # Each walked object by object, every tree hashed to its id: git's own `sha:path` checks
    # only the blob, so a tree rewritten under its old name would name another file.
    files = [got[2] if (got := read_any(paths.backup, f"{c.sha}:{SCORES_FILE}")) and got[1] == "blob" else None
             for c in chain]
    old = {v.sha: v for v in state.versions}
    versions: list[Version] = []
    for i, (c, raw) in enumerate(zip(chain, files, strict=True)):
        lines = (raw or b"").decode("utf-8", "replace").splitlines()
        try:
            line: dict[str, Any] = json.loads(lines[-1]) if lines else {}
        except ValueError:
            line = {}
        trailers = parse_trailers(c.message)
        if line.get("version") != f"v{i}":
            raise RecordError(f"commit {c.sha[:12]} in avo's private backup is version {i} of its lineage, but its "
                              f"{SCORES_FILE} does not end with v{i}'s line; the backup itself is damaged")
        scalar = float(line["scalar"])
        metrics = {str(k): float(x) for k, x in line.get("metrics", {}).items()}
        if not (trailers.scalar_matches(scalar) and trailers.metrics_match(metrics)):
            raise RecordError(f"commit {c.sha[:12]} in avo's private backup carries trailers that disagree with "
                              f"its own {SCORES_FILE}; the backup itself is damaged")
        prior = old.get(c.sha)
        # Each version becomes the best, so "new best" means better than the one before it.
        new_best = prior.new_best if prior else (
            not versions or gain(scalar, versions[-1].scalar, state.target.direction) > 0)
        versions.append(Version(
            n=i, sha=c.sha, tree=c.tree, scalar=scalar, metrics=metrics, message=str(line.get("message", "")),
            step=int(line.get("step", 0)), time=float(line.get("time", 0.0)),
            notes=prior.notes if prior else None, spread=prior.spread if prior else None, new_best=new_best,
            secret=prior.secret if prior else None))  # the inputs `avo verify` replays
    return versions


def _signed_prefix(paths: RunPaths, state: RunState, versions: list[Version]) -> tuple[list[Version], list[str]]:
    """In a run whose lines are signed, the versions up to the first one no accepted submit avo
    signed records: the backup is avo's, but an agent running as the same user can push a
    commit of its own into it (trailers and scores file claiming 1e9), and rebuilding from the
    backup alone made that the best. The backup's branch is moved back to the last one kept;
    the commits past it stay in its objects. Any version counts in an older, unsigned run."""
    probe = state.model_copy(update={"versions": versions, "best": len(versions) - 1})
    found = trajectory_findings(paths, probe, locked=True, data=trajectory_bytes(paths))
    if found.signatures is None or not found.signatures.signed_run or not found.unrecorded:
        return versions, []
    k = min(found.unrecorded)
    kept, past = versions[:k], versions[k:]
    set_branch(paths.backup, kept[-1].sha)
    return kept, [f"not adopted: v{v.n} (commit {v.sha[:12]}, scalar {v.scalar:g}) is in avo's backup, but no accepted "
                  "submit avo signed records it (a commit pushed there by hand?); the backup's branch is back at "
                  f"v{k - 1}" for v in past]


def _changes(before: RunState, after: list[Version]) -> list[str]:
    notes = []
    new = {v.sha: v for v in after}
    for v in before.versions:
        if v.sha not in new:
            notes.append(f"dropped run.json's v{v.n} (commit {v.sha[:12] or 'none'}): avo's backup does not "
                         "hold it")
            continue
        w = new[v.sha]
        for key in ("n", "scalar", "metrics", "message", "step", "tree"):
            if getattr(v, key) != getattr(w, key):
                notes.append(f"v{w.n}: {key} {getattr(v, key)!r} -> {getattr(w, key)!r} (from its commit)")
    olds = {v.sha for v in before.versions}
    notes += [f"restored v{w.n} (commit {w.sha[:12]}) from avo's backup" for w in after if w.sha not in olds]
    if before.best != len(after) - 1:
        notes.append(f"best v{before.best} -> v{len(after) - 1}")
    return notes


def _restore_terms(paths: RunPaths, state: RunState) -> list[str]:
    """Put back the spec, options, configs, hashes and sandbox level the run started on (v0's
    commit pins them)."""
    recorded, problem = started_terms(paths, state)
    if problem:
        return [f"cannot restore the run's terms: {problem}"]
    if recorded is None:
        return []
    now = terms(state)
    fixed = restored_terms(recorded, now)
    notes = []
    for where, before, after in terms_differences(fixed, now):
        table = where.startswith("hashes")  # a table of file hashes: its size says enough
        was, put = (f"{len(v)} files" if table and isinstance(v, dict) else repr(v) for v in (before, after))
        notes.append(f"{where} {was} -> {put} (the terms v0's commit pins)")
    state.target = TargetSpec.model_validate(fixed["target"])
    state.options = RunOptions.model_validate({**fixed["options"], "max_steps": state.options.max_steps})
    state.configs = list(fixed["configs"])
    if isinstance(fixed.get("hashes"), dict):
        state.hashes = fixed["hashes"]
    if isinstance(fixed.get("sandbox"), str):
        state.sandbox = fixed["sandbox"]
    return notes


def _restore_counters(paths: RunPaths, state: RunState, last_step: int) -> list[str]:
    """Re-measurements, the supervisor's due state and the steps taken, as the trajectory records
    them (folded as the record check folds them; ``last_step``: the newest version's)."""
    # The lines the record check skips: broken ones (set aside now or before). Not every line a
    # `recovered` record names: that record may be the agent's, naming an intact line of avo's.
    data = trajectory_bytes(paths)
    signatures = trajectory_signatures(paths, data)
    report = verify(data, state.chain, signatures.counts)
    lines, records = report.lines, report.records
    fold = Fold()
    steps = [state.steps, last_step]
    for n, r in enumerate(records, 1):
        if r is None or n in report.problems or n in report.flagged:
            continue  # broken, or set aside
        if Fold.may_count(r, lines[n - 1], signatures):  # (not a line avo did not sign claiming counters)
            fold.counters(n, r)
        if r.get("kind") == "submit" and isinstance(r.get("step"), int) and signatures.counts(lines[n - 1]):
            steps.append(r["step"])  # an unsigned line's step 999 ended the run's step budget
    remeasured = fold.remeasured
    due = fold.due[1] if fold.due else None
    notes = []
    remeasured = {k: v for k, v in remeasured.items() if v}
    if {k: v for k, v in state.remeasured.items() if v} != remeasured:
        notes.append(f"re-measurements {state.remeasured} -> {remeasured} (from the trajectory)")
        state.remeasured = remeasured
    if due is not None and not state.supervisor.due:
        notes.append(f"the supervisor is due again ({due}): the trajectory records no redirect since")
        state.supervisor.due, state.supervisor.reason = True, due
    if max(steps) != state.steps:
        notes.append(f"steps {state.steps} -> {max(steps)} (from the trajectory)")
        state.steps = max(steps)
    return notes


def rebuild_record(paths: RunPaths, state: RunState) -> list[str]:
    """Rebuild ``state``'s versions and best from the backup, save, and re-link the trajectory.

    Called under the run's lock. Returns what it changed (empty lists mean nothing did).
    """
    versions, refused = _signed_prefix(paths, state, _versions_from_backup(paths, state))
    notes = refused + _changes(state, versions)
    state.versions, state.best = versions, len(versions) - 1
    notes += _restore_terms(paths, state)
    notes += _restore_counters(paths, state, versions[-1].step)
    save_state(paths, state)
    found = trajectory_findings(paths, state, locked=True, data=trajectory_bytes(paths))
    if found.lines or found.gaps or found.unrecorded or found.other:
        acknowledged = [{"line": n, "sha": found.line_hashes[n], "problem": what}
                        for n, what in sorted(found.lines.items())]
        gaps = [{"line": n, "sha": found.line_hashes[n], "problem": what} for n, what in sorted(found.gaps.items())]
        notes += [f"set aside trajectory.jsonl line {a['line']}: it {a['problem']}" for a in acknowledged]
        notes += [f"trajectory.jsonl line {g['line']} {g['problem']}: those are lost; it is avo's and kept"
                  for g in gaps]
        records = found.report.records if found.report else []
        for n in sorted(found.lines):  # what an earlier repair changed stays said, though its record was edited
            r = records[n - 1] if n <= len(records) else None
            if r is not None and r.get("kind") == RECOVERED:
                notes += [f"(line {n}, an earlier repair's record, now reads:) {said}"
                          for said in r.get("notes") or [] if isinstance(said, str)]
        notes += [f"v{k} has no accepted submit in the trajectory (kept: its commit is in the backup)"
                  for k in found.unrecorded]
        notes += [o for o in found.other if "steps were taken" not in o]
        count = sum(1 for r in read_trajectory(paths) if r.get("kind") == RECOVERED)
        append_trajectory(paths, {"kind": RECOVERED, "id": f"recovered-{count + 1}", "step": state.steps,
                                  "acknowledged": acknowledged, "gaps": gaps, "unrecorded_versions": found.unrecorded,
                                  "versions": len(versions), "best": state.best, "notes": notes}, whole=True,
                          aside=set(found.report.problems) if found.report else ())
    return notes

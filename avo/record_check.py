"""The record checks itself: run.json against the lineage and against the trajectory.

Every command calls :func:`check_record` before it believes run.json: each version's commit
must be in avo's private backup (outside work/), on one chain, with the tree, trailers and
``.avo/scores.jsonl`` the record names; the best must be the newest version; the
trajectory's hash chain must be intact and its accepted steps must be the versions. What
differs is named, with the way back (``avo recover``). This detects edits by anything
running as the same user; it cannot prevent them (docs/SECURITY.md).
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from avo.chain import RECOVERED, ChainReport, acknowledged, line_hash, verify
from avo.errors import RecordError
from avo.lineage import BRANCH, META_DIR, blob_id, commit_message, object_ids, read_commits, read_object, ref_of
from avo.record_checkpoint import Fold  # the incremental check folds the same counters
from avo.record_format import parse_trailers, scores_file, scores_line, terms, terms_digest
from avo.run_key import LineSignatures, trajectory_signatures
from avo.state import RunPaths, RunState, Version, load_state, read_trajectory, trajectory_bytes
from avo.terms_compare import terms_differences

SCORES_FILE = f"{META_DIR}/scores.jsonl"
_RETRIES, _PAUSE_S = 5, 0.2  # a submit between two writes is done in far less than that


def _num(x: float | None) -> str:
    return "none" if x is None else repr(x)


def _scores_problem(paths: RunPaths, v: Version, expected: str) -> str:
    """Which line of v's committed scores file differs from the record, and how."""
    raw = read_object(paths.backup, f"{v.sha}:{SCORES_FILE}")
    where = f"the {SCORES_FILE} committed with v{v.n} ({v.sha[:12]})"
    if raw is None:
        return f"{where} is missing"
    got, want = raw.decode("utf-8", "replace").splitlines(), expected.splitlines()
    for i, (a, b) in enumerate(zip(got, want, strict=False)):
        if a != b:
            try:
                ga, wb = json.loads(a), json.loads(b)
                fields = [k for k in wb if ga.get(k) != wb[k]] or ["(format)"]
                detail = ", ".join(f"{k} {ga.get(k)!r} vs {wb[k]!r}" for k in fields[:3])
            except ValueError:
                detail = "unreadable line"
            return f"{where} says for v{i}: {detail} (committed vs run.json)"
    return f"{where} has {len(got)} lines, run.json's versions give {len(want)}"


def _in_flight(paths: RunPaths, state: RunState) -> dict[str, Any] | None:
    """The journal of a submit writing the record right now, if avo signed it for this step or the next.

    Only then does a reader allow for what that submit has written so far: any file at
    ``pending.json`` (``{}`` by hand) used to let `avo status` show a version added to
    run.json by hand as the best.
    """
    from avo.run_key import read_verified

    journal = read_verified(paths, paths.journal)
    # A started submit writes nothing to the record until its decision's journal replaces this one.
    if journal is None or journal.get("kind") == "started" or journal.get("step") not in (state.steps, state.steps + 1):
        return None
    return journal


def _commits(journal: dict[str, Any] | None, v: Version) -> bool:
    """Whether ``journal`` is the accepted submit that made ``v``."""
    record = journal.get("record") if journal is not None and journal.get("kind") == "accept" else None
    return (isinstance(record, dict) and record.get("version") == v.n and record.get("scalar") == v.scalar
            and record.get("step") == v.step)


def _lineage_problems(paths: RunPaths, state: RunState, locked: bool) -> list[str]:
    backup = paths.backup
    if not (backup / "HEAD").exists():
        return [f"avo's private backup {backup.relative_to(paths.root)} is missing (deleted?), so the record "
                "cannot be checked against the lineage; `avo recover` re-creates it from work/.git"]
    problems: list[str] = []
    versions = state.versions
    present = object_ids(backup, [v.sha for v in versions])
    missing = [v for v, oid in zip(versions, present, strict=False) if oid is None]
    if (missing and missing == versions[-1:] and not locked and len(versions) > 1
            and _commits(_in_flight(paths, state), versions[-1])):
        versions = versions[:-1]  # a submit is committing it right now; the backup follows
        missing = []
    for v in missing:
        problems.append(f"run.json's v{v.n} is commit {v.sha[:12] or '(none)'}, which avo's private backup "
                        "does not hold (a version added or changed by hand?)")
    kept = [v for v in versions if v not in missing]
    if not kept:
        return problems
    chain = read_commits(backup, kept[-1].sha)
    by_sha = {c.sha: (i, c) for i, c in enumerate(chain)}
    for v in kept:
        if v.sha not in by_sha:
            continue
        i, c = by_sha[v.sha]
        if i != v.n:
            problems.append(f"run.json's v{v.n} is commit {v.sha[:12]}, which is version {i} of avo's backup lineage")
            continue
        if c.tree != v.tree:
            problems.append(f"run.json's v{v.n} names tree {v.tree[:12]}, its commit {v.sha[:12]} has {c.tree[:12]}")
        t = parse_trailers(c.message)
        if not t.scalar_matches(v.scalar):
            problems.append(f"run.json's v{v.n} has scalar {_num(v.scalar)}, but its commit {v.sha[:12]} "
                            f"(avo's private backup) says avo-scalar: {t.scalar}")
        if not t.metrics_match(v.metrics):
            problems.append(f"run.json's v{v.n} has metrics {v.metrics}, but its commit {v.sha[:12]} "
                            f"says avo-metrics: {t.metrics}")
    if len(chain) != kept[-1].n + 1 and not problems:
        problems.append(f"avo's backup lineage up to v{kept[-1].n} has {len(chain)} commits, run.json lists "
                        f"{kept[-1].n + 1} versions")
    # Version n's file is the first n + 1 lines of the newest one: one buffer, hashed by prefix.
    lines = [scores_line(v).encode() for v in state.versions]
    ends = list(itertools.accumulate(len(line) for line in lines))
    whole = memoryview(b"".join(lines))
    ids = object_ids(backup, [f"{v.sha}:{SCORES_FILE}" for v in kept])
    for v, oid in zip(kept, ids, strict=False):
        if oid != blob_id(whole[:ends[v.n]]):
            problems.append(_scores_problem(paths, v, scores_file(state.versions[:v.n + 1])))
            break  # later files repeat the same lines
    if locked and not missing:
        main = ref_of(backup, f"refs/heads/{BRANCH}")
        if main != state.versions[-1].sha:
            problems.append(f"avo's private backup ends at commit {(main or 'nothing')[:12]}, run.json's newest "
                            f"version v{state.versions[-1].n} is {state.versions[-1].sha[:12]}")
    return problems


def started_terms(paths: RunPaths, state: RunState) -> tuple[dict[str, Any] | None, str | None]:
    """The terms the run started on, as pinned by v0's commit in the backup, and why not if not.

    ``(terms, None)``: the start record's terms, vouched for by v0's ``avo-terms`` trailer;
    ``(None, None)``: a run from before terms were pinned; ``(None, problem)``: they disagree.
    """
    message = commit_message(paths.backup, state.versions[0].sha) if (paths.backup / "HEAD").exists() else None
    pinned = parse_trailers(message or "").terms
    if pinned is None:
        return None, None
    start = next((r for r in read_trajectory(paths) if r.get("kind") == "start"), None)
    recorded = (start or {}).get("terms")
    if not isinstance(recorded, dict) or terms_digest(recorded) != pinned:
        return None, ("the start record of trajectory.jsonl does not hold the terms v0's commit pins "
                      "(avo-terms), so the run's spec and options cannot be checked")
    return recorded, None


def _terms_problems(paths: RunPaths, state: RunState) -> list[str]:
    recorded, problem = started_terms(paths, state)
    if problem:
        return [problem]
    if recorded is None:
        return []
    return [f"run.json's {key} is {now!r}, but the run started with {then!r} (pinned by v0's commit)"
            for key, now, then in terms_differences(recorded, terms(state))[:8]]


def _record_problems_elsewhere(state: RunState, records: list[dict[str, Any] | None], lines: list[bytes],
                               signatures: LineSignatures) -> list[str]:
    """Counters that steer the policy, checked against the trajectory that produced them."""
    problems = []
    fold = Fold()
    for n, r in enumerate(records, 1):
        if r and Fold.may_count(r, lines[n - 1], signatures):
            fold.counters(n, r)
    due = fold.due
    recorded = {k: v for k, v in state.remeasured.items() if v}
    remeasured = {k: v for k, v in fold.remeasured.items() if v}  # a confirmation that failed at once
    if recorded != remeasured:
        problems.append(f"run.json's re-measurements of the best {recorded} are not those the trajectory "
                        f"records {remeasured}")
    if due is not None and not state.supervisor.due:
        problems.append(f"trajectory.jsonl line {due[0]} records the supervisor due ({due[1]}) and no redirect "
                        "since, but run.json says it is not due")
    return problems


def _counter_claim(r: dict[str, Any]) -> str:
    if r.get("kind") == RECOVERED:
        return f"versions {r.get('unrecorded_versions')} as recovered"
    if r.get("kind") == "submit" and r.get("outcome") == "accepted":
        return f"v{r.get('version')} accepted at {r.get('scalar')}"
    if r.get("kind") == "submit":
        return f"re-measurements of v{r.get('best_before')} {(r.get('confirm') or {}).get('best')}"
    return "the supervisor due" if r.get("kind") == "supervisor_due" else "an answer to the supervisor"


@dataclass
class TrajectoryFindings:
    """How the trajectory disagrees: per line (chain and content), per version, and the rest."""

    lines: dict[int, str] = field(default_factory=dict)
    gaps: dict[int, str] = field(default_factory=dict)  # lines of avo's after deleted lines (kept)
    line_hashes: dict[int, str] = field(default_factory=dict)
    unrecorded: list[int] = field(default_factory=list)
    other: list[str] = field(default_factory=list)
    data: bytes = b""  # what was checked, for a checkpoint of it (avo.record_checkpoint)
    report: ChainReport | None = None
    signatures: LineSignatures | None = None  # which of its lines may move the counters

    def describe(self) -> list[str]:
        out = [f"trajectory.jsonl line {n} {what}" for n, what in sorted({**self.lines, **self.gaps}.items())]
        out += [f"run.json's v{k} has no accepted submit in trajectory.jsonl" for k in self.unrecorded]
        return out + self.other


def trajectory_findings(paths: RunPaths, state: RunState, locked: bool, data: bytes) -> TrajectoryFindings:
    """Check the trajectory's chain (``data``, its bytes) and its accepted steps against run.json's versions."""
    signatures = trajectory_signatures(paths, data)
    report = verify(data, state.chain, signatures.counts)
    found = TrajectoryFindings(dict(report.problems), dict(report.gaps), data=data, report=report,
                               signatures=signatures)
    if report.head_problem:
        found.other.append(f"trajectory.jsonl: {report.head_problem}")
    head = state.chain.count if state.chain is not None else len(report.lines)
    in_flight = None if locked else _in_flight(paths, state)
    journal = in_flight is not None
    accepted: dict[int, int] = {}
    excused: set[int] = set()
    max_step = 0
    versions = state.versions
    # Lines avo's own `recovered` records set aside, by the hash they had then.
    set_aside = acknowledged(report.records, report.lines, signatures.counts)
    for n, r in enumerate(report.records, 1):
        if r is None or n in report.flagged or n in report.problems:
            continue
        if n in set_aside and set_aside[n] == line_hash(report.lines[n - 1]):
            continue
        unsigned = not Fold.may_count(r, report.lines[n - 1], signatures)
        if unsigned:
            found.lines[n] = (f"records {_counter_claim(r)}, but avo did not sign it (a line written by hand: "
                              "it does not count)")
            if not (r.get("kind") == "submit" and r.get("outcome") == "accepted"):
                continue  # an accepted submit is checked on: what it claims is named if it disagrees
        if r.get("kind") == RECOVERED:
            excused.update(x for x in r.get("unrecorded_versions") or [] if isinstance(x, int))
        beyond = n > head
        if r.get("kind") == "eval" and r.get("id") == "seed" and r.get("scalar") != versions[0].scalar:
            found.lines[n] = (f"records the seed at {_num(r.get('scalar'))}, but run.json's v0 is "
                              f"{_num(versions[0].scalar)}")
        if r.get("kind") != "submit":
            continue
        if isinstance(r.get("step"), int) and not beyond and signatures.counts(report.lines[n - 1]):
            max_step = max(max_step, r["step"])  # (a step number of the agent's own moves nothing)
        k = r.get("version")
        if r.get("outcome") != "accepted":
            continue
        if not isinstance(k, int):  # every accepted submit made a version: a flipped rejection names none
            found.lines[n] = f"records step {r.get('step')} as accepted, but names no version"
            continue
        if k >= len(versions) or k < 1:
            if not (beyond and not locked and k >= len(versions)):
                found.lines[n] = f"records step {r.get('step')} accepted as v{k}, but run.json has no v{k}"
            continue
        v = versions[k]
        diffs = [f"{key} {r.get(key)!r} vs {getattr(v, key)!r}" for key in ("scalar", "step", "message")
                 if r.get(key) != getattr(v, key)]
        if diffs:
            found.lines[n] = f"records v{k} with {'; '.join(diffs)} (trajectory vs run.json)"
            continue
        if not unsigned:
            accepted[k] = n
    found.unrecorded = [v.n for v in versions[1:] if v.n not in accepted and v.n not in excused
                        and not (v is versions[-1] and _commits(in_flight, v))]
    if state.steps < max_step:
        found.other.append(f"run.json says {state.steps} steps were taken, but trajectory.jsonl records a "
                           f"submit of step {max_step}")
    if locked or not journal:
        good = [r if n not in report.flagged and n not in report.problems else None
                for n, r in enumerate(report.records, 1)]
        found.other += _record_problems_elsewhere(state, good, report.lines, signatures)
    found.line_hashes = {n: line_hash(report.lines[n - 1]) for n in (*found.lines, *found.gaps)}
    return found


def record_problems(paths: RunPaths, state: RunState, *, locked: bool, data: bytes | None = None) -> list[str]:
    """Every way run.json disagrees with the lineage or the trajectory (empty: it agrees).

    ``locked``: the caller holds the run's lock and has finished any interrupted submit, so
    the three must agree exactly; otherwise a submit may be committing meanwhile, and what
    it has written so far is allowed for. ``data``: the trajectory's bytes, read by the
    caller (read here when ``None``); what is checked is exactly these bytes.

    What a signed checkpoint already vouches for is not checked again
    (:mod:`avo.record_checkpoint`); a command holding the lock moves the checkpoint forward.
    """
    from avo.record_checkpoint import fresh_checkpoint, quick_check, save_checkpoint

    # Read, not mapped: a file truncated under a mapping would kill the reader with SIGBUS.
    data = trajectory_bytes(paths) if data is None else data
    quick = quick_check(paths, state, data, locked=locked)
    if quick is not None:
        if locked and quick.body() != quick.previous:
            save_checkpoint(paths, quick)
        return []
    problems = []
    if state.best != len(state.versions) - 1:
        problems.append(f"run.json's best is v{state.best}, but its newest version is v{len(state.versions) - 1} "
                        "(every accepted version becomes the best)")
    found = trajectory_findings(paths, state, locked, data)
    problems += _lineage_problems(paths, state, locked) + _terms_problems(paths, state) + found.describe()
    if not problems and locked and not paths.journal.exists() and found.report is not None \
            and found.signatures is not None:
        fresh = fresh_checkpoint(state, found.data, found.report.records, found.report.lines,
                                 set(found.report.flagged), found.signatures)
        if fresh is not None:
            save_checkpoint(paths, fresh)
    return problems


def record_error(paths: RunPaths, problems: list[str]) -> RecordError:
    shown = "\n".join(f"  - {p}" for p in problems[:12])
    more = f"\n  ... and {len(problems) - 12} more" if len(problems) > 12 else ""
    return RecordError(
        f"the record of run {paths.root.name} disagrees with its lineage, so avo will not act on it:\n"
        f"{shown}{more}\nNothing was changed. `avo recover --run {paths.root}` rebuilds run.json's versions "
        "and best from avo's private backup (.avo/lineage.git, what was actually committed) and re-links "
        "the trajectory, keeping every line. Agents must not edit run.json or trajectory.jsonl.")


def check_record(paths: RunPaths, state: RunState, *, locked: bool, data: bytes | None = None) -> RunState:
    """Raise :class:`RecordError` unless the record agrees with itself; return the state checked.

    ``data``: the trajectory's bytes as the caller read them (read here when ``None``).
    Without the lock, a disagreement is looked at again (re-reading run.json and the
    trajectory) before it is believed, since a submit may have been between two of its writes.
    """
    problems = record_problems(paths, state, locked=locked, data=data)
    tries = 1 if locked else _RETRIES
    for _ in range(tries - 1):
        if not problems:
            break
        time.sleep(_PAUSE_S)
        state = load_state(paths)
        problems = record_problems(paths, state, locked=locked)
    if problems:
        raise record_error(paths, problems)
    return state


def record_repairs(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each time ``avo recover`` repaired the record (its ``recovered`` records, in order): after
    which step, how many lines it set aside, after how many lines of avo's it found lines deleted
    (``gaps``), and what it changed (its notes). A same-user agent
    can edit or delete any record; a repair is how such an edit stays on the record, so every
    view of a run says there were some."""
    out = []
    for r in records:
        if r.get("kind") == RECOVERED:
            aside = [a for a in r.get("acknowledged") or [] if isinstance(a, dict)]
            gaps = [g for g in r.get("gaps") or [] if isinstance(g, dict)]
            out.append({"step": r.get("step"), "time": r.get("time"), "set_aside": len(aside), "gaps": len(gaps),
                        "notes": [str(n) for n in r.get("notes") or []]})
    return out


def describe_flags(paths: RunPaths) -> list[str]:
    """The trajectory lines ``avo recover`` set aside, for ``avo log`` to name."""
    if not paths.trajectory.exists():
        return []
    out = []
    for r in read_trajectory(paths, mentioning=f'"{RECOVERED}"'.encode()):
        if r.get("kind") == RECOVERED:
            out += [f"trajectory.jsonl line {a.get('line')} {a.get('problem')}; `avo recover` set it aside"
                    for a in r.get("acknowledged") or [] if isinstance(a, dict)]
    return out

"""The record check made incremental: a signed checkpoint of what was already verified.

The full check (:mod:`avo.record_check`) parses every trajectory line and reads every
version's commit, so its cost grows with the run. After a full check finds nothing wrong,
a command holding the run's lock writes ``.avo/checked.json``: how many trajectory lines
and bytes were verified, the SHA-256 of exactly those bytes, the hash of the last of them,
how many versions were verified and a digest of their fields, and what the verified lines
add up to (the accepted versions, the re-measurements, the supervisor's state, the run's
terms, the largest step). The next command hashes the same byte range again (C speed, no
parsing) and checks only what came after: the new trajectory lines link by link, the new
versions against avo's private backup. Anything it cannot vouch for (a digest that differs,
a checkpoint that is missing, unsigned or from another run, a line that does not link, a
``recovered`` record, a submit in flight) sends the command to the full check, which names
the difference. So the incremental check only ever says "nothing changed"; every message
comes from the full check.

The checkpoint is signed (HMAC-SHA256) with the run's key (:mod:`avo.run_key`), written by
avo at the first checkpoint (mode 0600), so a checkpoint forged or edited by hand, or one
copied from another run, is ignored. Why that holds against an agent, and where it stops,
is in docs/SECURITY.md ("The incremental check"). Read-only commands never write it.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from avo.chain import RECOVERED, acknowledged, line_hash, parse, split_lines
from avo.regular_files import write_json_atomic
from avo.run_key import LineSignatures, first_line, read_verified, says_signed, signed
from avo.state import RunPaths, RunState, Version
from avo.terms_compare import terms_differences

FORMAT = 2  # 2: the fold keeps the steps whose confirmation it counted
_FIELDS = {"__all__": {"n", "sha", "tree", "scalar", "metrics", "message", "step", "time"}}


def checkpoint_path(paths: RunPaths) -> Path:
    return paths.private / "checked.json"


@functools.cache
def _versions_adapter() -> Any:
    from pydantic import TypeAdapter

    return TypeAdapter(list[Version])


def versions_digest(versions: list[Version]) -> str:
    """SHA-256 over the fields of ``versions`` that the check compares (identity, score, scores line)."""
    return hashlib.sha256(_versions_adapter().dump_json(versions, include=_FIELDS)).hexdigest()


@dataclass
class Fold:
    """What the verified trajectory lines add up to, for the checks that look at all of them."""

    accepted: set[int] = field(default_factory=set)
    excused: set[int] = field(default_factory=set)
    max_step: int = 0
    remeasured: dict[int, list[float]] = field(default_factory=dict)
    due: tuple[int, str] | None = None
    start_seen: bool = False
    start_terms: Any = None
    confirmed: set[int] = field(default_factory=set)  # the steps whose confirmation was counted

    @staticmethod
    def bears_counters(r: dict[str, Any]) -> bool:
        """Whether ``r`` moves what :meth:`counters` folds or makes a version count (its line
        must then be avo's): a confirmation, the supervisor's state, an accepted submit (the
        version it names) and a ``recovered`` record excusing versions. An unsigned accepted
        submit let an agent's version, pushed into the backup, pass every check."""
        kind = r.get("kind")
        if kind == "submit":
            return isinstance(r.get("confirm"), dict) or r.get("outcome") == "accepted"
        return kind in ("supervisor_due", "supervisor_record") or \
            (kind == RECOVERED and bool(r.get("unrecorded_versions")))

    @staticmethod
    def may_count(r: dict[str, Any], line: bytes, signatures: LineSignatures) -> bool:
        """Whether ``r`` (read from ``line``) may move the counters: it moves none, or avo signed it."""
        return not Fold.bears_counters(r) or signatures.counts(line)

    def counters(self, n: int, r: dict[str, Any]) -> None:
        """Re-measurements and the supervisor's due state (the full check folds them here too).

        Callers pass only records whose lines may steer the policy (:class:`avo.run_key.LineSignatures`).
        """
        if r.get("kind") == "submit" and isinstance(r.get("confirm"), dict) and isinstance(r.get("best_before"), int):
            step = r.get("step")
            if not isinstance(step, int) or step in self.confirmed:
                return  # a copy of a step's line counted already (replayed at the end): its draws were made once
            self.confirmed.add(step)
            self.remeasured.setdefault(r["best_before"], []).extend(r["confirm"].get("best") or [])
        elif r.get("kind") == "supervisor_due":
            self.due = (n, str(r.get("reason")))
        elif r.get("kind") == "supervisor_record":
            self.due = None

    def start(self, r: dict[str, Any]) -> None:
        if r.get("kind") == "start" and not self.start_seen:
            self.start_seen, self.start_terms = True, r.get("terms")

    def to_json(self) -> dict[str, Any]:
        return {"accepted": sorted(self.accepted), "excused": sorted(self.excused), "max_step": self.max_step,
                "remeasured": {str(k): v for k, v in sorted(self.remeasured.items())},
                "due": list(self.due) if self.due else None, "start_seen": self.start_seen,
                "start_terms": self.start_terms, "confirmed": sorted(self.confirmed)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Fold:
        due = d.get("due")
        return cls(set(d["accepted"]), set(d["excused"]), int(d["max_step"]),
                   {int(k): list(v) for k, v in d["remeasured"].items()},
                   (int(due[0]), str(due[1])) if due else None, bool(d["start_seen"]), d.get("start_terms"),
                   {int(x) for x in d["confirmed"]})


@dataclass
class Checkpoint:
    """A verified prefix: ``lines`` trajectory lines (``offset`` bytes) and ``versions`` versions."""

    run: str
    lines: int
    offset: int
    digest: str  # SHA-256 of the trajectory's first ``offset`` bytes
    last: str  # line_hash of line ``lines``: the next line must chain to it
    versions: int
    versions_digest: str
    fold: Fold
    previous: dict[str, Any] | None = None  # the body it extends (unchanged: nothing to write)

    def body(self) -> dict[str, Any]:
        return {"format": FORMAT, "run": self.run, "lines": self.lines, "offset": self.offset, "digest": self.digest,
                "last": self.last, "versions": self.versions, "versions_digest": self.versions_digest,
                "fold": self.fold.to_json()}


def load_checkpoint(paths: RunPaths, state: RunState) -> Checkpoint | None:
    """The run's checkpoint if avo signed it for this run; ``None`` otherwise (never an error)."""
    try:
        body = read_verified(paths, checkpoint_path(paths))
        if body is None or body.get("format") != FORMAT or body.get("run") != state.id:
            return None
        return Checkpoint(body["run"], int(body["lines"]), int(body["offset"]), str(body["digest"]),
                          str(body["last"]), int(body["versions"]), str(body["versions_digest"]),
                          Fold.from_json(body["fold"]))
    except (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError):
        return None


def save_checkpoint(paths: RunPaths, cp: Checkpoint) -> None:
    """Sign and write ``cp`` (callers hold the run's lock; read-only commands never call this)."""
    # Not synced: a checkpoint lost or torn by a power cut is not signed, so the full check runs.
    write_json_atomic(checkpoint_path(paths), signed(paths, cp.body()), sync="none")


def fresh_checkpoint(state: RunState, data: bytes, records: list[dict[str, Any] | None],
                     lines: list[bytes], flagged: set[int], signatures: LineSignatures) -> Checkpoint | None:
    """A checkpoint of what a full check just found in agreement (``None`` where it cannot say).

    ``data``, ``records``, ``lines``: the trajectory's bytes as that check read and parsed them;
    ``flagged``: lines set aside by ``avo recover``. Covers lines up to run.json's chain head.
    """
    head = state.chain
    if head is None or head.count != len(lines) or head.count == 0:
        return None
    fold = Fold()
    aside = acknowledged(records, lines, signatures.counts)
    versions = state.versions
    for n, r in enumerate(records, 1):
        if r is None or n in flagged:
            continue
        if r.get("kind") == RECOVERED:
            fold.excused.update(x for x in r.get("unrecorded_versions") or [] if isinstance(x, int))
        if n not in aside:
            fold.start(r)
        if Fold.may_count(r, lines[n - 1], signatures):
            fold.counters(n, r)
        if r.get("kind") != "submit":
            continue
        if isinstance(r.get("step"), int) and signatures.counts(lines[n - 1]):
            fold.max_step = max(fold.max_step, r["step"])
        k = r.get("version")
        if r.get("outcome") == "accepted" and isinstance(k, int) and 1 <= k < len(versions):
            fold.accepted.add(k)
    offset = sum(len(line) + 1 for line in lines)
    return Checkpoint(state.id, len(lines), offset, hashlib.sha256(memoryview(data)[:offset]).hexdigest(),
                      line_hash(lines[-1]), len(versions), versions_digest(versions), fold)


def _new_versions_agree(paths: RunPaths, state: RunState, cp: Checkpoint, locked: bool) -> bool:
    """The versions added since ``cp`` against avo's private backup, as the full check does it."""
    from avo.lineage import BRANCH, META_DIR, _parse_commit, blob_id, read_any, ref_of
    from avo.record_format import parse_trailers, scores_line

    backup, versions = paths.backup, state.versions
    if not (backup / "HEAD").exists():
        return False
    new = versions[cp.versions:]
    anchor = versions[cp.versions - 1]
    if not new:
        got = read_any(backup, anchor.sha)
        if got is None or got[1] != "commit":
            return False
    else:
        # Walk back from the newest version to the last one checked: each commit is the one
        # run.json names, with its tree and trailers, and the walk lands exactly on the anchor.
        spec = new[-1].sha
        for v in reversed(new):
            got = read_any(backup, spec)
            if got is None or got[1] != "commit" or got[0] != v.sha:
                return False
            c = _parse_commit(got[0], got[2])
            t = parse_trailers(c.message)
            if c.tree != v.tree or not t.scalar_matches(v.scalar) or not t.metrics_match(v.metrics):
                return False
            if not c.parents:
                return False
            spec = c.parents[0]
        if spec != anchor.sha:
            return False
        # Each new version's scores file is the anchor's (verified with the prefix) plus one
        # line per version since, exactly.
        base = read_any(backup, f"{anchor.sha}:{META_DIR}/scores.jsonl")
        if base is None or base[1] != "blob":
            return False
        content = base[2]
        for v in new:
            content += scores_line(v).encode()
            got = read_any(backup, f"{v.sha}:{META_DIR}/scores.jsonl")
            if got is None or got[0] != blob_id(content):
                return False
    return not locked or ref_of(backup, f"refs/heads/{BRANCH}") == versions[-1].sha


def quick_check(paths: RunPaths, state: RunState, data: bytes, *, locked: bool) -> Checkpoint | None:
    """The checkpoint extended to the whole record (``data``: the trajectory's bytes), if
    everything after it agrees; else ``None``.

    ``None`` means only "not vouched for here": the caller runs the full check.
    """
    from avo.record_format import terms, terms_digest

    if paths.journal.exists() or state.chain is None:
        return None  # a submit in flight (or a run from before the chain): the full check's allowances
    cp = load_checkpoint(paths, state)
    versions = state.versions
    if cp is None or not 1 <= cp.versions <= len(versions) or state.best != len(versions) - 1:
        return None
    if versions_digest(versions[:cp.versions]) != cp.versions_digest:
        return None
    if len(data) < cp.offset:
        return None
    running = hashlib.sha256(memoryview(data)[:cp.offset])
    if running.hexdigest() != cp.digest:
        return None
    tail, torn = split_lines(data[cp.offset:])
    head = state.chain
    if head.count != cp.lines + len(tail) or (tail and line_hash(tail[-1]) != head.sha) or (
            not tail and head.sha != cp.last):
        return None
    fold = Fold(set(cp.fold.accepted), set(cp.fold.excused), cp.fold.max_step,
                {k: list(v) for k, v in cp.fold.remeasured.items()}, cp.fold.due, cp.fold.start_seen,
                cp.fold.start_terms, set(cp.fold.confirmed))
    prev = cp.last
    # The start record is in the verified prefix (avo writes it first): its terms are the fold's.
    signatures = LineSignatures(paths, first_line(data), says_signed(fold.start_terms))
    for i, line in enumerate(tail):
        n = cp.lines + i + 1
        r = parse(line)
        if r is None or r.get("prev") != prev or r.get("kind") == RECOVERED:
            return None
        prev = line_hash(line)
        if r.get("kind") == "eval" and r.get("id") == "seed" and r.get("scalar") != versions[0].scalar:
            return None
        if not Fold.may_count(r, line, signatures):
            return None  # a line avo did not sign claims counters: the full check names it
        fold.start(r)
        fold.counters(n, r)
        if r.get("kind") != "submit":
            continue
        if isinstance(r.get("step"), int) and signatures.counts(line):
            fold.max_step = max(fold.max_step, r["step"])
        k = r.get("version")
        if r.get("outcome") != "accepted":
            continue
        if not isinstance(k, int) or not 1 <= k < len(versions):
            return None
        v = versions[k]
        if any(r.get(key) != getattr(v, key) for key in ("scalar", "step", "message")):
            return None
        fold.accepted.add(k)
    if any(v.n not in fold.accepted and v.n not in fold.excused for v in versions[1:]):
        return None
    if state.steps < fold.max_step:
        return None
    if {k: v for k, v in state.remeasured.items() if v} != {k: v for k, v in fold.remeasured.items() if v}:
        return None
    if fold.due is not None and not state.supervisor.due:
        return None
    if not _terms_agree(paths, state, fold, terms, terms_digest):
        return None
    if not _new_versions_agree(paths, state, cp, locked):
        return None
    end = len(data) - len(torn)
    running.update(memoryview(data)[cp.offset:end])
    digest = cp.versions_digest if len(versions) == cp.versions else versions_digest(versions)
    return Checkpoint(state.id, head.count, end, running.hexdigest(), head.sha, len(versions), digest, fold,
                      previous=cp.body())


def _terms_agree(paths: RunPaths, state: RunState, fold: Fold, terms: Any, terms_digest: Any) -> bool:
    from avo.lineage import commit_message
    from avo.record_format import parse_trailers

    if not (paths.backup / "HEAD").exists():  # no backup to read: the full check names it
        return False
    message = commit_message(paths.backup, state.versions[0].sha)
    if message is None:  # v0's commit cannot be read (or does not hash to its id): the full check says why
        return False
    pinned = parse_trailers(message).terms
    if pinned is None:
        return True
    recorded = fold.start_terms
    if not isinstance(recorded, dict) or terms_digest(recorded) != pinned:
        return False
    return not terms_differences(recorded, terms(state))

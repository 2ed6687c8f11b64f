"""Migration between islands, through the commit policy and never around it.

Every ``every`` steps of an island (:class:`avo.colony.MigrationPolicy`) the step is a
migration: the donor's best version (its ring neighbour's, or the best other island's) is
exported from the donor's private backup and submitted to the receiving island with
:func:`avo.engine.submit`. So it is evaluated by the receiving island's evaluator with a
fresh secret, committed only if it matches or beats that island's best (with trailers
naming its origin), archived in rejected/ when it loses, and journaled and backed up like
any candidate. A donor version is offered to an island once; an offer that evaluates
nothing (the same files, a donor that cannot be read) is recorded as skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from avo.colony import ColonyState, Migrant, MigrantOrigin, append_event, colony_of, load_colony
from avo.contract import better
from avo.engine import Run, SubmitOutcome, open_run, submit
from avo.errors import AvoError, BlockedError
from avo.evolve import STEP_KINDS
from avo.lineage import CandidateError
from avo.state import append_trajectory, read_trajectory, run_lock

SKIPPED = "migration_skipped"


@dataclass
class Offer:
    """What one migration did (``outcome`` skipped: nothing was evaluated)."""

    receiver: str
    donor: str | None
    outcome: str  # accepted | rejected | failed | skipped
    reason: str
    origin: MigrantOrigin | None = None
    submitted: SubmitOutcome | None = None


def steps_since_offer(records: list[dict[str, Any]]) -> int:
    """An island's steps since its last migrant offer (evaluated or skipped), or since its start."""
    n = 0
    for r in reversed(records):
        if r.get("kind") == SKIPPED or (r.get("kind") == "submit" and r.get("migrant")):
            return n
        if r.get("kind") in STEP_KINDS:
            n += 1
    return n


def is_due(colony: ColonyState, records: list[dict[str, Any]]) -> bool:
    """Whether this island's next step is a migration."""
    return colony.migration.topology != "none" and steps_since_offer(records) >= colony.migration.every


def donor_names(colony: ColonyState, receiver: str) -> list[str]:
    """Candidates to give to ``receiver``: ring: the island before it; best: every other island."""
    names = colony.names()
    if receiver not in names or colony.migration.topology == "none":
        return []
    if colony.migration.topology == "ring":
        return [names[names.index(receiver) - 1]]
    return [n for n in names if n != receiver]


def offered(records: list[dict[str, Any]], donor: str, version: int) -> bool:
    """Whether ``donor``'s ``version`` was decided here (an offer interrupted before its decision was not)."""
    return any(r.get("kind") == "submit" and isinstance(r.get("migrant"), dict) and r.get("outcome") != "interrupted"
               and r["migrant"].get("island") == donor and r["migrant"].get("version") == version for r in records)


def _pick_donor(colony_dir: Path, colony: ColonyState, run: Run) -> tuple[Run | None, str | None, str]:
    """The donor run (its best is the migrant), or None and why not."""
    direction = run.state.target.direction
    best: Run | None = None
    problems = []
    for name in donor_names(colony, run.paths.root.name):
        inside = _outside_colony(colony_dir, name)
        if inside:
            problems.append(f"{name} cannot be read ({inside})")
            continue
        try:
            donor = open_run(colony_dir / name, colony_dir)  # checked against its backup, read-only
        except AvoError as exc:
            # A record error's first line says it disagrees; the second, how (its first problem).
            lines = [line.strip().removeprefix("- ") for line in str(exc).splitlines()[:2]]
            problems.append(f"{name} cannot be read ({' '.join(lines)})")
            continue
        if best is None or better(donor.state.best_version.scalar, best.state.best_version.scalar, direction):
            best = donor
    if best is None:
        return None, None, "; ".join(problems) or "no donor island"
    return best, best.paths.root.name, ""


def _outside_colony(colony_dir: Path, name: str) -> str:
    """Why the island folder ``name`` (or its private backup, where the migrant is read) is not
    this colony's own, else "": a symlink there would make a migrant's trailers name this
    colony's island for a version that island never had."""
    own = colony_dir.resolve() / name
    for path in (own, own / ".avo", own / ".avo" / "lineage.git"):
        if os.path.islink(path):
            return f"{path.relative_to(colony_dir.resolve())} is a symlink"
    if Path(os.path.realpath(own / ".avo" / "lineage.git")) != own / ".avo" / "lineage.git":
        return "its backup lies outside the colony"
    return ""


def _skip(run: Run, colony_dir: Path, donor: str | None, reason: str, version: int | None = None) -> Offer:
    with run_lock(run.paths):
        append_trajectory(run.paths, {"kind": SKIPPED, "step": run.state.steps + 1, "donor": donor,
                                      "donor_version": version, "reason": reason})
    append_event(colony_dir, {"kind": "migration", "receiver": run.paths.root.name, "donor": donor,
                              "donor_version": version, "outcome": "skipped", "reason": reason})
    return Offer(run.paths.root.name, donor, "skipped", reason)


def offer(run: Run, *, progress: Callable[[str], None] | None = None) -> Offer | None:
    """Offer ``run`` (an island) a migrant now; None when the run is not an island.

    :raises BlockedError: the island cannot step (budget spent, supervisor due).
    """
    colony_dir = colony_of(run.paths)
    if colony_dir is None:
        return None
    receiver = run.paths.root.name
    try:
        colony = load_colony(colony_dir)
    except AvoError as exc:  # an agent may write colony.json: this island goes on, offered nothing
        return _skip(run, colony_dir, None, str(exc).splitlines()[0])
    run.state = open_run(run.paths.root, colony_dir).state
    donor, name, why = _pick_donor(colony_dir, colony, run)
    if donor is None:
        return _skip(run, colony_dir, name, why)
    v = donor.state.best_version
    if v.n == 0:  # every island starts from the target's seed: it is no news to anyone
        return _skip(run, colony_dir, name, f"{name} has no version beyond its seed yet", 0)
    if offered(read_trajectory(run.paths), name or "", v.n):
        return _skip(run, colony_dir, name, f"{name} v{v.n} was offered before", v.n)
    origin = MigrantOrigin(colony=colony.id, island=name or "", version=v.n, commit=v.sha, scalar=v.scalar)
    message = (f"migrant from {name} v{v.n} of colony {colony.id}\n\n"
               f"{name}'s v{v.n} scored {v.scalar!r} there: {v.message.strip()}")
    try:
        out = submit(run, message, progress=progress, migrant=Migrant(origin, donor.paths.backup),
                     extra={"backend": "migration", "status": "ok"})
    except BlockedError:
        raise
    except CandidateError as exc:  # a crafted tree (a forged donor record): nothing of it is written out
        return _skip(run, colony_dir, name, f"{name} v{v.n} cannot be taken: {str(exc).splitlines()[0]}", v.n)
    except AvoError as exc:
        if not str(exc).startswith("nothing to submit"):
            raise
        return _skip(run, colony_dir, name, f"{name} v{v.n} has the same files as {receiver}'s best", v.n)
    append_event(colony_dir, {"kind": "migration", "receiver": receiver, "donor": name, "donor_version": v.n,
                              "donor_scalar": v.scalar, "outcome": out.outcome, "step": out.step,
                              "scalar": out.evaluation.scalar, "version": out.version.n if out.version else None,
                              "reason": out.reason})
    return Offer(receiver, name, out.outcome, out.reason, origin, out)


def offer_if_due(run: Run, *, progress: Callable[[str], None] | None = None) -> Offer | None:
    """After a step of an island: the migrant it is due, if any (a spent budget: none)."""
    colony_dir = colony_of(run.paths)
    if colony_dir is None:
        return None
    try:
        colony: ColonyState | None = load_colony(colony_dir)
    except AvoError:
        colony = None  # offer() records why nothing arrives
    if colony is not None and not is_due(colony, read_trajectory(run.paths)):
        return None
    try:
        return offer(run, progress=progress)
    except BlockedError:
        return None


def arrivals(records: list[dict[str, Any]], limit: int = 3) -> list[dict[str, Any]]:
    """The migrant submits since this island's agent last stepped (newest last)."""
    out: list[dict[str, Any]] = []
    for r in reversed(records):
        if r.get("kind") == "submit" and r.get("migrant"):
            out.append(r)
        elif r.get("kind") in STEP_KINDS:
            break
    return list(reversed(out))[-limit:]


def offer_line(done: Offer, run: Run) -> str:
    """One line saying what a migration did, for the agent whose submit it followed."""
    from avo.numbers import fmt_number

    best = run.state.best_version
    if done.outcome == "skipped":
        return f"migration: nothing arrived ({done.reason})"
    assert done.origin is not None and done.submitted is not None
    score = fmt_number(done.submitted.evaluation.scalar) if done.submitted.evaluation.scalar is not None else "no score"
    if done.outcome == "accepted":
        verdict = f"ACCEPTED as v{best.n}; work/ now holds it"
    else:
        verdict = f"{done.outcome.upper()} ({done.reason}); work/ is back at v{best.n}"
    return (f"migration (step {done.submitted.step}): {done.origin.describe()} arrived, scored {score} here: "
            f"{verdict}. `avo prompt` says more.")

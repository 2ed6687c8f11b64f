"""A colony: several ordinary runs (islands) of one target under one folder, and its record.

Layout (``runs/<colony-id>/``)::

    colony.json     members, migration policy, per-island settings (written once, at the start)
    events.jsonl    what the colony did: migrations offered, accepted, rejected, skipped
    island-1/       an ordinary, complete avo run (run.json, work/, trajectory, kb/, ...)
    island-2/ ...

Every island is opened, checked and changed by the engine exactly like any run; the colony
adds only who its neighbours are and when a migrant is offered (:mod:`avo.migration`).
What is authoritative about a migrant is the receiving island's own record (its submit
record and commit trailers); ``events.jsonl`` is the colony's index of them.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from avo.errors import AvoError
from avo.regular_files import write_json_atomic
from avo.state import RunPaths

COLONY_FILE = "colony.json"
EVENTS_FILE = "events.jsonl"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: A colony id or island name: one path component, one line. colony.json is a file any
#: island's agent can write; its names become folder names and migrant commit trailers.
Name = Annotated[str, Field(pattern=NAME.pattern, max_length=200)]
#: A migrant every 3 steps of an island: often enough that a lead spreads within a few
#: rounds of a short run, rare enough that most steps stay the island's own agent's (two
#: agent steps per migrant), so the islands keep diverging (OpenEvolve's default interval
#: is larger, but its steps are far cheaper than an agent step).
DEFAULT_EVERY = 3
TOPOLOGIES = ("ring", "best", "none")


class MigrationPolicy(BaseModel):
    """When and from whom an island is offered a migrant."""

    model_config = ConfigDict(extra="forbid")

    topology: Literal["ring", "best", "none"] = "ring"
    every: int = Field(DEFAULT_EVERY, ge=1, description="An island's steps between two migrant offers")

    def describe(self) -> str:
        if self.topology == "none":
            return "no migration"
        src = "its ring neighbour's best" if self.topology == "ring" else "the best of the other islands"
        return f"every {self.every} steps an island is offered {src}"


class IslandSpec(BaseModel):
    """One member: its folder name and what drives it unattended (None: the colony's)."""

    model_config = ConfigDict(extra="forbid")

    name: Name
    backend: str | None = None
    model: str | None = None
    seed: int | None = None
    options: dict[str, str] = Field(default_factory=dict)


class ColonyState(BaseModel):
    """``colony.json``."""

    model_config = ConfigDict(extra="ignore")

    id: Name
    created: float
    target: str
    islands: list[IslandSpec]
    migration: MigrationPolicy = Field(default_factory=MigrationPolicy)
    #: how each island is started (start_run's arguments), so a resume can start a missing one
    start: dict[str, Any] = Field(default_factory=dict)

    @field_validator("islands")
    @classmethod
    def _distinct(cls, islands: list[IslandSpec]) -> list[IslandSpec]:
        names = [i.name for i in islands]
        if len(set(names)) != len(names):
            raise ValueError(f"island names repeat: {names}")
        return islands

    def names(self) -> list[str]:
        return [i.name for i in self.islands]


class MigrantOrigin(BaseModel):
    """Where a migrant came from: colony, island, version and its commit there."""

    model_config = ConfigDict(extra="forbid")

    colony: Name
    island: Name
    version: int
    commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    scalar: float

    def describe(self) -> str:
        return f"{self.colony}/{self.island} v{self.version}"

    def trailers(self) -> str:
        """Trailer lines after avo's own (every value is a checked single-line name or a number)."""
        return (f"avo-migrant-colony: {self.colony}\navo-migrant-island: {self.island}\n"
                f"avo-migrant-version: v{self.version}\navo-migrant-commit: {self.commit}\n")


@dataclass
class Migrant:
    """A migrant ready to be submitted: its origin, and the donor's private backup, from which
    the submit copies the version's tree into the receiving lineage."""

    origin: MigrantOrigin
    source: Path


def is_colony(folder: Path) -> bool:
    return (folder / COLONY_FILE).is_file()


def colony_of(paths: RunPaths) -> Path | None:
    """The colony folder an island belongs to (None for a run on its own)."""
    parent = paths.root.parent
    return parent if is_colony(parent) else None


def resolve_colony(ref: str | Path | None, runs_root: Path) -> Path | None:
    """The colony ``ref`` names (an id under ``runs_root`` or a path), else None."""
    if ref is None:
        return None
    path = Path(ref)
    for candidate in (path, runs_root / path):
        if is_colony(candidate):
            return candidate.resolve()
    return None


def load_colony(folder: Path) -> ColonyState:
    try:
        return ColonyState.model_validate_json((folder / COLONY_FILE).read_bytes())
    except FileNotFoundError:
        raise AvoError(f"{folder} is not a colony (no {COLONY_FILE})") from None
    except ValidationError as exc:
        why = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise AvoError(f"{folder / COLONY_FILE} is unreadable: {why}") from None
    except ValueError as exc:
        raise AvoError(f"{folder / COLONY_FILE} is unreadable: {exc}") from None


def save_colony(folder: Path, state: ColonyState) -> None:
    write_json_atomic(folder / COLONY_FILE, state.model_dump_json(indent=1))


def island_paths(folder: Path, state: ColonyState | None = None) -> list[RunPaths]:
    """The islands that exist (a start killed half-way may have created only some)."""
    state = state or load_colony(folder)
    return [RunPaths((folder / n).resolve()) for n in state.names() if (folder / n / "run.json").is_file()]


def append_event(folder: Path, record: dict[str, Any]) -> None:
    """Append one event (flushed, synced; a lock keeps concurrent islands' lines whole)."""
    line = json.dumps({"time": round(time.time(), 3), **record}, default=str) + "\n"
    from avo.regular_files import open_own

    # Neither file through a link an agent put there (into its run's .avo/, say); one found
    # linked is taken back rather than failing the colony after a migrant was committed.
    lock = folder / ".events.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        _take_back(lock)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            events = open_own(folder / EVENTS_FILE, append=True)
        except (AvoError, OSError):
            _take_back(folder / EVENTS_FILE)
            events = open_own(folder / EVENTS_FILE, append=True)
        with os.fdopen(events, "a", encoding="utf-8") as fh:
            fh.write(line)
            fh.flush()
            os.fsync(fh.fileno())
    finally:
        os.close(fd)


def _take_back(path: Path) -> None:
    """Make ``path`` a file of the colony's own again: a link (or a pipe) is set aside; a file
    with a second name (a hard link the agent made) is copied into a file of its own."""
    from avo.regular_files import open_regular, set_aside, write_json_atomic

    if path.is_symlink() or (path.exists() and not path.is_file()):
        set_aside(path)
        return
    with os.fdopen(open_regular(path, follow_links=False, why="taken back"), "rb") as fh:
        write_json_atomic(path, fh.read(), sync="file")


def read_events(folder: Path) -> list[dict[str, Any]]:
    path = folder / EVENTS_FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a torn last line of a kill mid-write
    return out


def new_colony_id(target: str, runs_root: Path) -> str:
    base = f"{target}-colony-{time.strftime('%Y%m%d-%H%M%S')}"
    colony_id, n = base, 1
    while (runs_root / colony_id).exists():
        n += 1
        colony_id = f"{base}-{n}"
    return colony_id


def parse_island_options(pairs: list[str] | None, count: int) -> dict[str, dict[str, str]]:
    """``--island-option island-2:model=X`` (or ``2:seed=7``) as ``{island: {key: value}}``."""
    out: dict[str, dict[str, str]] = {}
    for pair in pairs or []:
        who, sep, kv = pair.partition(":")
        key, sep2, value = kv.partition("=")
        if not sep or not sep2 or not key.strip():
            raise AvoError(f"--island-option expects ISLAND:KEY=VALUE (e.g. island-2:model=NAME), got {pair!r}")
        name = f"island-{who}" if who.isdigit() else who
        if name not in {f"island-{k}" for k in range(1, count + 1)}:
            raise AvoError(f"--island-option {pair!r}: no island {name!r} (the colony has island-1..island-{count})")
        out.setdefault(name, {})[key.strip()] = value
    return out


def island_specs(count: int, per_island: dict[str, dict[str, str]]) -> list[IslandSpec]:
    """The members; ``backend``, ``model`` and ``seed`` keys are settings, the rest backend options."""
    specs = []
    for k in range(1, count + 1):
        opts = dict(per_island.get(f"island-{k}", {}))
        seed = opts.pop("seed", None)
        try:
            seed_n = int(seed) if seed is not None else None
        except ValueError:
            raise AvoError(f"--island-option island-{k}:seed={seed}: the seed must be an integer") from None
        specs.append(IslandSpec(name=f"island-{k}", backend=opts.pop("backend", None),
                                model=opts.pop("model", None), seed=seed_n, options=opts))
    return specs


def create_colony(target: str, runs_root: Path, islands: list[IslandSpec], policy: MigrationPolicy,
                  start: dict[str, Any]) -> Path:
    """Write the colony folder and its record (the islands are started by the caller)."""
    if len(islands) < 2:
        raise AvoError(f"a colony needs at least 2 islands, got {len(islands)}")
    runs_root.mkdir(parents=True, exist_ok=True)
    folder = runs_root / new_colony_id(target, runs_root)
    folder.mkdir()
    state = ColonyState(id=folder.name, created=time.time(), target=target, islands=islands, migration=policy,
                        start=start)
    save_colony(folder, state)
    append_event(folder, {"kind": "colony_start", "islands": state.names(), "migration": policy.model_dump()})
    return folder.resolve()

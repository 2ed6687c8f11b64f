"""A run on disk: paths, ``run.json`` (atomic), ``trajectory.jsonl`` (append-only), the lock.

What avo believes about the lineage lives here, outside ``work/``, so nothing an agent does
inside the work tree can change the record.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from avo.errors import AvoError, BlockedError
from avo.models import NoiseSpec, TargetSpec

RUNS_ENV = "AVO_RUNS_DIR"


class Version(BaseModel):
    """One accepted version ``vN`` of the lineage."""

    n: int
    sha: str
    tree: str
    scalar: float
    metrics: dict[str, float]
    message: str
    step: int
    time: float
    notes: str | None = None
    spread: dict[str, float] | None = None
    new_best: bool = False


class Baseline(BaseModel):
    """A reference policy or kernel measured once when the run started."""

    name: str
    correct: bool
    scalar: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    error: str | None = None


class RunOptions(BaseModel):
    """Options fixed when a run starts (some may be changed later by a resume)."""

    max_steps: int | None = None
    stall_limit: int = 3
    failure_limit: int = 3
    quick: bool = False
    noise: NoiseSpec = Field(default_factory=NoiseSpec)
    sandbox: str = "auto"  # what was asked for: auto, bwrap or none
    executor: str = "local"  # where evaluations run (avo.executors); runs before executors: local
    executor_options: dict[str, str] = Field(default_factory=dict)


class SupervisorState(BaseModel):
    due: bool = False
    reason: str | None = None
    briefs: int = 0
    pending_redirect: str | None = None
    redirect_step: int | None = None  # the step whose prompts carry the redirect


class RunState(BaseModel):
    """``run.json``: spec, options, and what avo believes about the lineage."""

    model_config = ConfigDict(extra="ignore")

    id: str
    created: float
    avo_version: str
    target: TargetSpec
    options: RunOptions
    hashes: dict[str, dict[str, str]] = Field(default_factory=dict)
    configs: list[str] = Field(default_factory=list)
    versions: list[Version] = Field(default_factory=list)
    best: int = 0
    baselines: list[Baseline] = Field(default_factory=list)
    steps: int = 0
    steps_since_best: int = 0
    failures_in_row: int = 0
    evaluations: int = 0
    rejected_fingerprints: dict[str, int] = Field(default_factory=dict)
    # Re-measurements of accepted versions (noise confirmations): {version: [scalars]}.
    remeasured: dict[int, list[float]] = Field(default_factory=dict)
    supervisor: SupervisorState = Field(default_factory=SupervisorState)
    origin: str | None = None
    usage: dict[str, float] = Field(default_factory=dict)
    # The isolation every evaluation of this run gets (avo.sandbox): bwrap or none. Runs
    # recorded before the sandbox existed had none.
    sandbox: str = "none"
    # Mixed with each candidate's digest into inputs it cannot know in advance (avo.eval_inputs).
    eval_secret: str | None = None

    @property
    def best_version(self) -> Version:
        return self.versions[self.best]

    @property
    def seed_version(self) -> Version:
        return self.versions[0]

    def steps_left(self) -> int | None:
        if self.options.max_steps is None:
            return None
        return max(0, self.options.max_steps - self.steps)


@dataclass(frozen=True)
class RunPaths:
    """Where each piece of a run lives (DESIGN §5)."""

    root: Path

    @property
    def run_json(self) -> Path:
        return self.root / "run.json"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def kb(self) -> Path:
        return self.root / "kb"

    @property
    def avo_eval(self) -> Path:
        return self.root / "avo-eval"

    @property
    def notes(self) -> Path:
        return self.root / "NOTES.md"

    @property
    def trajectory(self) -> Path:
        return self.root / "trajectory.jsonl"

    @property
    def rejected(self) -> Path:
        return self.root / "rejected"

    @property
    def supervisor(self) -> Path:
        return self.root / "supervisor"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def private(self) -> Path:
        """avo's scratch space (private git index, evaluation snapshots, journal)."""
        return self.root / ".avo"

    @property
    def backup(self) -> Path:
        """A bare copy of the lineage outside work/, so a deleted work/.git can be restored."""
        return self.private / "lineage.git"

    @property
    def journal(self) -> Path:
        return self.private / "pending.json"

    @property
    def lock(self) -> Path:
        return self.private / "lock"


def runs_dir(explicit: Path | None = None) -> Path:
    """``--runs-dir``, else ``$AVO_RUNS_DIR``, else ``./runs``."""
    if explicit is not None:
        return explicit
    env = os.environ.get(RUNS_ENV)
    return Path(env) if env else Path("runs")


def list_runs(root: Path) -> list[RunPaths]:
    """Every run under ``root``, oldest first (by the start time in the run id)."""
    if not root.is_dir():
        return []
    runs = [RunPaths(p.resolve()) for p in root.iterdir()
            if not p.name.startswith(".") and (p / "run.json").is_file()]
    return sorted(runs, key=lambda r: (_id_time(r.root.name), r.root.name))


def _id_time(name: str) -> str:
    """The ``YYYYMMDD-HHMMSS`` stamp inside a run id (``target-YYYYMMDD-HHMMSS[-n]``)."""
    parts = name.split("-")
    for i in range(len(parts) - 1):
        if len(parts[i]) == 8 and parts[i].isdigit() and len(parts[i + 1]) == 6 and parts[i + 1].isdigit():
            return f"{parts[i]}-{parts[i + 1]}-{'-'.join(parts[i + 2:]).zfill(4)}"
    return ""


def resolve_run(ref: str | Path | None, root: Path) -> RunPaths:
    """A run by id or path; the newest under ``root`` when ``ref`` is ``None``."""
    if ref is None:
        runs = list_runs(root)
        if not runs:
            raise AvoError(f"no runs under {root.resolve()}; start one with `avo start --target NAME`")
        return runs[-1]
    path = Path(ref)
    for candidate in (path, root / path):
        if (candidate / "run.json").is_file():
            return RunPaths(candidate.resolve())
    raise AvoError(f"no run {str(ref)!r} (looked for {path}/run.json and {root / path}/run.json)")


def _record_problem(state: RunState) -> str | None:
    """What is inconsistent in a loaded record (a hand edit, a truncation), if anything."""
    numbers = [v.n for v in state.versions]
    if not numbers:
        return "it lists no versions (a run always has v0)"
    if numbers != list(range(len(numbers))):
        return f"its versions must be v0..v{len(numbers) - 1} in order, got {numbers}"
    if not 0 <= state.best < len(numbers):
        return f"its best is v{state.best}, but it has only v0..v{len(numbers) - 1}"
    return None


def load_state(paths: RunPaths) -> RunState:
    try:
        state = RunState.model_validate_json(paths.run_json.read_bytes())
    except FileNotFoundError:
        raise AvoError(f"{paths.run_json} is missing; {paths.root} is not an avo run") from None
    except ValueError as exc:
        raise AvoError(f"{paths.run_json} is unreadable: {exc}") from None
    problem = _record_problem(state)
    if problem:
        raise AvoError(f"{paths.run_json} is corrupt: {problem}")
    return state


def write_json_atomic(path: Path, data: str) -> None:
    """Write-then-rename with fsync: a reader sees the old file or the new, never half."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def save_state(paths: RunPaths, state: RunState) -> None:
    write_json_atomic(paths.run_json, state.model_dump_json(indent=1))


def append_trajectory(paths: RunPaths, record: dict[str, Any]) -> None:
    """Append one record (flushed and synced): the trajectory survives every reset."""
    record = {"time": round(time.time(), 3), **record}
    line = json.dumps(record, sort_keys=False, default=str) + "\n"
    with open(paths.trajectory, "a", encoding="utf-8") as fh:
        fh.write(line)
        fh.flush()
        os.fsync(fh.fileno())


def read_trajectory(paths: RunPaths) -> list[dict[str, Any]]:
    """Every trajectory record; a torn last line (a kill mid-write) is skipped."""
    if not paths.trajectory.exists():
        return []
    out = []
    for line in paths.trajectory.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


@contextmanager
def run_lock(paths: RunPaths, wait: bool = True) -> Iterator[None]:
    """Exclusive lock so two submits (or a submit and a revert) never interleave."""
    paths.private.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if not wait:
                raise BlockedError(
                    f"another avo command is working on {paths.root.name}; try again when it ends"
                ) from None
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


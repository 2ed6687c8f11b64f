"""A run on disk: paths, ``run.json`` (atomic), ``trajectory.jsonl`` (append-only), the lock.

What avo believes about the lineage lives here, outside ``work/``, so nothing an agent does
inside the work tree can change the record. The trajectory is a hash chain whose head
``run.json`` keeps (:mod:`avo.chain`), so an edit of either is found.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_core import from_json, to_json

from avo.chain import ChainHead, acknowledged, follows, line_hash, link_after, parse, split_lines
from avo.errors import AvoError, BlockedError, validation_summary
from avo.models import NoiseSpec, TargetSpec
from avo.regular_files import NotRegularFile, open_own, open_regular, write_json_atomic

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
    # The secret its accepted evaluation drew inputs with, so `avo verify` replays them.
    secret: str | None = None


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
    # Every trajectory line of this run is signed (avo.run_key): set at the start of every run
    # since signing and pinned with the terms by v0's commit, so deleting the key and stripping
    # the signatures does not make the run look like an older one, whose lines all count.
    signed_lines: bool = False


class SupervisorState(BaseModel):
    due: bool = False
    reason: str | None = None
    briefs: int = 0
    pending_redirect: str | None = None
    redirect_step: int | None = None  # the step whose prompts carry the redirect
    stall_since: int = 0  # steps taken when the last redirect was recorded (its stall count starts there)


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
    # The trajectory's last line (its number and hash); written by append_trajectory only.
    chain: ChainHead | None = None

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
        if root.exists():  # "no runs" would hide a mistyped --runs-dir
            raise AvoError(f"the runs folder {root} is not a folder")
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
    for candidate in (path, root / path):
        if (candidate / "colony.json").is_file():
            raise AvoError(f"{str(ref)!r} is a colony, whose islands are runs: name one, --run {candidate}/island-1 "
                           "(`avo status --run COLONY` shows them all)")
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


def read_record_file(path: Path) -> bytes:
    """The bytes of ``run.json`` or ``trajectory.jsonl``; never read through a pipe or a device
    put in its place (a FIFO would be waited on forever, /dev/zero read forever).

    Raises FileNotFoundError if it is not there, AvoError if it is not a regular file."""
    fd = open_regular(path, why="avo would wait on it or read it forever; put the run's own file back")
    with os.fdopen(fd, "rb") as fh:
        return fh.read()


def trajectory_bytes(paths: RunPaths) -> bytes:
    """The whole trajectory as it is on disk (``b""`` before its first line)."""
    try:
        return read_record_file(paths.trajectory)
    except FileNotFoundError:
        return b""


def load_state(paths: RunPaths, *, validate: bool = True) -> RunState:
    """``run.json`` as a :class:`RunState`; ``validate=False`` skips the consistency check
    (``avo recover`` reads a record it is about to rebuild)."""
    return parse_state(paths, run_json_bytes(paths), validate=validate)


def run_json_bytes(paths: RunPaths) -> bytes:
    """``run.json``'s bytes (AvoError when it is missing or not a regular file)."""
    try:
        return read_record_file(paths.run_json)
    except FileNotFoundError:
        raise AvoError(f"{paths.run_json} is missing; {paths.root} is not an avo run") from None


def parse_state(paths: RunPaths, raw: bytes, *, validate: bool = True) -> RunState:
    """``raw`` (run.json's bytes) as a :class:`RunState`, as :func:`load_state` reads it."""
    try:
        state = RunState.model_validate_json(raw)
    except ValidationError as exc:
        raise AvoError(f"{paths.run_json} is unreadable: {validation_summary(exc)}") from None
    except ValueError as exc:
        raise AvoError(f"{paths.run_json} is unreadable: {exc}") from None
    return validated(paths, state) if validate else state


def validated(paths: RunPaths, state: RunState) -> RunState:
    """``state`` unless it is inconsistent in itself (AvoError naming how run.json is corrupt)."""
    problem = _record_problem(state)
    if problem:
        raise AvoError(f"{paths.run_json} is corrupt: {problem}")
    return state


# run.json is written with an indent of 1 and the chain head as its last key, so the head
# starts at the last newline followed by exactly this (a string holds no raw newline, and a
# nested key is indented further): it is read and moved without parsing the versions.
_CHAIN_KEY = b'\n "chain": '


def _chain_tail(raw: bytes) -> tuple[int, Any] | None:
    """Where run.json's chain head starts and its value, from the file's tail alone; ``None``
    if the tail is not exactly that (a hand-written file: then the whole file is parsed)."""
    at = raw.rfind(_CHAIN_KEY)
    if at < 0:
        return None
    try:
        tail = from_json(b"{" + raw[at + 1:])
    except ValueError:
        return None
    if not isinstance(tail, dict) or list(tail) != ["chain"]:
        return None
    return at, tail["chain"]


def _head_in(raw: bytes) -> ChainHead | None:
    found = _chain_tail(raw)
    try:
        value = found[1] if found else from_json(raw).get("chain")  # pydantic-core's parser: run.json is large
        return ChainHead.model_validate(value) if value else None
    except (ValueError, AttributeError):
        return None


def _disk_head(paths: RunPaths) -> ChainHead | None:
    try:
        return _head_in(read_record_file(paths.run_json))
    except OSError:
        return None


@contextmanager
def _record_lock(paths: RunPaths) -> Iterator[None]:
    """Held for the moment of one write of run.json or the trajectory.

    Some records are appended without the run's lock (``avo evolve`` notes between steps):
    this short lock keeps such an append from forking the chain or from writing back an
    older run.json over a submit's commit point.
    """
    paths.private.mkdir(parents=True, exist_ok=True)
    fd = os.open(paths.private / "record.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def save_state(paths: RunPaths, state: RunState) -> None:
    """Write ``run.json``; the chain head on disk is kept (only an append moves it)."""
    with _record_lock(paths):
        head = _disk_head(paths)
        if head is not None:
            state.chain = head
        write_json_atomic(paths.run_json, state.model_dump_json(indent=1))


def _set_head(paths: RunPaths, head: ChainHead, raw: bytes | None = None) -> None:
    """Move run.json's chain head; ``raw``: run.json as just read under the record lock."""
    if raw is None:
        try:
            raw = read_record_file(paths.run_json)
        except FileNotFoundError:
            return
    found = _chain_tail(raw)
    if found is not None:  # only the tail is rewritten: run.json holds every version
        out = raw[:found[0]] + to_json({"chain": head.model_dump()}, indent=1)[1:]
    else:
        data = from_json(raw)
        data["chain"] = head.model_dump()
        # pydantic-core's serializer: json.dumps with an indent is pure Python.
        out = to_json(data, indent=1)
    # The appended line is synced; if this rename is lost, the next command adopts the line.
    write_json_atomic(paths.run_json, out, sync="file")


@dataclass(frozen=True)
class _Complete:
    """The trajectory's complete lines, without splitting the file: how many, and the last."""

    data: bytes
    count: int
    end: int  # offset just past the last complete line

    def last(self) -> bytes:
        return self.data[self.data.rfind(b"\n", 0, self.end - 1) + 1:self.end - 1] if self.count else b""


def _set_aside_torn(paths: RunPaths, data: bytes) -> tuple[_Complete, str | None]:
    """The complete lines; a torn tail (a kill mid-write) is moved into avo's private folder."""
    end = data.rfind(b"\n") + 1
    done = _Complete(data, data.count(b"\n", 0, end), end)
    torn = data[end:]
    if not torn:
        return done, None
    fd = open_own(paths.trajectory, append=True)  # never cut a file a link leads to (.avo/checked.json, say)
    try:
        paths.private.mkdir(parents=True, exist_ok=True)
        aside = paths.private / f"torn-trajectory-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
        aside.write_bytes(torn)
        os.ftruncate(fd, len(data) - len(torn))
        os.fsync(fd)
    finally:
        os.close(fd)
    return done, f"a torn last line of trajectory.jsonl (a kill mid-write) was moved to {aside.name}"


_TAIL_CHUNK = 1 << 16


def _tail_chunk(path: Path, size: int) -> bytes | None:
    """The end of ``path`` from its last-but-one newline (its last line), if the file is a
    regular file ``size`` bytes long; ``None`` if it is not, or if it changes while read.

    Read backwards one chunk at a time, each byte once: a last line of 100 MB costs one read
    of it, and a file cut short under the reader ends the read instead of repeating it."""
    try:
        fd = open_regular(path)
    except NotRegularFile:
        return None
    try:
        if os.fstat(fd).st_size != size:
            return None
        parts: list[bytes] = []
        pos = size
        while pos > 0:
            start = max(0, pos - _TAIL_CHUNK)
            block = os.pread(fd, pos - start, start)
            if len(block) != pos - start:
                return None  # cut short meanwhile
            parts.append(block)
            # the last byte is the final newline, not the one before the last line
            nl = block.rfind(b"\n", 0, min(len(block), size - 1 - start))
            if nl >= 0:
                parts[-1] = block[nl + 1:]
                break
            pos = start
        return b"".join(reversed(parts))
    finally:
        os.close(fd)


def _tail_at_head(paths: RunPaths, head: ChainHead | None) -> tuple[int, bytes, int] | None:
    """``(count, last line, size)`` read from the end of the trajectory alone, when the file
    ends where the head says, with a complete line that hashes to the head's; ``None`` when
    the whole file must be read.

    An append or a heal then costs the same at 100,000 records as at 10. An edit further up
    that keeps the size and the last line is not seen here: the record check finds it before
    any command acts, and ``avo recover`` appends with ``whole=True``.
    """
    if head is None or head.count < 1 or head.end is None:
        return None
    try:
        chunk = _tail_chunk(paths.trajectory, head.end)
    except OSError:  # not there, or not readable: the whole-file path says why
        return None
    if chunk is None or not chunk.endswith(b"\n"):  # lines past the head, or a torn tail
        return None
    last = chunk[:-1]  # the chunk starts just past the newline before the last line
    return (head.count, last, head.end) if line_hash(last) == head.sha else None


def append_trajectory(paths: RunPaths, record: dict[str, Any], *, whole: bool = False,
                      aside: Collection[int] = ()) -> None:
    """Append one chained record (flushed and synced), then move run.json's chain head.

    Called under the run's lock: the trajectory survives every reset, and a kill between
    the two writes leaves one line past the head, which the next command adopts.
    ``whole``: count the file's lines rather than trust the head (a record being repaired).
    ``aside``: lines that do not chain where they stand, being set aside (implies ``whole``): the
    record chains to the last line before those at the file's end, so the chain goes on past them.
    """
    with _record_lock(paths):
        try:
            raw: bytes | None = read_record_file(paths.run_json)
        except FileNotFoundError:
            raw = None
        tail = None if whole or aside or raw is None else _tail_at_head(paths, _head_in(raw))
        link: tuple[int, bytes] | None = None
        if tail is None:  # torn, lines past the head, no head: the whole file decides
            done, _ = _set_aside_torn(paths, trajectory_bytes(paths))
            tail = done.count, done.last(), done.end
            kept = done.count
            while kept in aside:  # a copy appended at the end must not become the chain's next link
                kept -= 1
            if 0 < kept != done.count:  # (never chained to nothing: only the run's first line is)
                link = kept, split_lines(done.data[:done.end])[0][kept - 1]
        count, last, size = tail
        record = {"time": round(time.time(), 3), **record, **link_after(*(link or (count, last)))}
        from avo.run_key import run_key, sign_line  # (it imports this module)

        key = run_key(paths, create=True, first_line=count == 0)
        assert key is not None
        line = sign_line(key, json.dumps(record, sort_keys=False, default=str).encode())
        with os.fdopen(open_own(paths.trajectory, append=True), "ab") as fh:  # never through a link
            fh.write(line + b"\n")
            fh.flush()
            os.fsync(fh.fileno())
        if raw is not None:
            _set_head(paths, ChainHead(count=count + 1, sha=line_hash(line), end=size + len(line) + 1), raw)


def heal_trajectory(paths: RunPaths, state: RunState) -> list[str]:
    """Under the lock: set a torn tail aside and adopt lines written past the head."""
    with _record_lock(paths):
        state.chain = _disk_head(paths) or state.chain  # the caller's copy may predate an append
        if not paths.trajectory.exists() or _tail_at_head(paths, state.chain) is not None:
            return []  # the file ends with a whole line, the head's: nothing to heal
        done, note = _set_aside_torn(paths, trajectory_bytes(paths))
        notes = [note] if note else []
        head = state.chain
        if head is not None and 0 < head.count < done.count:  # rare: only then is the file split
            lines, _ = split_lines(done.data[:done.end])
            if line_hash(lines[head.count - 1]) == head.sha:
                n = _chained_past(paths, lines, head.count)
                if n > head.count:
                    new = ChainHead(count=n, sha=line_hash(lines[n - 1]), end=sum(len(x) + 1 for x in lines[:n]))
                    _set_head(paths, new)
                    state.chain = new
                    notes.append(f"adopted {n - head.count} trajectory line(s) written after the last "
                                 "recorded one (a command was killed between its two writes)")
        return notes


def _chained_past(paths: RunPaths, lines: list[bytes], count: int) -> int:
    """How many of ``lines`` the head may move to: past ``count``, only lines that each chain to
    the line before them and, in a run with a key, that avo signed (a kill between an append and
    the head's move leaves such lines). A line of the agent's there (a signed line of an earlier
    step copied to the end: its counters, re-measurements of the best, counted twice) is left
    for the record check to name."""
    from avo.run_key import line_signed, run_key  # (it imports this module)

    key = run_key(paths, create=False)
    n = count
    while n < len(lines):
        record = parse(lines[n])
        if record is None or not follows(record, lines[n - 1]):
            break
        if key is not None and line_signed(key, lines[n]) is not True:
            break
        n += 1
    return n


_RECOVERED_MARK = b'"recovered"'  # in every line that can set lines aside (chain.RECOVERED)


def read_trajectory(paths: RunPaths, *, mentioning: bytes | None = None,
                    data: bytes | None = None) -> list[dict[str, Any]]:
    """Every trajectory record, except a torn last line and lines ``avo recover`` set aside.

    ``mentioning``: only records whose line contains these bytes (a tree id, say), found
    without parsing the other lines. ``data``: the trajectory's bytes as the caller already
    read them (the check at a command's start), instead of reading the file again.
    """
    data = trajectory_bytes(paths) if data is None else data
    end = data.rfind(b"\n") + 1  # complete lines only
    pos = -1 if mentioning is None else data.find(mentioning, 0, end)
    if mentioning is not None and pos == -1:
        return []  # no line names it (a new tree, usually): nothing to parse, nothing set aside to look for
    if mentioning is not None and _RECOVERED_MARK not in data:
        out = []
        while pos != -1:
            start, stop = data.rfind(b"\n", 0, pos) + 1, data.find(b"\n", pos, end)
            r = parse(data[start:stop])
            if r is not None:
                out.append(r)
            pos = data.find(mentioning, stop + 1, end)
        return out
    from avo.run_key import trajectory_signatures  # (it imports this module)

    lines, _ = split_lines(data)
    records = [parse(line) for line in lines]
    acks = acknowledged(records, lines, trajectory_signatures(paths, data).counts)
    aside = {n for n, sha in acks.items() if n <= len(lines) and line_hash(lines[n - 1]) == sha}
    return [r for n, r in enumerate(records, 1) if r is not None and n not in aside
            and (mentioning is None or mentioning in lines[n - 1])]


def recent_records(paths: RunPaths, needles: tuple[bytes, ...], keep: Callable[[dict[str, Any]], bool],
                   limit: int) -> list[dict[str, Any]]:
    """The last ``limit`` records ``keep`` accepts (oldest first), as :func:`read_trajectory`
    gives them, read back from the end of the file.

    ``needles``: every record ``keep`` accepts has one of these in its line; other lines are
    never parsed, so the cost depends on how far back the records are, not on the file.
    """
    data = trajectory_bytes(paths)
    if _RECOVERED_MARK in data:  # lines may be set aside: the whole file decides which
        return [r for r in read_trajectory(paths) if keep(r)][-limit:] if limit else []
    end = data.rfind(b"\n") + 1
    hits = {n: data.rfind(n, 0, end) for n in needles}
    out: list[dict[str, Any]] = []
    while len(out) < limit:
        hit = max(hits.values(), default=-1)
        if hit < 0:
            break
        start, stop = data.rfind(b"\n", 0, hit) + 1, data.find(b"\n", hit, end)
        r = parse(data[start:stop])
        if r is not None and keep(r):
            out.append(r)
        for n, at in hits.items():
            if at >= start:
                hits[n] = data.rfind(n, 0, start)
    return out[::-1]


def run_busy(paths: RunPaths) -> bool:
    """Whether another avo command holds the run's lock now (a submit with its re-measurements, a revert).

    Takes nothing: a shared lock is tried without waiting and let go at once.
    """
    try:
        fd = open_regular(paths.lock, why="the run's lock file")
    except (FileNotFoundError, NotRegularFile):
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


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


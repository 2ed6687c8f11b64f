"""A shipped example's measurements on other kinds of CPU (``hosts.json`` beside its record).

A timed score (a speedup against a reference implementation) moves between CPU models by
more than a noise band: what ``avo verify`` can check on another kind of machine is that it
reproduces what was measured on that kind before, not the run's own record. ``avo verify
--record-host`` measures the shipped version a few times on this machine and keeps the middle
draw here as the reference for its CPU class; a later ``avo verify`` on a machine of that class
compares with it, and says so. Nothing here changes the run's record: the file is beside it,
and a reference that does not reproduce is a mismatch like any other.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from avo.errors import AvoError, validation_summary

HOSTS_FILE = "hosts.json"
MAX_BYTES = 1 << 20  # a reference is ~1 KiB; a thousand of them is far more than a folder needs


class HostReference(BaseModel):
    """One version measured on one class of CPU."""

    model_config = ConfigDict(extra="forbid")

    cpu: str = Field(description="The CPU class (avo.host_cpu.cpu_class) it was measured on")
    cpu_name: str = ""
    version: int
    scalar: float = Field(description="The middle draw: what a verify on this class compares with")
    metrics: dict[str, float]
    draws: list[float]
    measured: str = Field(description="When, UTC, ISO 8601")
    load: list[float] = Field(default_factory=list, description="The 1/5/15-minute load average before it")
    evaluator: dict[str, str] = Field(default_factory=dict, description="The evaluator's hashes it ran with")


class HostReferences(BaseModel):
    """What ``hosts.json`` holds."""

    model_config = ConfigDict(extra="forbid")

    recorded_on: str | None = Field(None, description="The CPU class the run's record was measured on, for a "
                                    "run whose trajectory does not say (recorded before avo recorded it)")
    recorded_on_source: str = Field("", description="How that is known")
    references: list[HostReference] = Field(default_factory=list)

    def find(self, cpu: str, version: int) -> HostReference | None:
        """The reference for ``version`` on CPU class ``cpu``, if one was measured."""
        return next((r for r in self.references if r.cpu == cpu and r.version == version), None)

    def put(self, ref: HostReference) -> None:
        """Keep ``ref``, replacing the one for the same CPU class and version."""
        self.references = [r for r in self.references if (r.cpu, r.version) != (ref.cpu, ref.version)] + [ref]


def load_references(folder: Path) -> HostReferences:
    """The example's ``hosts.json``, or an empty one when it has none."""
    import os

    from avo.regular_files import open_regular

    path = folder / HOSTS_FILE
    try:  # a folder from someone else: a pipe there must not hang verify, nor a huge file fill memory
        fd = open_regular(path, why="the example's CPU references")
    except FileNotFoundError:
        return HostReferences()
    except OSError as exc:
        raise AvoError(f"{path} is not a CPU-reference file avo can read: {exc}") from exc
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise AvoError(f"{path} is over {MAX_BYTES // 1024} KiB: not a CPU-reference file avo writes")
    try:
        return HostReferences.model_validate_json(data)
    except ValidationError as exc:
        raise AvoError(f"{path} is not a CPU-reference file avo can read: {validation_summary(exc)}") from None


def save_references(folder: Path, refs: HostReferences) -> Path:
    """Write ``hosts.json`` whole (a fresh temporary file put in place, never through a link: a
    crash leaves the old one)."""
    from avo.regular_files import write_json_atomic

    path = folder / HOSTS_FILE
    write_json_atomic(path, refs.model_dump_json(indent=2) + "\n")
    return path

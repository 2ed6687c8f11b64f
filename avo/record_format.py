"""How a version is written into its commit: the trailers and the ``.avo/scores.jsonl`` lines.

Both round-trip exactly (``repr`` of the scalar, JSON of the metrics), so the record can be
checked against the lineage number for number. Trailers written before that (``%.6g``) are
still read, and compared at the precision they were written with.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from avo.state import RunState, Version

SCALAR, METRICS, TARGET, TERMS, SANDBOX = "avo-scalar", "avo-metrics", "avo-target", "avo-terms", "avo-sandbox"


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def clean_message(text: str) -> str:
    """A message as the record keeps it: control characters other than newline and tab shown
    as ``\\xNN``. A raw ESC or CR in a message is replayed by every terminal that shows it
    (``avo status``, ``avo log``, ``avo evolve``'s lines): "rejected" redrawn as "accepted
    (new best) 1e9", or the terminal's title set."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def scores_line(v: Version) -> str:
    """One line of ``.avo/scores.jsonl`` for version ``v``."""
    return json.dumps({"version": f"v{v.n}", "scalar": v.scalar, "metrics": v.metrics,
                       "message": v.message, "step": v.step, "time": v.time}) + "\n"


def scores_file(versions: list[Version]) -> str:
    """The whole ``.avo/scores.jsonl`` committed with the last of ``versions``."""
    return "".join(scores_line(v) for v in versions)


def terms(state: RunState) -> dict[str, Any]:
    """The terms a run was started on: the target's spec, the options, the configs, the
    evaluator's and the KB's hashes and the sandbox level (an edited hash would let a changed
    evaluator pass the integrity check).

    Only the step budget may change later (``avo evolve --max-steps``).
    """
    return {"target": state.target.model_dump(mode="json"),
            "options": state.options.model_dump(mode="json", exclude={"max_steps"}),
            "configs": list(state.configs),
            "hashes": state.hashes,
            "sandbox": state.sandbox}


def terms_digest(data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def trailer_lines(target: str, scalar: float, metrics: dict[str, float], terms_sha: str | None = None,
                  *, sandbox: str | None = None) -> str:
    """avo's trailer block: one ``key: value`` per line, values that cannot span lines.

    ``terms_sha`` (v0 only) pins the run's terms in the lineage; ``sandbox`` is the isolation
    the evaluation ran under (``bwrap`` or ``none``, see avo.sandbox).
    """
    # The target name is a single-line identifier (TargetSpec checks it); JSON escapes the
    # metric names, so no name can end a line and forge a trailer.
    pinned = f"{TERMS}: {terms_sha}\n" if terms_sha else ""
    isolation = f"{SANDBOX}: {sandbox}\n" if sandbox else ""
    return f"{TARGET}: {target}\n{SCALAR}: {scalar!r}\n{METRICS}: {json.dumps(metrics)}\n{isolation}{pinned}"


@dataclass(frozen=True)
class Trailers:
    """avo's trailers as read back from a commit message."""

    scalar: str | None
    metrics: str | None
    terms: str | None = None

    @property
    def exact(self) -> bool:
        """Written in the exact format (JSON metrics), not the old ``%.6g`` one."""
        return (self.metrics or "").startswith("{")

    def scalar_matches(self, scalar: float) -> bool:
        if self.scalar is None:
            return False
        if not self.exact:
            return self.scalar == f"{scalar:.6g}"
        try:
            value = float(self.scalar)
        except ValueError:
            return False
        return value == scalar or (math.isnan(value) and math.isnan(scalar))

    def metrics_match(self, metrics: dict[str, float]) -> bool:
        if self.metrics is None:
            return False
        if not self.exact:
            return self.metrics == ", ".join(f"{k}={v:.6g}" for k, v in metrics.items())
        try:
            return bool(json.loads(self.metrics) == metrics)
        except ValueError:
            return False

    def scalar_value(self) -> float | None:
        try:
            return float(self.scalar) if self.scalar is not None else None
        except ValueError:
            return None

    def metrics_value(self) -> dict[str, float] | None:
        if self.metrics is None:
            return None
        if self.exact:
            try:
                data = json.loads(self.metrics)
            except ValueError:
                return None
            return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else None
        out = {}
        for part in self.metrics.split(", "):
            key, sep, value = part.rpartition("=")
            if not sep:
                continue
            try:
                out[key] = float(value)
            except ValueError:
                return None
        return out


def parse_trailers(message: str) -> Trailers:
    """avo's trailers: the ``avo-*`` lines of the message's last paragraph (avo writes it last,
    after the agent's text, so a message cannot smuggle in a trailer of its own)."""
    last = message.rstrip("\n").rpartition("\n\n")[2]
    found: dict[str, str] = {}
    for line in last.splitlines():
        key, sep, value = line.partition(": ")
        if sep and key.startswith("avo-"):
            found[key] = value
    return Trailers(found.get(SCALAR), found.get(METRICS), found.get(TERMS))

"""Other processes on the evaluation's CPUs, which a wall-clock ratio cannot tell from speed.

With more than one thread per side both sides are timed on the wall clock, and a process that
takes one of the evaluation's CPUs slows them unequally. Measured 2026-12-04 on a 2-vCPU
guest: one busy loop pinned to the second CPU made NumPy's 2-thread n256 calls take 66 ms
instead of 2.4 ms (every call waits for its second thread), while a kernel whose caller does
a late helper's share lost 1.5x. Every config was steadily slow, so no swing (settings.STEADY_2T)
gave it away, and a kernel recorded at 8.1 scored 40.5. Any process can do that beside a
submit, the agent's own included; so the evaluation counts what ran on its CPUs that was not
its own: the CPUs' busy time (/proc/stat) less this process's and its workers' CPU time.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

# A config timed while other processes used more than this share of the evaluation's CPUs
# (their capacity over the config's rounds) is not scored. A quiet machine measured 0-2 %
# (daemons, the agent's idle session), the busy loop 45-50 %.
FOREIGN_MAX = 0.10
# /proc/stat counts whole ticks (10 ms): each CPU's busy time read at a round's start and end
# can be off by up to a tick each, so that much per CPU and round is not held against anyone
# (it matters only for rounds of a fraction of a second, as in tests).
TICK_SLACK = 2
_BUSY_FIELDS = (1, 2, 3, 6, 7)  # user, nice, system, irq, softirq (not idle, iowait, the host's steal)


@dataclass(frozen=True)
class Usage:
    """CPU seconds at one moment: the CPUs' busy time, and ours (this process and the workers')."""

    busy: float
    ours: float


def cpu_ticks(stat: str | None = None) -> dict[int, list[int]]:
    """Each CPU's counters (user, nice, system, idle, iowait, irq, softirq, steal, ...) in ticks, from
    ``/proc/stat`` (or ``stat``, its text); empty where it cannot be read."""
    try:
        text = stat if stat is not None else Path("/proc/stat").read_text()
        return {int(p[0][3:]): [int(x) for x in p[1:]] for p in (line.split() for line in text.splitlines())
                if p and p[0].startswith("cpu") and p[0][3:].isdigit()}
    except (OSError, ValueError):
        return {}


def busy_seconds(cpus: Iterable[int], stat: str | None = None) -> float:
    """Seconds the ``cpus`` ran anything since boot, from ``/proc/stat`` (or ``stat``, its text)."""
    ticks = cpu_ticks(stat)
    busy = sum(sum(row[i - 1] for i in _BUSY_FIELDS if i - 1 < len(row)) for c in cpus for row in [ticks.get(c, [])])
    return busy / os.sysconf("SC_CLK_TCK")


def usage(cpus: Sequence[int], worker_ns: Iterable[int]) -> Usage:
    """Now: the ``cpus``' busy seconds, and this process's CPU seconds plus the workers' (``worker_ns``)."""
    mine = os.times()
    return Usage(busy_seconds(cpus), mine.user + mine.system + sum(worker_ns) * 1e-9)


def foreign(before: Usage, after: Usage) -> float:
    """CPU seconds others ran on the CPUs between two samples, as read (ticks are coarse: it can be
    a little off either way, below 0 included)."""
    return (after.busy - before.busy) - (after.ours - before.ours)


@dataclass
class Tally:
    """One config's foreign CPU seconds, over its rounds, and the capacity they are a share of."""

    foreign: float = 0.0
    capacity: float = 0.0
    slack: float = 0.0  # what the ticks' coarseness may have added (TICK_SLACK per CPU and round)

    def add(self, before: Usage, after: Usage, wall: float, ncpus: int) -> None:
        """Count one round, timed between ``before`` and ``after`` over ``wall`` seconds."""
        self.foreign += foreign(before, after)
        self.capacity += wall * ncpus
        self.slack += TICK_SLACK * ncpus / os.sysconf("SC_CLK_TCK")

    @property
    def share(self) -> float:
        """Others' share of the CPUs' time, after the slack (0 when nothing was counted)."""
        return max(0.0, self.foreign - self.slack) / self.capacity if self.capacity > 0 else 0.0

"""How busy the machine's cores were in each phase of the run (unit, e2e, integration).

The suite's time on a two-core machine is set by its CPU: a phase that leaves a core idle can
take work from another (worker_schedule.py puts builds beside the unit tests and the e2e), a
phase at both cores cannot. Read from /proc/stat at each change of phase, so it counts every
process on the machine: the engine, the servers, a neighbour's work.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

STAT = Path("/proc/stat")
# /proc/stat's aggregate cpu line: user nice system idle iowait irq softirq steal (USER_HZ).
IDLE_FIELDS = (3, 4)


def _ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies of all cores since boot; None where /proc/stat is unreadable."""
    try:
        fields = [int(v) for v in STAT.read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return None
    idle = sum(fields[i] for i in IDLE_FIELDS)
    return sum(fields) - idle, sum(fields)


@dataclass
class CpuUse:
    """Phases in the order they ran: name, wall seconds, busy core-seconds."""

    phases: list[tuple[str, float, float]] = field(default_factory=list)
    _current: str | None = None
    _since: tuple[float, tuple[int, int]] | None = None

    def enter(self, phase: str) -> None:
        """Close the running phase (if another) and start `phase`."""
        if phase == self._current:
            return
        now, ticks = time.monotonic(), _ticks()
        if self._current is not None and self._since is not None and ticks is not None:
            started, (busy, _) = self._since
            hz = os.sysconf("SC_CLK_TCK")
            self.phases.append((self._current, now - started, (ticks[0] - busy) / hz))
        self._current = phase
        self._since = None if ticks is None else (now, ticks)

    def lines(self) -> list[str]:
        cores = os.cpu_count() or 1
        return [
            f"{name:<12} {wall:7.0f} s, {busy:7.0f} core-s busy: "
            f"{100 * busy / (wall * cores):3.0f} % of {cores} cores"
            for name, wall, busy in self.phases
            if wall > 0
        ]


def phase_of(parts: tuple[str, ...]) -> str:
    """The phase a test file belongs to: its folder under tests/."""
    for name in ("unit", "e2e", "integration"):
        if name in parts:
            return name
    return "other"

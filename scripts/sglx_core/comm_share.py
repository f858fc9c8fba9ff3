"""How much of a served step goes to communication, read from a torch-profiler trace of the
server (seed S0-36: when all-reduce takes more than 30% of the time, change the parallel
strategy).

sglang's `/start_profile` writes one Chrome-trace JSON per rank (`*.trace.json.gz`,
docs/reference/profiling.md). Its complete events ("ph": "X") carry a category, a name, a start
and a duration in microseconds. A device trace has the device's kernels (category "kernel"):
there the share is the time of the collective library's kernels over the time any kernel ran.
A trace without kernels (the cpu arch, or CPU activity only) is judged on the host side: the
collective ops and annotations (c10d::allreduce_, gloo:all_reduce) over the time any op or
annotation ran. Overlapping events are counted once (the union of their intervals), so a
collective op and the annotation inside it are one span, and kernels on two streams at once are
busy time once. Which names are communication is profile data (gate.comm_share.patterns).

A trace is untrusted input: its size (compressed and inflated) and its event count are
bounded, and it must be the JSON object a profiler writes.
"""

from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx_core import untrusted
from sglx_core.errors import SglxError
from sglx_core.profile.schema import CommShare

MAX_TRACE_BYTES = 512 << 20  # inflated: a few steps of a large model stay under 200 MiB
MAX_EVENTS = 5_000_000
DEVICE = ("kernel",)
HOST = ("cpu_op", "user_annotation")
FIX = "profile again with sglang's /start_profile (docs/reference/profiling.md)"


@dataclass(frozen=True)
class Share:
    """One trace's communication time over its busy time, on the device or the host side."""

    trace: str
    side: str  # "device" (kernels) or "host" (ops and annotations)
    comm_us: float
    busy_us: float
    top: tuple[tuple[str, float], ...]  # the collective names with the most time

    @property
    def share(self) -> float:
        return self.comm_us / self.busy_us if self.busy_us > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "trace": self.trace,
            "side": self.side,
            "comm_ms": round(self.comm_us / 1000, 3),
            "busy_ms": round(self.busy_us / 1000, 3),
            "share": round(self.share, 4),
            "top": [{"name": n, "ms": round(us / 1000, 3)} for n, us in self.top],
        }


def read_events(path: Path) -> list[dict[str, Any]]:
    """The complete events of the trace at `path` (plain or gzip JSON), bounded."""
    raw = untrusted.read_bounded(path, what="profiler trace", max_bytes=MAX_TRACE_BYTES, hint=FIX)
    if raw[:2] == b"\x1f\x8b":
        raw = _inflate(raw, path)
    document = untrusted.parse_json(raw, path=path, what="profiler trace", hint=FIX)
    events = document.get("traceEvents") if isinstance(document, dict) else None
    if not isinstance(events, list):
        raise SglxError(
            f"{path}: not a profiler trace (no traceEvents list)",
            hint=FIX,
            code="corrupt",
            path=str(path),
        )
    if len(events) > MAX_EVENTS:
        raise SglxError(
            f"{path}: {len(events):,} events, more than {MAX_EVENTS:,}; profile fewer steps",
            hint="pass a smaller num_steps to /start_profile",
            code="too_large",
            path=str(path),
        )
    return [e for e in events if isinstance(e, dict) and e.get("ph") == "X"]


def _inflate(raw: bytes, path: Path) -> bytes:
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflater.decompress(raw, MAX_TRACE_BYTES + 1)
    except zlib.error as exc:
        raise SglxError(
            f"{path}: not a readable gzip file ({exc})", hint=FIX, code="corrupt", path=str(path)
        ) from None
    if len(data) > MAX_TRACE_BYTES or inflater.unconsumed_tail:
        raise SglxError(
            f"{path}: inflates to more than {MAX_TRACE_BYTES >> 20} MiB; profile fewer steps",
            hint="pass a smaller num_steps to /start_profile",
            code="too_large",
            path=str(path),
        )
    return data


def measure(path: Path, rules: CommShare) -> Share:
    """The communication share of one trace."""
    events = read_events(path)
    kernels = [e for e in events if e.get("cat") in DEVICE]
    host = [e for e in events if e.get("cat") in HOST]
    side, chosen = ("device", kernels) if kernels else ("host", host)
    patterns = [re.compile(p, re.IGNORECASE) for p in rules.patterns]
    busy: list[tuple[float, float]] = []
    comm: list[tuple[float, float]] = []
    per_name: dict[str, float] = {}
    for event in chosen:
        span = _span(event)
        if span is None:
            continue
        busy.append(span)
        name = str(event.get("name", ""))
        if any(p.search(name) for p in patterns):
            comm.append(span)
            per_name[name] = per_name.get(name, 0.0) + span[1] - span[0]
    top = tuple(sorted(per_name.items(), key=lambda kv: -kv[1])[:5])
    return Share(str(path), side, _union(comm), _union(busy), top)


def _span(event: dict[str, Any]) -> tuple[float, float] | None:
    start, duration = event.get("ts"), event.get("dur")
    if not isinstance(start, int | float) or not isinstance(duration, int | float):
        return None
    stop = float(start) + float(duration)
    if duration < 0 or not math.isfinite(start) or not math.isfinite(stop):  # nor NaN, nor inf
        return None
    return float(start), stop


def _union(spans: Iterable[tuple[float, float]]) -> float:
    """The length of the union of the intervals."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(spans):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def above(shares: Sequence[Share], rules: CommShare) -> list[Share]:
    return [s for s in shares if s.share > rules.max_share]


def hint(rules: CommShare) -> str:
    return "; ".join(rules.fixes) or "change the parallel strategy"

"""The collective smoke's report: the all-reduce over a serving group's devices, as JSON.

The plugin's `python -m sglx_runtime.collective_smoke` runs on each node of a group before the
server starts: every rank checks in at a rendezvous (a missing one is named, with its host),
then all ranks all-reduce a buffer of the profile's size and the slowest rank's time gives the
bus bandwidth, held against the profile's floor where one is set. Each node prints one
`CollectiveReport` as JSON; node 0's is the group's. This module is that document's one
definition: the plugin builds it (`CollectiveReport.to_json`), the host reads it back
(`parse_report`, `read_report`), and both use the one bandwidth formula (`bus_bandwidth`).

The document comes from a container's output, so it is untrusted input: bounded
(`MAX_REPORT_BYTES`), parsed under sglx_core.untrusted's rules, and checked field by field, each
error naming the field ("collective smoke report: ranks[3].host is 7, not a string ...").

Stdlib only: the plugin imports this inside the image, and the host checks on the hosts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.gate.fields import TOP_LEVEL, FieldCheck, shown
from sglx_core.untrusted import parse_json, read_bounded

FORMAT_VERSION = 1
MAX_REPORT_BYTES = 4 << 20
"""Largest report read: a rank's entry is about 150 bytes, so this holds thousands of ranks."""
MAX_RANKS = 16384
MAX_FINDINGS = 4 * MAX_RANKS
MAX_TEXT = 4096
"""Longest message, host or name (a finding quotes at most a clipped exception text)."""
GB = 1e9
"""nccl-tests report GB/s in decimal gigabytes (bytes / 1e9 / seconds); so does sglx."""

WHAT = "collective smoke report"
_FIX = (
    "run the collective smoke again (`python -m sglx_runtime.collective_smoke --json` in the "
    "serving image) and read its stdout only: progress lines go to stderr"
)


def algorithm_bandwidth(size_bytes: int, seconds: float) -> float:
    """GB/s of one operation on `size_bytes` that took `seconds`: nccl-tests' algbw = S / t."""
    if seconds <= 0 or not math.isfinite(seconds):
        raise ValueError(f"an operation time of {seconds!r} s measures nothing")
    return size_bytes / seconds / GB


def bus_bandwidth(algbw: float, world_size: int) -> float:
    """An all-reduce's bus bandwidth: algbw * 2(n-1)/n over n ranks.

    nccl-tests' formula (doc/PERFORMANCE.md in NVIDIA/nccl-tests, "AllReduce"): an all-reduce
    needs n-1 additions and n assignments per element, 2(n-1) transfers spread over n links,
    so this factor makes the figure comparable with the hardware's per-link peak whatever the
    rank count. RCCL's rccl-tests and AMD's system-acceptance numbers use the same formula.
    One rank moves nothing over a bus: 0.
    """
    if world_size < 1:
        raise ValueError(f"a world of {world_size} ranks has no bus bandwidth")
    return algbw * 2 * (world_size - 1) / world_size


@dataclass(frozen=True)
class RankEntry:
    """One rank of the group as the printing node saw it at the rendezvous."""

    rank: int
    node_rank: int
    host: str  # the node's name as the caller gave it (--hosts), else the rank's own hostname
    arrived: bool
    hostname: str | None = None  # what the rank itself reported (None: it never arrived)
    busbw_gbps: float | None = None  # from this rank's own time (None: not measured)

    def to_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node_rank": self.node_rank,
            "host": self.host,
            "arrived": self.arrived,
            "hostname": self.hostname,
            "busbw_gbps": self.busbw_gbps,
        }


@dataclass(frozen=True)
class MissingRank:
    """A rank that never reached the rendezvous, and the node it should have run on."""

    rank: int
    node_rank: int
    host: str

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "node_rank": self.node_rank, "host": self.host}


@dataclass(frozen=True)
class Problem:
    """A finding (exit 1) or the error that stopped the smoke (exit 2): code, message, fix."""

    code: str
    message: str
    hint: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "hint": self.hint}


@dataclass(frozen=True)
class CollectiveReport:
    """What one node of the group prints; node 0's is the group's answer.

    `ranks` lists every rank once the rendezvous finished, else only the printing node's own.
    `busbw_gbps`/`algbw_gbps` come from the slowest rank's time (None when nothing was
    measured); `floor_gbps` is the floor held against busbw (None: no floor).
    """

    world_size: int
    nnodes: int
    node_rank: int
    backend: str
    device_type: str
    size_bytes: int
    iters: int
    ranks: tuple[RankEntry, ...]
    missing: tuple[MissingRank, ...] = ()
    busbw_gbps: float | None = None
    algbw_gbps: float | None = None
    floor_gbps: float | None = None
    findings: tuple[Problem, ...] = ()
    error: Problem | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.findings and not self.missing

    @property
    def exit_code(self) -> int:
        """0 ok, 1 findings (a missing rank, a wrong sum, below the floor), 2 could not run."""
        if self.error is not None:
            return 2
        return 0 if self.ok else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "ok": self.ok,
            "world_size": self.world_size,
            "nnodes": self.nnodes,
            "node_rank": self.node_rank,
            "backend": self.backend,
            "device_type": self.device_type,
            "size_bytes": self.size_bytes,
            "iters": self.iters,
            "busbw_gbps": self.busbw_gbps,
            "algbw_gbps": self.algbw_gbps,
            "floor_gbps": self.floor_gbps,
            "ranks": [r.to_json() for r in self.ranks],
            "missing": [m.to_json() for m in self.missing],
            "findings": [f.to_json() for f in self.findings],
            "error": None if self.error is None else self.error.to_json(),
        }


def read_report(path: Path) -> CollectiveReport:
    """The report saved at `path`: a regular file, bounded, checked field by field."""
    raw = read_bounded(path, what=WHAT, max_bytes=MAX_REPORT_BYTES, hint=_FIX)
    return parse_report(raw, where=str(path))


def parse_report(raw: bytes | str, *, where: str = WHAT) -> CollectiveReport:
    """The report in `raw` (a node's stdout); `where` names it in errors ("stdout on h1")."""
    size = len(raw.encode() if isinstance(raw, str) else raw)
    if size > MAX_REPORT_BYTES:
        raise SglxError(
            f"{where}: the {WHAT} is {size} bytes, more than {MAX_REPORT_BYTES}; no real one is",
            hint=_FIX,
            code="too_large",
            path=where,
        )
    document = parse_json(raw, path=Path(where), what=WHAT, hint=_FIX)
    return report_from_json(document, where=where)


def report_from_json(document: Any, *, where: str = WHAT) -> CollectiveReport:
    """Check a parsed report against format version 1."""
    check = _Check(where)
    top = check.object(document, TOP_LEVEL, _TOP_KEYS)
    version = top["format_version"]
    if version != FORMAT_VERSION or isinstance(version, bool):
        raise check.error(
            f"format_version is {shown(version)}; this sglx reads version {FORMAT_VERSION}",
            hint="read the report with the sglx whose plugin is in the serving image",
        )
    world = check.integer(top["world_size"], "world_size", 1, MAX_RANKS)
    nnodes = check.integer(top["nnodes"], "nnodes", 1, world)
    ranks = tuple(
        _rank(check, item, f"ranks[{i}]", world, nnodes)
        for i, item in enumerate(check.array(top["ranks"], "ranks", MAX_RANKS))
    )
    _unique(check, [r.rank for r in ranks], "ranks")
    missing = tuple(
        _missing(check, item, f"missing[{i}]", world, nnodes)
        for i, item in enumerate(check.array(top["missing"], "missing", MAX_RANKS))
    )
    _unique(check, [m.rank for m in missing], "missing")
    arrived = {r.rank for r in ranks if r.arrived}
    for i, m in enumerate(missing):
        if m.rank in arrived:
            raise check.error(f"missing[{i}] names rank {m.rank}, which ranks lists as arrived")
    findings = tuple(
        _problem(check, item, f"findings[{i}]")
        for i, item in enumerate(check.array(top["findings"], "findings", MAX_FINDINGS))
    )
    error = None if top["error"] is None else _problem(check, top["error"], "error")
    report = CollectiveReport(
        world_size=world,
        nnodes=nnodes,
        node_rank=check.integer(top["node_rank"], "node_rank", 0, nnodes - 1),
        backend=check.string(top["backend"], "backend"),
        device_type=check.string(top["device_type"], "device_type"),
        size_bytes=check.integer(top["size_bytes"], "size_bytes", 0, 1 << 50),
        iters=check.integer(top["iters"], "iters", 0, 1 << 30),
        ranks=ranks,
        missing=missing,
        busbw_gbps=check.bandwidth(top["busbw_gbps"], "busbw_gbps"),
        algbw_gbps=check.bandwidth(top["algbw_gbps"], "algbw_gbps"),
        floor_gbps=check.bandwidth(top["floor_gbps"], "floor_gbps"),
        findings=findings,
        error=error,
    )
    ok = top["ok"]
    if not isinstance(ok, bool):
        raise check.error(f"ok is {shown(ok)}, not true or false")
    if ok != report.ok:
        raise check.error(
            f"ok is {shown(ok)}, but the report lists {len(missing)} missing rank(s), "
            f"{len(findings)} finding(s) and {'an' if error else 'no'} error"
        )
    return report


_TOP_KEYS = frozenset(
    {
        "format_version",
        "ok",
        "world_size",
        "nnodes",
        "node_rank",
        "backend",
        "device_type",
        "size_bytes",
        "iters",
        "busbw_gbps",
        "algbw_gbps",
        "floor_gbps",
        "ranks",
        "missing",
        "findings",
        "error",
    }
)
_RANK_KEYS = frozenset({"rank", "node_rank", "host", "arrived", "hostname", "busbw_gbps"})
_MISSING_KEYS = frozenset({"rank", "node_rank", "host"})
_PROBLEM_KEYS = frozenset({"code", "message", "hint"})


def _rank(check: _Check, value: Any, name: str, world: int, nnodes: int) -> RankEntry:
    item = check.object(value, name, _RANK_KEYS)
    arrived = item["arrived"]
    if not isinstance(arrived, bool):
        raise check.error(f"{name}.arrived is {shown(arrived)}, not true or false")
    hostname = item["hostname"]
    return RankEntry(
        rank=check.integer(item["rank"], f"{name}.rank", 0, world - 1),
        node_rank=check.integer(item["node_rank"], f"{name}.node_rank", 0, nnodes - 1),
        host=check.string(item["host"], f"{name}.host"),
        arrived=arrived,
        hostname=None if hostname is None else check.string(hostname, f"{name}.hostname"),
        busbw_gbps=check.bandwidth(item["busbw_gbps"], f"{name}.busbw_gbps"),
    )


def _missing(check: _Check, value: Any, name: str, world: int, nnodes: int) -> MissingRank:
    item = check.object(value, name, _MISSING_KEYS)
    return MissingRank(
        rank=check.integer(item["rank"], f"{name}.rank", 0, world - 1),
        node_rank=check.integer(item["node_rank"], f"{name}.node_rank", 0, nnodes - 1),
        host=check.string(item["host"], f"{name}.host"),
    )


def _problem(check: _Check, value: Any, name: str) -> Problem:
    item = check.object(value, name, _PROBLEM_KEYS)
    hint = item["hint"]
    return Problem(
        code=check.string(item["code"], f"{name}.code"),
        message=check.string(item["message"], f"{name}.message"),
        hint=None if hint is None else check.string(hint, f"{name}.hint"),
    )


def _unique(check: _Check, numbers: Sequence[int], name: str) -> None:
    seen: set[int] = set()
    for i, number in enumerate(numbers):
        if number in seen:
            raise check.error(f"{name}[{i}] repeats rank {number}")
        seen.add(number)


class _Check(FieldCheck):
    """Field checks whose errors name the report and the field."""

    def __init__(self, where: str) -> None:
        super().__init__(where, _FIX)

    def string(self, value: Any, field: str, limit: int = MAX_TEXT) -> str:
        return super().string(value, field, limit)

    def bandwidth(self, value: Any, name: str) -> float | None:
        """GB/s: null, or a finite number of at least 0."""
        if value is None:
            return None
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if number is None or not math.isfinite(number) or number < 0:
            raise self.error(f"{name} is {shown(value)}, not null or GB/s (a number >= 0)")
        return float(number)

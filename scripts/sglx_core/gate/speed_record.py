"""A host's speed record: the last benchmark it passed in the serving gate, kept on the host.

The gate's speed part (`sglx_runtime.speed_gate`, in the server's container) writes one when
the host passes; the next hosts of its fleet are held against those records, and the host
checks judge the whole fleet from them (`served_speed`). A record holds bench_serving's own
result line, so every reader checks it as the tool output it is (`parse_result` against the
profile's settings) rather than trusting numbers copied out of it. Records cross hosts: each is
bounded and schema-checked, and a malformed one is an error naming the host and the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.gate.bench import BenchResult, BenchSettings, parse_result
from sglx_core.gate.speed import Floors
from sglx_core.profile import Profile
from sglx_core.untrusted import parse_json

RECORD_VERSION = 1
RECORD_NAME = "gate-speed.json"
"""The record's file name on a host (the role's sglang_service_gate_speed_record)."""
MAX_RECORD_BYTES = 1 << 20
"""A record is a few KiB (bench_serving's line carries the server's arguments)."""
_HINT = (
    f"remove /var/lib/sglx/{RECORD_NAME} on that host (its last passed benchmark) and roll it "
    "out again, so the gate measures it anew"
)


PER_GROUP_FLAGS = ("--dist-init-addr", "--random-seed")
"""Server arguments that differ between serving groups of one kind by design (each group's
rendezvous address, and the seed drawn from its name): left out of the fleet key, so that the
rank 0s of two such groups compare."""


def fleet_key(image_id: str, server_args: Sequence[str]) -> str:
    """Which hosts compare: those running one image with one set of server arguments (the
    running container's, so a rolled-back host is held with what it runs now)."""
    kept: list[str] = []
    skip = False
    for word in server_args:
        if skip:
            skip = False
            continue
        name, eq, _ = word.partition("=")
        if name in PER_GROUP_FLAGS:
            skip = not eq
            continue
        kept.append(word)
    digest = hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:12]
    return f"{image_id}+args:{digest}"


@dataclass(frozen=True)
class SpeedRecord:
    host: str
    fleet: str  # hosts with one fleet key compare: one bundle, one set of server arguments
    measured_at: str  # ISO 8601, UTC
    line: str  # bench_serving's result line, as it wrote it

    def to_json(self) -> dict[str, Any]:
        return {
            "version": RECORD_VERSION,
            "host": self.host,
            "fleet": self.fleet,
            "measured_at": self.measured_at,
            "line": self.line,
        }

    def result(self, settings: BenchSettings) -> BenchResult:
        """The record's numbers, checked against the `settings` of the reader's profile."""
        path = Path(f"{self.host}:{RECORD_NAME}")
        return parse_result(self.line.encode(), path=path, settings=settings)


def settings_of(profile: Profile, site_slos: Mapping[str, Any] | None = None) -> BenchSettings:
    """The profile's benchmark, its goodput SLOs each overridden by the site's: the same on
    every host that serves from one image."""
    speed = profile.gate.speed
    slos = {**speed.slos.model_dump(), **(site_slos or {})}
    unknown = sorted(set(slos) - {"ttft_ms", "tpot_ms"})
    if unknown:
        raise SglxError(
            f"speed SLOs: {', '.join(unknown)} is no goodput SLO",
            hint="use ttft_ms and tpot_ms (milliseconds)",
            code="usage",
        )
    return BenchSettings(
        concurrency=speed.concurrency,
        num_prompts=speed.num_prompts,
        input_len=speed.input_len,
        output_len=speed.output_len,
        goodput_ttft_ms=slos["ttft_ms"],
        goodput_tpot_ms=slos["tpot_ms"],
    )


def floors_of(profile: Profile, site: Mapping[str, Any]) -> Floors:
    """The profile's floors, each overridden by the site's; None: unchecked."""
    merged = {**profile.gate.speed.floors.model_dump(), **site}
    unknown = sorted(set(merged) - set(Floors.__dataclass_fields__))
    if unknown:
        raise SglxError(
            f"speed floors: {', '.join(unknown)} is no speed floor",
            hint="use " + ", ".join(Floors.__dataclass_fields__),
            code="usage",
        )
    return Floors(**merged)


def parse_record(host: str, text: object) -> SpeedRecord:
    """The record `text` read from `host`, checked field by field."""
    path = Path(f"{host}:{RECORD_NAME}")
    if not isinstance(text, str | bytes):
        raise _corrupt(path, f"the record is {type(text).__name__}, not text")
    if len(text) > MAX_RECORD_BYTES:
        raise _corrupt(path, f"the record is larger than {MAX_RECORD_BYTES >> 20} MiB")
    record = parse_json(text, path=path, what="speed record", hint=_HINT)
    if not isinstance(record, dict):
        raise _corrupt(path, "the record is not a JSON object")
    for name in ("host", "fleet", "measured_at", "line"):
        if not isinstance(record.get(name), str):
            raise _corrupt(path, f"the record's field '{name}' is missing or not a string")
    if record.get("version") != RECORD_VERSION:
        raise _corrupt(
            path, f"the record's version is {record.get('version')!r}; this reads {RECORD_VERSION}"
        )
    if record["host"] != host:
        raise _corrupt(path, f"the record's field 'host' is {record['host']!r}, not {host!r}")
    return SpeedRecord(record["host"], record["fleet"], record["measured_at"], record["line"])


def _corrupt(path: Path, problem: str) -> SglxError:
    return SglxError(f"{path}: {problem}", hint=_HINT, code="corrupt", path=str(path))

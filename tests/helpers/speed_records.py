"""Speed-gate records for tests: the cpu profile with the benchmark settings of the pinned
bench_serving line (tests/data/gate), and records of that line at any output tok/s."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sglx_core.gate.speed_record import SpeedRecord
from sglx_core.profile import Profile, load_profile

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "gate" / "bench_serving-0.5.23.jsonl"
STARTED = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def sample_profile() -> Profile:
    """The cpu profile with the benchmark the sample line was made with."""
    profile = load_profile("cpu")
    slos = profile.gate.speed.slos.model_copy(update={"ttft_ms": 400.0, "tpot_ms": 40.0})
    speed = profile.gate.speed.model_copy(
        update={
            "concurrency": 8,
            "num_prompts": 32,
            "input_len": 128,
            "output_len": 64,
            "slos": slos,
        }
    )
    gate = profile.gate.model_copy(update={"speed": speed})
    return profile.model_copy(update={"gate": gate})


def sample_line(output_tok_s: float | None = None) -> str:
    line = json.loads(SAMPLE.read_text().splitlines()[-1])
    if output_tok_s is not None:
        line["output_throughput"] = output_tok_s
    return json.dumps(line)


def record_text(
    host: str, fleet: str = "f", tok_s: float | None = None, at: datetime = STARTED
) -> str:
    """A record's text (as a host keeps it), measured a minute after `at`."""
    measured = (at + timedelta(minutes=1)).isoformat(timespec="seconds")
    return json.dumps(SpeedRecord(host, fleet, measured, sample_line(tok_s)).to_json())

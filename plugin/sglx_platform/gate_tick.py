"""The serving gate's cheap checks, run on a timer inside the server's container
(`docker exec CONTAINER python -m sglx_platform.gate_tick --url URL`): the host's
`sglx-gate.timer` (role sglang_service) starts it every few minutes between rollouts.

Two checks, each cheap enough to run while the server serves:
- `health`: GET /health answers 200;
- `numerics`: the image's golden file replayed through the server, teacher-forced, and held
  against the profile's tolerance (sglx_platform.golden_replay: the rollout's own gate).
The expensive ones (the speed benchmark, the collective) stay with the rollout and
`sglx hosts check`.

It prints one JSON object: `record` (each check's verdict and message, when it ran and how long
it took: the host keeps it as its last gate record) and `textfile` (the same as Prometheus
series, rendered by prometheus_client for the node exporter's textfile collector). Why a
container: the golden file, the baked profile and its tolerances are in the image, and so is
prometheus_client; the host needs only Python's standard library to place the two files. Exit 0
when every check passed, 1 when one failed, 2 when the tick could not judge.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from sglx_core.report import result_of
from sglx_platform.golden_replay import DEFAULT_GOLDEN, DEFAULT_TIMEOUT_S, replay

CHECKS = ("health", "numerics")
HEALTH_TIMEOUT_S = 10.0
FORMAT = "sglx-gate-record"
VERSION = 1


@dataclass(frozen=True)
class Verdict:
    check: str
    passed: bool
    message: str
    seconds: float


def health(url: str, timeout: float = HEALTH_TIMEOUT_S) -> Verdict:
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as answer:
            ok, said = answer.status == 200, f"/health answered {answer.status}"
    except urllib.error.HTTPError as exc:
        ok, said = False, f"/health answered {exc.code}"
    except (OSError, ValueError) as exc:
        ok, said = False, f"/health did not answer: {exc}"
    return Verdict("health", ok, said, time.monotonic() - started)


def numerics(url: str, host: str | None, golden: Path, timeout: float) -> Verdict:
    started = time.monotonic()
    result = result_of(
        ("gate_tick",), lambda: replay(golden, url, None, host=host, timeout=timeout)
    )
    said = [f.message for f in result.findings] + [e.message for e in result.errors]
    message = "; ".join(said) if said else "the served numbers match the golden file"
    return Verdict("numerics", result.exit_code == 0, message, time.monotonic() - started)


def textfile(verdicts: list[Verdict], finished: float, interval: int) -> str:
    """The verdicts as Prometheus series (units in the names, bounded labels: the check)."""
    registry = CollectorRegistry()
    passed = Gauge(
        "sglx_gate_check_passed",
        "1 when the serving gate's check passed on its last timed run, else 0",
        ["check"],
        registry=registry,
    )
    seconds = Gauge(
        "sglx_gate_check_duration_seconds",
        "how long the check took on its last timed run",
        ["check"],
        registry=registry,
    )
    last = Gauge(
        "sglx_gate_last_run_timestamp_seconds",
        "when the serving gate last ran on its timer (Unix time)",
        registry=registry,
    )
    period = Gauge(
        "sglx_gate_interval_seconds",
        "how often the timer runs the gate: SglxGateStale fires after three missed runs",
        registry=registry,
    )
    period.set(interval)
    for v in verdicts:
        passed.labels(v.check).set(int(v.passed))
        seconds.labels(v.check).set(round(v.seconds, 3))
    last.set(round(finished, 3))
    return generate_latest(registry).decode()


def tick(
    url: str, host: str | None, golden: Path, timeout: float, interval: int
) -> dict[str, object]:
    verdicts = [health(url)]
    if verdicts[0].passed:
        verdicts.append(numerics(url, host, golden, timeout))
    else:
        verdicts.append(Verdict("numerics", False, "not run: the server is not healthy", 0.0))
    finished = time.time()
    record = {
        "format": FORMAT,
        "version": VERSION,
        "finished_at": round(finished, 3),
        "passed": all(v.passed for v in verdicts),
        "checks": {
            v.check: {"passed": v.passed, "message": v.message, "seconds": round(v.seconds, 3)}
            for v in verdicts
        },
    }
    return {"record": record, "textfile": textfile(verdicts, finished, interval)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglx_platform.gate_tick",
        description="Run the serving gate's cheap checks against the served endpoint.",
    )
    parser.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--host", help="the host named in findings (default: this hostname)")
    parser.add_argument("--golden", type=Path, default=DEFAULT_GOLDEN, help="the golden file")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="per request, s")
    parser.add_argument("--interval", type=int, default=900, help="the timer's period, s")
    args = parser.parse_args(argv)
    try:
        out = tick(args.url.rstrip("/"), args.host, args.golden, args.timeout, args.interval)
    except Exception as exc:  # a tick that cannot judge says why, and the host records it
        print(f"sglx gate tick: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, sort_keys=True))
    record = out["record"]
    assert isinstance(record, dict)
    return 0 if record["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

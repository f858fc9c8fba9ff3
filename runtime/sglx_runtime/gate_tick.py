"""The serving gate's cheap checks, run on a timer inside the server's container
(`docker exec CONTAINER python -m sglx_runtime.gate_tick --url URL`): the host's
`sglx-gate.timer` (role sglang_service) starts it every few minutes between rollouts.

The checks, each cheap enough to run while the server serves:
- `health`: GET /health answers 200;
- `numerics`: the image's golden file replayed through the server, teacher-forced, and held
  against the profile's tolerance (sglx_runtime.golden_replay: the rollout's own gate);
- `memory` (`--memory-max-bytes`, off by default): the container's memory use, which the host
  read from the engine (`--memory-usage`: `docker stats`' "USED / LIMIT", as it printed it),
  under a bound: seed 000's fragmentation restart, a server whose memory only grows failing it
  so that the host's `restart` policy frees it;
- `devices`, where the profile's gate.vendor names amd-smi or xpu-smi and the container has it
  (ROCm's images carry amd-smi; the Kunlun profile mounts the host's xpu-smi): the vendor's
  ECC read (`amd-smi metric -e --json`, `xpu-smi -q`), parsed and judged by sglx_core.gate.tools
  as the host checks do, no uncorrectable error on any device, and as many devices listed as
  the server's device probe sees (sglx_core.serving.hardware): a card that dropped off is named.
  A tool that is not there has not run: the record says so, and no verdict is made up.
And one expensive check, where the host says it is due (`--speed`: every few hours, the host
script keeps the time):
- `speed`: the rollout's benchmark (sglx_runtime.speed_gate: sglang's bench_serving, the
  profile's gate.speed) held against the profile's and the site's floors, measured again
  before a failure counts. A timer run has no fleet beside it, so it judges no median: the
  site's Prometheus compares the hosts' served throughput (SglxSpeedOutlier). Its series go to
  a textfile of their own (`speed_textfile`), rewritten only when it runs.
The collective stays with the rollout and `sglx hosts check`: it needs the devices the server
holds.

It prints one JSON object: `record` (each check's verdict and message, when it ran and how long
it took: the host keeps it as its last gate record), `textfile` (the same as Prometheus
series, rendered by prometheus_client for the node exporter's textfile collector) and, when the
speed check ran, `speed_textfile`. Why a container: the golden file, the baked profile and its
tolerances are in the image, and so is prometheus_client; the host needs only Python's standard
library to place the files. Exit 0 when every check passed, 1 when one failed, 2 when the tick
could not judge.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from sglx_core.arg_types import non_negative, positive
from sglx_core.errors import SglxError
from sglx_core.gate.speed import DEFAULT_FRACTION
from sglx_core.gate.speed_record import SpeedRecord, settings_of
from sglx_core.gate.tools import MAX_OUTPUT_BYTES
from sglx_core.gate.tools.ecc import ECC_READS
from sglx_core.gate.tools.result import device_count
from sglx_core.profile import Profile
from sglx_core.report import result_of
from sglx_core.serving import hardware
from sglx_core.sizes import parse_engine_figure
from sglx_platform.image_profile import baked_profile
from sglx_runtime.golden_replay import DEFAULT_GOLDEN, DEFAULT_TIMEOUT_S, replay

HEALTH_TIMEOUT_S = 10.0
DEFAULT_SPEED_TIMEOUT_S = 300.0
# A timed run's fleet key: it judges no peers, so the key only names the record's origin.
TIMER_FLEET = "gate-timer"
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


def speed(
    url: str, host: str | None, floors: dict[str, Any], slos: dict[str, Any], timeout: float
) -> tuple[Verdict, float | None]:
    """The rollout's benchmark against the floors (no fleet: no median); the verdict and the
    output tok/s of its last measurement (None where it could not measure)."""
    from sglx_runtime import speed_gate

    started = time.monotonic()
    name = host or "this host"
    result = result_of(
        ("gate_tick",),
        lambda: speed_gate.gate(
            url=url, host=name, fleet=TIMER_FLEET, peers=b"", fraction=DEFAULT_FRACTION,
            site_floors=floors, site_slos=slos, timeout=timeout,
        ),
    )  # fmt: skip
    record = result.data.get("record") if isinstance(result.data, dict) else None
    tok_s = None
    if isinstance(record, dict):
        measured = SpeedRecord(name, TIMER_FLEET, str(record["measured_at"]), str(record["line"]))
        tok_s = measured.result(settings_of(baked_profile(), slos)).output_tok_s
    said = [f.message for f in result.findings] + [e.message for e in result.errors]
    if said:
        message = "; ".join(said)
    else:
        message = f"{tok_s:.1f} output tok/s, within the floors (a timed run judges no median)"
    seconds = time.monotonic() - started
    return Verdict("speed", result.exit_code == 0, message, seconds), tok_s


def speed_textfile(verdict: Verdict, finished: float, output_tok_s: float | None) -> str:
    """The speed check's series, in a textfile of their own: a timed run without it leaves them
    as the last run that measured wrote them."""
    registry = CollectorRegistry()
    Gauge(
        "sglx_gate_speed_passed",
        "1 when the timed speed check last passed (the profile's and the site's floors), else 0",
        registry=registry,
    ).set(int(verdict.passed))
    Gauge(
        "sglx_gate_speed_last_run_timestamp_seconds",
        "when the timer last ran the speed check (Unix time)",
        registry=registry,
    ).set(round(finished, 3))
    if output_tok_s is not None:
        Gauge(
            "sglx_gate_speed_output_tokens_per_second",
            "the output throughput the timed speed check last measured",
            registry=registry,
        ).set(round(output_tok_s, 3))
    return generate_latest(registry).decode()


def devices(profile: Profile) -> Verdict | str | None:
    """The vendor tool's ECC read of every device and its device count against the server's
    device probe; why it did not run where the container lacks the tool; None where the
    profile names no such tool (the cpu reference)."""
    vendor = profile.gate.vendor
    tools = [tool for tool in vendor.tools if tool in ECC_READS]
    if not tools:
        return None
    tool = tools[0]
    search = os.pathsep.join([os.environ.get("PATH", os.defpath), *vendor.search_path])
    path = shutil.which(tool, path=search)
    if path is None:
        return f"{tool} is not in the server's container: not run"
    read = ECC_READS[tool]
    started = time.monotonic()
    shown = " ".join((tool, *read.args))
    try:
        code, out = _bounded_run([path, *read.args], vendor.timeout_s)
        if code != 0:
            raise SglxError(f"`{shown}` exited {code}")
        readings = read.parse(out)
        try:
            present = hardware.detect(profile).count
        except SglxError:  # the probe finds no device of this arch: none is present
            present = 0
        source = "the devices the server's probe sees"
        results = [
            read.check(readings),
            device_count(tool, len(readings), present, source, read.unit),
        ]
    except (SglxError, OSError, subprocess.TimeoutExpired) as exc:
        said = exc.message if isinstance(exc, SglxError) else f"`{shown}`: {exc}"
        return Verdict("devices", False, said, time.monotonic() - started)
    findings = [finding for result in results for finding in result.findings]
    message = "; ".join(findings or [result.reason for result in results])
    return Verdict("devices", not findings, message, time.monotonic() - started)


def _bounded_run(argv: list[str], timeout: float) -> tuple[int, bytes]:
    """`argv`'s exit status and its standard output, cut one byte past the parsers' bound
    (so a larger one is refused by them); a run past `timeout` seconds is killed and raises
    TimeoutExpired."""
    deadline = time.monotonic() + timeout
    out = bytearray()
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) as proc:
        assert proc.stdout is not None
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(proc.stdout, selectors.EVENT_READ)
                while len(out) <= MAX_OUTPUT_BYTES:
                    left = deadline - time.monotonic()
                    if left <= 0 or not selector.select(left):
                        raise subprocess.TimeoutExpired(argv, timeout)
                    chunk = os.read(proc.stdout.fileno(), 1 << 16)
                    if not chunk:
                        break
                    out += chunk
            return proc.wait(timeout=max(deadline - time.monotonic(), 0.1)), bytes(out)
        finally:
            if proc.poll() is None:
                proc.kill()


def memory_used(usage: str) -> float | None:
    """The USED of the engine's "USED / LIMIT" in bytes, or None where it is not that (a
    stopped container's "--", nothing read, or a LIMIT of 0: no container's limit is 0, so
    the engine took no sample, and its 0 used is no measurement)."""
    used, slash, limit = usage.partition("/")
    if not slash or not parse_engine_figure(limit):
        return None
    return parse_engine_figure(used)


def memory(used: float | None, bound: float) -> Verdict:
    """The container's memory use under `bound`; a reading the host could not take is no
    failure (it would restart a healthy server), and says so."""
    if used is None or used < 0:
        return Verdict("memory", True, "not measured: the host read no memory use", 0.0)
    said = f"the container uses {used / 2**30:.2f} GiB, bound {bound / 2**30:.2f} GiB"
    if used >= bound:
        said += ": above it (memory that only grows: a restart frees it)"
    return Verdict("memory", used < bound, said, 0.0)


def textfile(
    verdicts: list[Verdict], finished: float, interval: int, memory_bytes: float | None = None
) -> str:
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
    if memory_bytes is not None and memory_bytes >= 0:
        Gauge(
            "sglx_server_memory_bytes",
            "the server's container's memory use as its engine reports it, at the last run",
            registry=registry,
        ).set(memory_bytes)
    for v in verdicts:
        passed.labels(v.check).set(int(v.passed))
        seconds.labels(v.check).set(round(v.seconds, 3))
    last.set(round(finished, 3))
    return generate_latest(registry).decode()


def tick(
    url: str,
    host: str | None,
    golden: Path,
    timeout: float,
    interval: int,
    memory_bytes: float | None = None,
    memory_max_bytes: float = 0.0,
    speed_limits: tuple[dict[str, Any], dict[str, Any]] | None = None,
    speed_timeout: float = DEFAULT_SPEED_TIMEOUT_S,
) -> dict[str, object]:
    """The checks' verdicts as the record and the series; `speed_limits` (the site's floors
    and SLOs) runs the speed check too, each benchmark within `speed_timeout` seconds."""
    verdicts = [health(url)]
    if verdicts[0].passed:
        verdicts.append(numerics(url, host, golden, timeout))
    else:
        verdicts.append(Verdict("numerics", False, "not run: the server is not healthy", 0.0))
    if memory_max_bytes > 0:
        verdicts.append(memory(memory_bytes, memory_max_bytes))
    device = devices(baked_profile())
    if isinstance(device, Verdict):
        verdicts.append(device)
    measured: tuple[Verdict, float | None] | None = None
    if speed_limits is not None and verdicts[0].passed:  # an unhealthy server: health says it
        measured = speed(url, host, *speed_limits, speed_timeout)
        verdicts.append(measured[0])
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
    if isinstance(device, str):  # named, not counted as a pass
        record["not_run"] = {"devices": device}
    cheap = [v for v in verdicts if v.check != "speed"]
    out: dict[str, object] = {
        "record": record,
        "textfile": textfile(cheap, finished, interval, memory_bytes),
    }
    if measured is not None:
        out["speed_textfile"] = speed_textfile(measured[0], finished, measured[1])
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglx_runtime.gate_tick",
        description="Run the serving gate's cheap checks against the served endpoint.",
    )
    parser.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--host", help="the host named in findings (default: this hostname)")
    parser.add_argument("--golden", type=Path, default=DEFAULT_GOLDEN, help="the golden file")
    parser.add_argument(
        "--timeout", type=positive("--timeout"), default=DEFAULT_TIMEOUT_S, help="per request, s"
    )
    parser.add_argument("--interval", type=int, default=900, help="the timer's period, s")
    parser.add_argument("--memory-usage", default="", help="docker stats' MemUsage, as read")
    parser.add_argument(
        "--memory-max-bytes",
        type=non_negative("--memory-max-bytes"),
        default=0.0,
        help="0: no memory check",
    )
    parser.add_argument("--speed", action="store_true", help="run the speed check too")
    parser.add_argument("--speed-floors", default="{}", help="the site's floors, a JSON object")
    parser.add_argument("--speed-slos", default="{}", help="the site's SLOs, a JSON object")
    parser.add_argument(
        "--speed-timeout",
        type=positive("--speed-timeout"),
        default=DEFAULT_SPEED_TIMEOUT_S,
        help="per benchmark, s",
    )
    args = parser.parse_args(argv)
    try:
        limits = None
        if args.speed:
            from sglx_runtime.speed_gate import json_object

            floors = json_object(args.speed_floors, "--speed-floors", '{"min_output_tok_s": 9}')
            limits = (floors, json_object(args.speed_slos, "--speed-slos", '{"tpot_ms": 150}'))
        out = tick(args.url.rstrip("/"), args.host, args.golden, args.timeout, args.interval,
                   memory_used(args.memory_usage[:200]), args.memory_max_bytes,
                   limits, args.speed_timeout)  # fmt: skip
    except Exception as exc:  # a tick that cannot judge says why, and the host records it
        print(f"sglx gate tick: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(out, sort_keys=True))
    record = out["record"]
    assert isinstance(record, dict)
    return 0 if record["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())

"""The serving gate's speed part on one host: sglang's bench_serving against this server, judged
against the hosts of its fleet that passed before it.

    python -m sglx_runtime.speed_gate --url http://127.0.0.1:PORT --host NAME --fleet KEY
        [--peers FILE|-] [--fraction F] [--floors JSON] [--timeout S] [--json]

It runs in the server's container (`docker exec`, as the golden replay does): the image's venv
holds sglang's bench_serving, the baked profile holds the benchmark's settings
(`gate.speed`), and the served model folder (GET /server_info's `model_path`) is the local
tokenizer bench_serving needs offline. The run is `sglx_core.gate.bench`'s: random token ids,
fixed lengths, one seed, so every host of a fleet does the same work.

The verdict is `sglx_core.gate.speed.judge` over this host's result and its peers': the
records other hosts of the fleet wrote when they passed (`--peers`: a JSON object of host
name -> the text of its record, a record being what this module prints under `data.record`). A
record of another fleet (another bundle or other server arguments) is not compared; one of
this fleet is read as the tool output it is, bounded and checked (`parse_result` against this
host's settings), and a record that fails that check stops the gate naming the peer: it is
never skipped. Only this host's checks decide the exit code; the table shows the fleet.

In a rollout the hosts pass one after the other: a fleet below three hosts has no median to be
an outlier of (the outlier check is skipped with that reason, the floors still hold), and every
later host is held against the median of itself and those before it. `sglx hosts check` judges
the whole fleet at once from the records.

A fresh measurement that fails is a suspicion: the host is measured again at once, and only a
host slow twice fails. A busy neighbour or a log rotation costs one more benchmark, not a
rollback. The result names both measurements (`data.measurements`).

An outlier is also confirmed beside a peer, since a fleet that slowed as a whole (a busy
switch, a storage scan on every host) makes the median stale, not the host slow. A result that
fails as an outlier names the peer to measure again (`data.confirm_with`: the host of its fleet
whose record is nearest the median). The caller measures that peer on its own host
(`--measure-only`, which prints a record and judges nothing) and then judges this host's last
measurement beside the peer's fresh one (`--confirm-with PEER`: both records in `--peers`,
nothing measured). The rollout (sglang_service's health gate) does both.

Exit codes: 0 passed, 1 findings (outlier, below a floor, failed requests), 2 the benchmark
could not run or a record is malformed: both fail the gate.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import urllib.parse
from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sglx_core.arg_types import fraction, positive
from sglx_core.errors import SglxError
from sglx_core.gate.bench import BenchSettings, bench_serving_argv, read_result_line
from sglx_core.gate.speed import DEFAULT_FRACTION, judge
from sglx_core.gate.speed_record import (
    SpeedRecord,
    fleet_key,
    floors_of,
    parse_record,
    settings_of,
)
from sglx_core.profile import Profile
from sglx_core.report import Result, render, result_of
from sglx_core.untrusted import parse_json, read_bounded
from sglx_platform.image_profile import baked_profile
from sglx_runtime.golden_replay import server_info

COMMAND = ("speed_gate",)
MAX_PEERS_BYTES = 16 << 20
"""The peers' records on stdin: a record is a few KiB, so this is room for thousands."""
MAX_OUTPUT_QUOTED = 2000
"""The tail of bench_serving's output quoted when it fails."""


def run_bench(settings: BenchSettings, url: str, model_path: str, timeout: float) -> str:
    """bench_serving's result line of one run against `url` (its JSONL holds just this run)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        raise SglxError(
            f"--url {url!r} is not http://HOST:PORT",
            hint="give the server's base URL, e.g. http://127.0.0.1:30000",
            code="usage",
        )
    with tempfile.TemporaryDirectory(prefix="sglx-speed-") as folder:
        output = Path(folder) / "bench.jsonl"
        argv = bench_serving_argv(
            settings,
            host=parts.hostname,
            port=parts.port,
            tokenizer_path=model_path,
            output_file=str(output),
            python=sys.executable,
        )
        print(f"speed gate: {' '.join(argv[1:])}", file=sys.stderr, flush=True)
        try:
            done = subprocess.run(
                argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout, check=False
            )
        except subprocess.TimeoutExpired:
            raise SglxError(
                f"bench_serving ran longer than {timeout:g} s",
                hint="raise the gate's speed timeout, or lower gate.speed's num_prompts and "
                "lengths in the profile",
                code="environment",
            ) from None
        said = done.stdout.decode("utf-8", "replace")[-MAX_OUTPUT_QUOTED:].strip()
        if done.returncode != 0 or not output.is_file():
            raise SglxError(
                f"bench_serving exited {done.returncode} without a result: {said}",
                hint="read the output above and the server's log (journalctl -u the unit)",
                code="environment",
            )
        return read_result_line(output)


def read_records(raw: bytes) -> dict[str, SpeedRecord]:
    """The records in `raw` (a JSON object: host -> record text), each checked."""
    if len(raw) > MAX_PEERS_BYTES:
        raise SglxError(
            f"the peers' records are larger than {MAX_PEERS_BYTES >> 20} MiB",
            hint="pass the records of the fleet's hosts only",
            code="too_large",
        )
    peers = parse_json(raw or b"{}", path=Path("--peers"), what="peers' records")
    if not isinstance(peers, dict):
        raise SglxError(
            "the peers' records are not a JSON object of host -> record text",
            hint="pass {HOST: RECORD_TEXT, ...}",
            code="usage",
        )
    return {host: parse_record(host, text) for host, text in sorted(peers.items())}


def since_start(record: SpeedRecord | None, fleet: str, started_at: datetime | None) -> bool:
    """Whether `record` measured this very server: its fleet, after the server started."""
    if record is None or started_at is None or record.fleet != fleet:
        return False
    try:
        measured = datetime.fromisoformat(record.measured_at)
    except ValueError:
        return False
    return measured.tzinfo is not None and measured >= started_at


def parse_started_at(text: str) -> datetime:
    """Docker's State.StartedAt (RFC 3339, nanoseconds, `Z`) as an aware datetime."""
    stamp = text.strip().replace("Z", "+00:00")
    head, dot, rest = stamp.partition(".")
    if dot:  # Python reads at most microseconds
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        stamp = f"{head}.{digits[:6]}{rest[len(digits) :]}"
    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        when = None
    if when is None or when.tzinfo is None:
        raise SglxError(
            f"--started-at {text!r} is not an RFC 3339 time with a zone",
            hint="pass docker inspect's State.StartedAt",
            code="usage",
        )
    return when


def _judged(
    results: Mapping[str, Any], host: str, fleet: str, fraction: float, floors: Any
) -> tuple[Result, bool]:
    """`host`'s verdict among `results` (one fleet): the fleet's report with this host's
    findings only, and whether it passed. The one judgement the gate and its confirmation
    make."""
    report = judge(results, fraction=fraction, fleet=dict.fromkeys(results, fleet), floors=floors)
    verdict = next(v for v in report.verdicts if v.host == host)
    full = report.result(COMMAND)
    mine = tuple(f for f in full.findings if f.message.startswith(f"{host}:"))
    return replace(full, findings=mine), verdict.passed


def confirm_peer(judged: Result, host: str, others: Mapping[str, Any]) -> str | None:
    """The peer to measure again when `host` failed as an outlier: the fleet host whose output
    tok/s is nearest the median (ties by name); None for a failure that is no outlier."""
    report = judged.data
    verdicts = [h for h in report.get("hosts", []) if h.get("host") == host]
    failed = {c["name"] for v in verdicts for c in v["checks"] if c["outcome"] == "failed"}
    median = verdicts[0].get("median_output_tok_s") if verdicts else None
    if "outlier" not in failed or median is None or not others:
        return None
    return min(sorted(others), key=lambda peer: abs(others[peer].output_tok_s - median))


def gate(
    *,
    url: str,
    host: str,
    fleet: str,
    peers: bytes,
    fraction: float,
    site_floors: Mapping[str, Any],
    timeout: float,
    site_slos: Mapping[str, Any] | None = None,
    started_at: datetime | None = None,
    profile: Profile | None = None,
) -> Result:
    """Benchmark this host and judge it among its fleet's records; say so (the record is in the
    data). A record that already measured this server since it started is judged first: if it
    still passes, nothing is measured; if it no longer does (a faster peer came since, or it was
    taken under a passing load), the server is measured again and that run decides."""
    profile = profile or baked_profile()
    settings = settings_of(profile, site_slos)
    floors = floors_of(profile, site_floors)
    records = read_records(peers)
    own = records.pop(host, None)
    others = {h: r.result(settings) for h, r in records.items() if r.fleet == fleet}

    def verdict_of(record: SpeedRecord) -> tuple[Result, bool]:
        return _judged({**others, host: record.result(settings)}, host, fleet, fraction, floors)

    lines: list[str] = []
    if own is not None and since_start(own, fleet, started_at):
        judged, passed = verdict_of(own)
        if passed:
            lines.append(
                f"{host}: measured at {own.measured_at}, since this server started: its record "
                "is judged again, not measured again"
            )
            return _result(judged, own, passed=True, measured=False, lines=lines)
        lines.append(
            f"{host}: its record of {own.measured_at} no longer passes beside its fleet: "
            "measured again"
        )
    first = _measure(settings, url, host, fleet, timeout)
    judged, passed = verdict_of(first)
    if passed:
        return _result(judged, first, passed=True, measured=True, lines=lines)
    lines.append(
        f"{host}: {first.result(settings).output_tok_s:.1f} output tok/s fails "
        f"({'; '.join(f.message for f in judged.findings)}): measured again before it counts"
    )
    again = _measure(settings, url, host, fleet, timeout)
    judged, passed = verdict_of(again)
    twice = (
        f"measured twice: {first.result(settings).output_tok_s:.1f}, then "
        f"{again.result(settings).output_tok_s:.1f} output tok/s"
    )
    lines.append(f"{host}: {twice}: {'passes' if passed else 'slow twice, it fails'}")
    findings = tuple(replace(f, message=f"{f.message} ({twice})") for f in judged.findings)
    peer = None if passed else confirm_peer(judged, host, others)
    if peer is not None:
        lines.append(f"{host}: an outlier: {peer}, nearest the fleet median, is measured again")
    return _result(
        replace(judged, findings=findings),
        again,
        passed=passed,
        measured=True,
        lines=lines,
        earlier=first,
        confirm_with=peer,
    )


def confirm(
    *,
    host: str,
    peer: str,
    fleet: str,
    peers: bytes,
    fraction: float,
    site_floors: Mapping[str, Any],
    site_slos: Mapping[str, Any] | None = None,
    profile: Profile | None = None,
) -> Result:
    """Judge `host`'s last measurement (its record in `peers`) beside `peer`'s fresh one (also
    in `peers`) and the rest of the fleet's records; nothing is measured. Passes when the
    outlier was the fleet's stale median, fails naming the peer's new figure when it holds."""
    profile = profile or baked_profile()
    settings = settings_of(profile, site_slos)
    records = read_records(peers)
    for name, what in ((host, "this host's last measurement"), (peer, "the peer's new one")):
        if name not in records or records[name].fleet != fleet:
            raise SglxError(
                f"--confirm-with: --peers holds no record of {name} in this fleet ({what})",
                hint="pass this host's last record and the peer's fresh one (--measure-only)",
                code="usage",
            )
    results = {h: r.result(settings) for h, r in records.items() if r.fleet == fleet}
    judged, passed = _judged(results, host, fleet, fraction, floors_of(profile, site_floors))
    beside = f"{peer} measured again beside it: {results[peer].output_tok_s:.1f} output tok/s"
    mine = tuple(replace(f, message=f"{f.message} ({beside})") for f in judged.findings)
    said = "still an outlier, it fails" if not passed else "passes: the fleet had slowed"
    return _result(
        replace(judged, findings=mine),
        records[host],
        passed=passed,
        measured=False,
        lines=[f"{host}: {beside}: {said}"],
    )


def measure_only(
    *, url: str, host: str, fleet: str, timeout: float, site_slos: Mapping[str, Any] | None = None
) -> Result:
    """One measurement of this server as a record (`data.record`), judged by nothing: the peer's
    side of a confirmation (with the site's SLOs, as the suspect's gate ran)."""
    settings = settings_of(baked_profile(), site_slos)
    record = _measure(settings, url, host, fleet, timeout)
    tok_s = record.result(settings).output_tok_s
    return Result(
        COMMAND,
        data={"passed": True, "measured": True, "record": record.to_json()},
        lines=(f"{host}: measured {tok_s:.1f} output tok/s (a confirmation: not judged)",),
    )


def _result(
    judged: Result,
    record: SpeedRecord,
    *,
    passed: bool,
    measured: bool,
    lines: list[str],
    earlier: SpeedRecord | None = None,
    confirm_with: str | None = None,
) -> Result:
    return replace(
        judged,
        data={
            "passed": passed,
            "measured": measured,
            "record": record.to_json(),
            "measurements": [r.to_json() for r in (earlier, record) if r is not None],
            "confirm_with": confirm_with,
            "report": judged.data,
        },
        lines=tuple(lines),
    )


def _measure(
    settings: BenchSettings, url: str, host: str, fleet: str, timeout: float
) -> SpeedRecord:
    info = server_info(url)
    model_path = info.get("tokenizer_path") or info.get("model_path")
    if not isinstance(model_path, str) or not model_path:
        raise SglxError(
            f"GET {url}/server_info names no model_path",
            hint="is this an sglang server?",
            code="environment",
        )
    line = run_bench(settings, url, model_path, timeout)
    return SpeedRecord(host, fleet, datetime.now(UTC).isoformat(timespec="seconds"), line)


def json_object(text: str, flag: str, example: str) -> dict[str, Any]:
    """A flag's JSON object (floors, SLOs), read as the untrusted text it is."""
    value = parse_json(text, path=Path(flag), what=flag)
    if not isinstance(value, dict):
        raise SglxError(f"{flag} is not a JSON object", hint=f"give e.g. {example}", code="usage")
    return value


def _server_args(text: str) -> list[str]:
    words = parse_json(text, path=Path("--server-args"), what="server arguments")
    if not isinstance(words, list) or not all(isinstance(w, str) for w in words):
        raise SglxError(
            "--server-args is not a JSON list of strings",
            hint="pass docker inspect's .Args of the server's container",
            code="usage",
        )
    return words


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sglx_runtime.speed_gate",
        description="Benchmark this server with sglang's bench_serving (the profile's "
        "gate.speed) and judge it against its fleet's records.",
        epilog="exit codes: 0 passed, 1 findings (outlier, floor, failed requests), 2 the "
        "benchmark could not run or a record is malformed",
    )
    parser.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:30000")
    parser.add_argument("--host", required=True, help="this host's name in the fleet")
    parser.add_argument(
        "--image", help="the image id the server's container runs (docker inspect's .Image)"
    )
    parser.add_argument(
        "--server-args",
        metavar="JSON",
        help="the container's server arguments as a JSON list (docker inspect's .Args); with "
        "--image they make the fleet key",
    )
    parser.add_argument("--fleet", help="the fleet key itself, instead of --image/--server-args")
    parser.add_argument(
        "--peers", help="JSON object of host -> the text of its record; - reads stdin"
    )
    parser.add_argument(
        "--fraction",
        type=fraction("--fraction"),
        default=DEFAULT_FRACTION,
        help=f"outlier below this fraction of the fleet median (default {DEFAULT_FRACTION})",
    )
    parser.add_argument("--floors", default="{}", help="site floors as a JSON object")
    parser.add_argument(
        "--slos", default="{}", help="site goodput SLOs as a JSON object (ttft_ms, tpot_ms)"
    )
    parser.add_argument(
        "--timeout", type=positive("--timeout"), default=600.0, help="seconds for the benchmark"
    )
    parser.add_argument(
        "--started-at",
        help="when the server started (docker inspect's State.StartedAt): a record of this "
        "fleet measured since then is judged again instead of measured again",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--measure-only",
        action="store_true",
        help="measure this server once and print its record, judging nothing (a peer's part "
        "of a confirmation)",
    )
    mode.add_argument(
        "--confirm-with",
        metavar="PEER",
        help="measure nothing: judge this host's record in --peers beside PEER's fresh one",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON envelope")
    args = parser.parse_args(argv)
    if not args.fleet and not (args.image and args.server_args is not None):
        parser.error("give --image and --server-args (or --fleet): they say which hosts compare")

    def run() -> Result:
        floors = json_object(args.floors, "--floors", '{"min_output_tok_s": 900}')
        slos = json_object(args.slos, "--slos", '{"ttft_ms": 60000, "tpot_ms": 150}')
        fleet = args.fleet or fleet_key(args.image, _server_args(args.server_args))
        if args.measure_only:
            return measure_only(
                url=args.url, host=args.host, fleet=fleet, timeout=args.timeout, site_slos=slos
            )
        peers = b""
        if args.peers == "-":
            peers = sys.stdin.buffer.read(MAX_PEERS_BYTES + 1)
        elif args.peers:
            peers = read_bounded(Path(args.peers), what="peers' records", max_bytes=MAX_PEERS_BYTES)
        if args.confirm_with:
            return confirm(
                host=args.host,
                peer=args.confirm_with,
                fleet=fleet,
                peers=peers,
                fraction=args.fraction,
                site_floors=floors,
                site_slos=slos,
            )
        return gate(
            url=args.url,
            host=args.host,
            fleet=fleet,
            peers=peers,
            fraction=args.fraction,
            site_floors=floors,
            site_slos=slos,
            timeout=args.timeout,
            started_at=parse_started_at(args.started_at) if args.started_at else None,
        )

    return render(result_of(COMMAND, run), as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())

"""`sglx trace`: read a server's profiler traces (sglx_core/comm_share.py).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from sglx.cli_shared import EPILOG, Subparsers
from sglx_core import comm_share
from sglx_core.output_files import atomic_write_text, check_output_file
from sglx_core.profile import load_profile
from sglx_core.report import Finding, Result, Table


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
    group = sub.add_parser(
        "trace",
        help="read a server's torch-profiler traces (sglang's /start_profile)",
        description="Judge what a profiled server spent its steps on "
        "(docs/reference/profiling.md).",
        epilog=EPILOG,
    )
    verbs = group.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "comm-share",
        parents=[common, arch_parent],
        help="the share of the steps' time spent in collectives, per rank's trace",
        description="For each trace (one per rank, *.trace.json.gz): the time of the collective "
        "library's kernels over the time any kernel ran (the host's ops where the trace has no "
        "kernels). Above the profile's gate.comm_share.max_share (30%, seed S0-36) it is a "
        "finding (exit 1) whose hint names the profile's fixes.",
    )
    p.add_argument("traces", type=Path, nargs="+", metavar="TRACE", help="trace files")
    p.add_argument(
        "--textfile",
        type=Path,
        metavar="FILE",
        help="also write the highest share and the profile's bound as Prometheus series, for "
        "the node exporter's textfile collector of the host that served (its folder, "
        "e.g. /var/lib/prometheus/node-exporter/sglx_comm_share.prom): the SglxCommShareHigh "
        "alert reads them",
    )
    p.set_defaults(func=_cmd_comm_share)


def comm_share_series(shares: list[comm_share.Share], max_share: float, measured: float) -> str:
    """The measurement as Prometheus series (no labels: one measurement per host, so the
    alert compares two series of one target): the highest rank's share, the bound, when."""
    from prometheus_client import CollectorRegistry, Gauge, generate_latest  # only when asked

    registry = CollectorRegistry()
    for name, text, value in (
        ("sglx_comm_share_ratio", "the highest share of a rank's busy time in collectives, "
         "in the last traces read by sglx trace comm-share", max(s.share for s in shares)),
        ("sglx_comm_share_max_ratio", "the profile's bound on that share "
         "(gate.comm_share.max_share, seed S0-36)", max_share),
        ("sglx_comm_share_measured_timestamp_seconds", "when those traces were read "
         "(Unix time)", measured),
    ):  # fmt: skip
        Gauge(name, text, registry=registry).set(round(value, 6))
    return generate_latest(registry).decode()


def _cmd_comm_share(args: argparse.Namespace) -> Result:
    if args.textfile is not None:
        check_output_file(args.textfile, label="--textfile")
    rules = load_profile(args.arch).gate.comm_share
    shares = [comm_share.measure(path, rules) for path in args.traces]
    if args.textfile is not None:  # the node exporter reads it as its own user
        series = comm_share_series(shares, rules.max_share, time.time())
        atomic_write_text(args.textfile, series, label="--textfile", mode=0o644)
    findings = tuple(
        Finding(
            "comm_share",
            f"{s.trace}: collectives take {s.share:.0%} of the {s.side}'s busy time "
            f"({s.comm_us / 1000:.1f} of {s.busy_us / 1000:.1f} ms), above "
            f"{rules.max_share:.0%}",
            hint=comm_share.hint(rules),
        )
        for s in comm_share.above(shares, rules)
    )
    rows = tuple(
        (
            s.trace,
            s.side,
            f"{s.comm_us / 1000:.1f}",
            f"{s.busy_us / 1000:.1f}",
            f"{s.share:.1%}",
            ", ".join(name for name, _ in s.top[:2]) or "-",
        )
        for s in shares
    )
    return Result(
        command=("trace", "comm-share"),
        data={"max_share": rules.max_share, "traces": [s.to_json() for s in shares]},
        tables=(Table(("trace", "side", "comm ms", "busy ms", "share", "collectives"), rows),),
        findings=findings,
        lines=() if findings else (f"every trace is at or below {rules.max_share:.0%}",),
    )

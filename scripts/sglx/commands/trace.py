"""`sglx trace`: read a server's profiler traces (sglx_core/comm_share.py).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sglx.cli_shared import EPILOG, Subparsers
from sglx_core import comm_share
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
    p.set_defaults(func=_cmd_comm_share)


def _cmd_comm_share(args: argparse.Namespace) -> Result:
    rules = load_profile(args.arch).gate.comm_share
    shares = [comm_share.measure(path, rules) for path in args.traces]
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

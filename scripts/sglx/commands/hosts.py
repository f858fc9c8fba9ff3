"""`sglx hosts`: the host checks over an inventory (the parser and its handler).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sglx.cli_shared import EPILOG, Subparsers, workers
from sglx_core.report import Result


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
    hosts = sub.add_parser(
        "hosts",
        help="check hosts before (preflight) and after (acceptance) a rollout",
        description="testinfra host checks (hostchecks) over the inventory the playbooks use. "
        "Reference: docs/reference/hosts.md.",
        epilog=EPILOG,
    )
    verbs = hosts.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "check",
        parents=[common],
        help="run the host checks of one mode on an inventory's hosts",
        description="preflight: device nodes, groups, kernel command line, sysctls, engine, "
        "disk, driver floors and sglx-preflight in the image. acceptance: all of preflight, "
        "plus the bundle's image, the service, the running server's devices and environment, "
        "a completion, and the same configuration on every host of a group. Exit 0 all "
        "passed (pending reboots included), 1 a check failed, 2 the checks could not run.",
    )
    p.add_argument("-i", "--inventory", type=Path, required=True, help="Ansible inventory")
    p.add_argument("--limit", default="sglx", help="group or host pattern (default: sglx)")
    p.add_argument("--mode", choices=("preflight", "acceptance"), default="preflight")
    p.add_argument("--arch", help="arch profile (default: each host's sglx_arch)")
    p.add_argument("--bundle", type=Path, help="bundle folder (its size and digest)")
    p.add_argument("--junitxml", type=Path, metavar="FILE", help="also write the JUnit report")
    p.add_argument("--workers", type=workers, help="parallel workers (default: one per host, <=16)")
    p.add_argument(
        "--no-sudo", dest="sudo", action="store_false", help="run as the SSH user (already root)"
    )
    p.set_defaults(func=_cmd_hosts_check)


def _cmd_hosts_check(args: argparse.Namespace) -> Result:
    from sglx.hosts.check import CheckOptions, check_hosts
    from sglx.progress import Progress

    options = CheckOptions(
        args.inventory,
        args.limit,
        args.mode,
        args.arch,
        args.bundle,
        args.junitxml,
        args.workers,
        args.sudo,
    )
    return check_hosts(options, Progress("hosts check", quiet=args.quiet or args.json))

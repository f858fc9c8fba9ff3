"""`sglx wheels`: lock, fetch and verify the frozen wheels of an arch (the parser and its
handlers).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sglx.cli_shared import EPILOG, Subparsers
from sglx_core.errors import SglxError
from sglx_core.report import Result


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
    wheels = sub.add_parser(
        "wheels",
        help="lock, fetch and verify the frozen wheels of an arch",
        description="bundles/locks/<arch>.txt pins every wheel an image installs on top of its "
        "base, with sha256 hashes, resolved from the profile's python section for the image's "
        "Python and platform. Images install from a wheelhouse with --no-index --require-hashes.",
        epilog=EPILOG,
    )
    verbs = wheels.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser(
        "lock",
        parents=[common, arch_parent],
        help="resolve the profile's requirements into bundles/locks/<arch>.txt",
        description="Resolve python.requirements with pip's resolver for the image's Python and "
        "glibc (never this machine's), leave out what the base provides, and write the lock "
        "with hashes. The lock records the index cutoff it was resolved with "
        "(--uploaded-prior-to, default now), so --check, which resolves again with that cutoff "
        "and compares, gives the same answer on any later day (exit 1 when stale); --drift "
        "lists what today's index would change, as information.",
    )
    p.add_argument(
        "--find-links",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="extra wheel folder (e.g. the sglang wheel built from source)",
    )
    p.add_argument("--check", action="store_true", help="compare with the committed lock only")
    p.add_argument(
        "--uploaded-prior-to",
        metavar="TIME",
        help="resolve from what the index held before TIME (ISO 8601, UTC; default: now, or "
        "with --check the lock's own cutoff)",
    )
    p.add_argument(
        "--drift",
        action="store_true",
        help="with --check: also list what a resolution against today's index would change",
    )
    p.set_defaults(func=_cmd_wheels_lock)

    p = verbs.add_parser(
        "fetch",
        parents=[common, arch_parent],
        help="download the locked wheels into a wheelhouse (connected side)",
        description="Download every wheel of the lock with pip, hash-checked. Resumable: wheels "
        "already present with the right hash are kept, damaged ones fetched again.",
    )
    p.add_argument("--dest", type=Path, help="wheelhouse folder (default: wheelhouse/<arch>)")
    p.set_defaults(func=_cmd_wheels_fetch)

    p = verbs.add_parser(
        "verify",
        parents=[common, arch_parent],
        help="check a wheelhouse against the lock (exit 1 on a missing or tampered wheel)",
        description="Every locked wheel must be present with its sha256. Hashes already checked "
        "are remembered per user outside the wheelhouse ($SGLX_CACHE_DIR, $XDG_CACHE_HOME/sglx "
        "or ~/.cache/sglx), keyed on inode, size, mtime and ctime and HMAC-signed; a wheel that "
        "changed in any way is hashed again.",
    )
    p.add_argument("--wheelhouse", type=Path, help="folder (default: wheelhouse/<arch>)")
    p.add_argument(
        "--full", action="store_true", help="re-hash every wheel, trusting no cached result"
    )
    p.set_defaults(func=_cmd_wheels_verify)


def _cmd_wheels_lock(args: argparse.Namespace) -> Result:
    from sglx.progress import Progress
    from sglx.wheels.steps import lock
    from sglx_core.profile import load_profile

    if args.drift and not args.check:
        raise SglxError(
            "--drift needs --check", hint="sglx wheels lock --check --drift", code="usage"
        )
    return lock(
        load_profile(args.arch),
        args.find_links,
        args.check,
        Progress("wheels lock", quiet=args.quiet),
        uploaded_prior_to=args.uploaded_prior_to,
        drift=args.drift,
    )


def _cmd_wheels_fetch(args: argparse.Namespace) -> Result:
    from sglx.progress import Progress
    from sglx.wheels.steps import fetch
    from sglx_core.profile import load_profile

    return fetch(load_profile(args.arch), args.dest, Progress("wheels fetch", quiet=args.quiet))


def _cmd_wheels_verify(args: argparse.Namespace) -> Result:
    from sglx.progress import Progress
    from sglx.wheels.steps import verify
    from sglx_core.profile import load_profile

    return verify(
        load_profile(args.arch),
        args.wheelhouse,
        Progress("wheels verify", quiet=args.quiet),
        full=args.full,
    )

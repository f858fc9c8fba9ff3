"""`sglx base`: make or bring in the base image of an arch (the parser and its handlers).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sglx.cli_shared import EPILOG, Subparsers
from sglx_core.report import Result


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
    base = sub.add_parser(
        "base",
        help="make or bring in the base image of an arch",
        description="Base images come from no registry: the cpu base is debootstrapped from "
        "Debian and imported; vendor bases are loaded from a tar carried into the site.",
        epilog=EPILOG,
    )
    verbs = base.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "build",
        parents=[common, arch_parent],
        help="build a base from Debian with debootstrap",
        description="Debootstrap the profile's Debian suite and packages into a scratch folder "
        "and import it as the profile's base.ref (or --tag). Needs root, debootstrap and a "
        "Docker engine.",
    )
    p.add_argument("--tag", help="image tag (default: the profile's base.ref)")
    p.add_argument("--mirror", help="Debian mirror URL (default: the profile's base.build.mirror)")
    p.set_defaults(func=_cmd_base_build)

    p = verbs.add_parser(
        "ensure",
        parents=[common, arch_parent],
        help="make sure the arch's base is in the engine (build it if sglx builds it)",
        description="Nothing to do when the base is present; the cpu base is built (as by "
        "`base build`); a vendor base that is missing is an error saying how to get it.",
    )
    p.add_argument("--mirror", help="Debian mirror URL for a base sglx builds")
    p.set_defaults(func=_cmd_base_ensure)

    p = verbs.add_parser(
        "load",
        parents=[common],
        help="load a vendor base carried in as a tar, checksum verified",
        description="Load a base image from a `docker save` archive (or an OCI layout tar) made "
        "on a connected machine. The sha256 comes from --sha256 or FILE.sha256 next to it "
        "(sha256sum format); a mismatch loads nothing. Its members, manifest (or OCI index) "
        "and, with --arch, the pinned digest are checked before the engine sees it, and the "
        "image is tagged only once the engine's id is verified.",
    )
    p.add_argument("file", type=Path, metavar="FILE", help="the image archive")
    p.add_argument("--sha256", help="expected sha256 of FILE (default: read FILE.sha256)")
    p.add_argument("--tag", help="tag the loaded image (default: the tag in the archive)")
    p.add_argument("--arch", help="check the loaded image against this arch's base.digest")
    p.set_defaults(func=_cmd_base_load)


def _cmd_base_ensure(args: argparse.Namespace) -> Result:
    from sglx.base import ensure_base
    from sglx.progress import Progress
    from sglx_core.profile import load_profile

    return ensure_base(
        load_profile(args.arch), mirror=args.mirror, progress=Progress("base", quiet=args.quiet)
    )


def _cmd_base_load(args: argparse.Namespace) -> Result:
    from sglx.base import load_base
    from sglx.progress import Progress
    from sglx_core.profile import load_profile

    return load_base(
        args.file,
        sha256=args.sha256,
        tag=args.tag,
        profile=load_profile(args.arch) if args.arch else None,
        progress=Progress("base load", quiet=args.quiet),
    )


def _cmd_base_build(args: argparse.Namespace) -> Result:
    from sglx.base import build_base
    from sglx.progress import Progress
    from sglx_core.profile import load_profile

    return build_base(
        load_profile(args.arch),
        tag=args.tag,
        mirror=args.mirror,
        progress=Progress("base build", quiet=args.quiet),
    )

"""`sglx scan`: the parser and the handler that picks one way in (PATH, --image, --archive or
--bundle) and calls its step in `command`.

Registered by `sglx.cli`, which owns the shared options and the error envelope. `--bundle DIR`
is read through the reader the bundle group hands over (`read_bundles_with`): a bundle is a
generic chunked archive to the scan, and its layout is `sglx.bundle`'s (no import of it here).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sglx.cli_shared import EPILOG, MAX_WORKERS, Subparsers, workers
from sglx_core.errors import SglxError
from sglx_core.report import Result

if TYPE_CHECKING:
    from sglx.scan.archive import ChunkedArchive
    from sglx.scan.rules import Rules

BundleReader = Callable[[Path], "tuple[ChunkedArchive, Rules]"]
"""A bundle folder -> the chunks and wheels it holds, as the scan reads them, and the rules of
the profile it was made with (used unless --arch names another)."""


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
    p = sub.add_parser(
        "scan",
        parents=[common],
        help="resolve every ELF dependency of a tree, an image or a bundle, without running it",
        description="Read every ELF file's DT_NEEDED, RPATH and RUNPATH (pyelftools) and "
        "resolve them the way glibc's loader would inside the scanned root: its ld.so.conf, "
        "system directories and LD_LIBRARY_PATH. With --arch, also check the profile's scan "
        "rules (required, host-provided, forbidden and dlopen'ed libraries, data files). "
        "Nothing scanned is executed. Exit 1 on any unresolved dependency or broken rule. "
        "Reference: docs/reference/scan.md.",
        epilog=EPILOG,
    )
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="a folder scanned as a root (an unpacked image, a venv); with --root, files or "
        "folders inside that root",
    )
    p.add_argument("--image", metavar="REF", help="an image of the local engine (never started)")
    p.add_argument(
        "--archive",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="a file written by `docker save`, or its pieces in order (e.g. image.tar.*): read "
        "as one stream, never loaded into the engine",
    )
    p.add_argument(
        "--bundle",
        type=Path,
        metavar="DIR",
        help="a bundle folder written by `sglx bundle create` (its image chunks and wheelhouse)",
    )
    p.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="resolve PATHs against this root instead (e.g. --root / for this machine)",
    )
    p.add_argument(
        "--arch",
        help="check this arch profile's scan rules (default: none, only unresolved dependencies; "
        "for --bundle, the bundle's own profile, meta/arch.yaml)",
    )
    p.add_argument(
        "--jobs",
        type=workers,
        metavar="N",
        help=f"processes reading ELF headers (default: the CPUs this process may use, at most "
        f"{MAX_WORKERS})",
    )
    p.set_defaults(func=_cmd_scan, bundle_reader=None)


def read_bundles_with(sub: Subparsers, reader: BundleReader) -> None:
    """Let `sglx scan --bundle DIR` read DIR through `reader` (the bundle group's): call it
    after `register`, so that the scan parser exists."""
    if "scan" not in sub.choices:
        raise RuntimeError("read_bundles_with: register the scan group first")
    sub.choices["scan"].set_defaults(bundle_reader=reader)


def _cmd_scan(args: argparse.Namespace) -> Result:
    from sglx.progress import Progress
    from sglx.scan.command import scan_image, scan_paths
    from sglx.scan.rules import Rules
    from sglx_core.util import default_jobs

    if args.root is not None and not args.paths:
        raise SglxError(
            "--root goes with PATHs", hint="e.g. `sglx scan --root / PATH`", code="usage"
        )
    given = [args.paths or None, args.image, args.archive, args.bundle]
    if sum(x is not None for x in given) != 1:
        raise SglxError(
            "give exactly one of PATH, --image REF, --archive FILE or --bundle DIR",
            hint="e.g. `sglx scan --image sglx/cpu:latest --arch cpu`",
            code="usage",
        )
    rules = Rules()
    if args.arch is not None:
        from sglx_core.profile import load_profile

        rules = Rules.from_profile(load_profile(args.arch))
    jobs = args.jobs or min(default_jobs(), MAX_WORKERS)
    progress = Progress("scan", quiet=args.quiet)
    if args.image is not None:
        return scan_image(args.image, rules=rules, jobs=jobs, progress=progress)
    if args.archive is not None:
        from sglx.scan.command import archive_files, scan_archive

        source = {"kind": "archive", "path": " ".join(map(str, args.archive))}
        spec = archive_files(args.archive)
        return scan_archive(spec, source, rules=rules, jobs=jobs, progress=progress)
    if args.bundle is not None:
        if args.bundle_reader is None:
            raise SglxError("--bundle is not available: no bundle group is registered")
        from sglx.scan.command import scan_archive

        spec, own_rules = args.bundle_reader(args.bundle)
        source = {"kind": "bundle", "path": str(args.bundle)}
        rules = rules if args.arch is not None else own_rules
        return scan_archive(spec, source, rules=rules, jobs=jobs, progress=progress)
    return scan_paths(args.paths, root=args.root, rules=rules, jobs=jobs, progress=progress)

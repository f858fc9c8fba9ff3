"""`sglx scan`: the parser and the handler that picks one way in (PATH, --image, --archive or
--bundle) and calls its step in `command`.

Registered by `sglx.cli`, which owns the shared options and the error envelope. `--bundle DIR`
is read through the reader the bundle group hands over (`read_bundles_with`): a bundle is a
generic chunked archive to the scan, and its layout is `sglx.bundle`'s (no import of it here).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from sglx.cli_shared import EPILOG, MAX_WORKERS, Subparsers, workers
from sglx_core.errors import SglxError
from sglx_core.report import Result

if TYPE_CHECKING:
    from sglx.sbom import ImageSbom
    from sglx.scan.archive import ChunkedArchive
    from sglx.scan.rules import Rules
    from sglx.wheels.lockfile import Lock


class ScanInput(NamedTuple):
    """What a bundle folder gives the scan: the chunks and wheels it holds, as the scan reads
    them, the rules of the profile it was made with (used unless --arch names another), and
    the image it carries as an SBOM names it (reference, id, labels)."""

    archive: ChunkedArchive
    rules: Rules
    ref: str
    image_id: str
    labels: dict[str, str]


BundleReader = Callable[[Path], ScanInput]


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
        "--sbom",
        type=Path,
        metavar="FILE",
        help="with --image or --bundle, also write the image's SBOM to FILE (CycloneDX 1.6 "
        "JSON: Debian packages, Python distributions, ELF files in no package, the weights; "
        "what `bundle create` puts in meta/sbom.cdx.json)",
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
    from sglx_core.processes import default_jobs

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
    if args.sbom is not None:
        if args.image is None and args.bundle is None:
            raise SglxError(
                "--sbom goes with --image REF or --bundle DIR",
                hint="an SBOM describes one image: e.g. `sglx scan --image sglx/cpu:latest "
                "--sbom sbom.cdx.json`",
                code="usage",
            )
        from sglx_core.output_files import check_output_file

        check_output_file(args.sbom, label="--sbom file")
    jobs = args.jobs or min(default_jobs(), MAX_WORKERS)
    progress = Progress("scan", quiet=args.quiet)
    if args.image is not None:
        sbom = _engine_sbom(args.image) if args.sbom is not None else None
        result = scan_image(args.image, rules=rules, jobs=jobs, progress=progress, inspect=sbom)
        return _with_sbom(result, sbom, args.sbom)
    if args.archive is not None:
        from sglx.scan.command import archive_files, scan_archive

        source = {"kind": "archive", "path": " ".join(map(str, args.archive))}
        spec = archive_files(args.archive)
        return scan_archive(spec, source, rules=rules, jobs=jobs, progress=progress)
    if args.bundle is not None:
        if args.bundle_reader is None:
            raise SglxError("--bundle is not available: no bundle group is registered")
        from sglx.scan.command import scan_archive

        given = args.bundle_reader(args.bundle)
        source = {"kind": "bundle", "path": str(args.bundle)}
        rules = rules if args.arch is not None else given.rules
        sbom = None
        if args.sbom is not None:
            from sglx.sbom import ImageSbom

            sbom = ImageSbom(given.ref, given.image_id, given.labels, _lock(given.rules))
        result = scan_archive(
            given.archive, source, rules=rules, jobs=jobs, progress=progress, inspect=sbom
        )
        return _with_sbom(result, sbom, args.sbom)
    return scan_paths(args.paths, root=args.root, rules=rules, jobs=jobs, progress=progress)


def _engine_sbom(ref: str) -> ImageSbom:
    from sglx.engine import docker_client
    from sglx.sbom import ImageSbom

    return ImageSbom.of_engine_image(docker_client(), ref)


def _lock(rules: Rules) -> Lock | None:
    from sglx.wheels.steps import lock_at_hand

    return lock_at_hand(rules.arch)


def _with_sbom(result: Result, sbom: ImageSbom | None, path: Path | None) -> Result:
    """`result`, with the SBOM written to `path` (whole or not at all) and named in its data."""
    if sbom is None or path is None:
        return result
    from sglx.sbom.document import summary
    from sglx_core.output_files import atomic_write_text

    text = sbom.text()
    if text is None:
        raise SglxError(
            "the scan found no image filesystem to describe, so no SBOM was written",
            hint="give --image REF or --bundle DIR of a full bundle",
            code="usage",
        )
    atomic_write_text(path, text, label="--sbom file")
    facts = summary(text)
    counts = ", ".join(f"{n} {kind}" for kind, n in sorted(facts["components"].items()))
    return replace(
        result,
        data={**result.data, "sbom": {"path": str(path), **facts}},
        lines=(*result.lines, f"SBOM (CycloneDX 1.6) written to {path}: {counts}"),
    )

"""What of a bundle the dependency scan reads, told to `sglx.scan` as a generic chunked archive.

The bundle knows its layout (docs/reference/bundle.md); the scan knows none. Here the manifest
is read and turned into a `ChunkedArchive`: the image chunks in the order bundle.json lists
them, the archive size they must add up to, and `wheelhouse/*.whl` (bundles made with
`--wheelhouse`) laid into the image's venv (`python.venv` of the bundle's arch). `sglx scan
--bundle`, `sglx bundle verify` and `sglx bundle create` (on the chunks it just wrote) all scan
through it, so the arrow runs one way: bundle -> scan.

The chunks' hashes are `sglx bundle verify`'s job; a scan only checks that they add up.
"""

from __future__ import annotations

from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.manifest import ImageRecord, parse
from sglx.bundle.verify import read_manifest_bytes
from sglx.progress import Progress
from sglx.scan.archive import DEFAULT_SITE, ChunkedArchive
from sglx.scan.command import scan_archive
from sglx.scan.rules import Rules
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile
from sglx_core.report import Result

FIX = "check the bundle with `sglx bundle verify` and re-copy what it names"


def bundle_archive(bundle: Path) -> ChunkedArchive:
    """The bundle folder's image chunks and wheelhouse, as the scan reads them."""
    if not bundle.is_dir():
        raise SglxError(
            f"bundle folder {bundle} does not exist or is not a folder",
            hint="pass a folder written by `sglx bundle create`",
            code="usage",
        )
    manifest = parse(read_manifest_bytes(bundle), str(bundle / layout.MANIFEST))
    wheels = tuple(sorted((bundle / layout.WHEELHOUSE).glob("*.whl")))
    return _archive(bundle, manifest.image, wheels, site_packages(manifest.arch) if wheels else "")


def written_archive(stage: Path, image: ImageRecord) -> ChunkedArchive:
    """The chunks `sglx bundle create` just wrote under `stage` (no wheels: the image alone)."""
    return _archive(stage, image, (), "")


def scan_bundle(bundle: Path, *, rules: Rules, jobs: int, progress: Progress) -> Result:
    """`sglx scan --bundle DIR`: the bundle's image archive and wheelhouse."""
    spec = bundle_archive(bundle)
    return scan_archive(
        spec, {"kind": "bundle", "path": str(bundle)}, rules=rules, jobs=jobs, progress=progress
    )


def site_packages(arch: str) -> str:
    """Where the image of `arch` keeps its venv's packages (python.venv and .version)."""
    try:
        python = load_profile(arch).python
    except SglxError:
        return DEFAULT_SITE
    return f"{python.venv}/lib/python{python.version}/site-packages"


def _archive(root: Path, image: ImageRecord, wheels: tuple[Path, ...], site: str) -> ChunkedArchive:
    return ChunkedArchive(
        archive=root / image.archive,
        chunks=tuple(root / chunk for chunk in image.chunks),
        size=image.size,
        wheels=wheels,
        site=site or DEFAULT_SITE,
        wheels_label=layout.WHEELHOUSE,
        fix=FIX,
    )

"""What of a bundle the dependency scan reads, told to `sglx.scan` as a generic chunked archive.

The bundle knows its layout (docs/reference/bundle.md); the scan knows none. Here the manifest
is read and turned into a `ChunkedArchive`: the image chunks in the order bundle.json lists
them, the archive size they must add up to, and `wheelhouse/*.whl` (bundles made with
`--wheelhouse`) laid into the image's venv (`python.venv` of the bundle's profile). `sglx scan
--bundle`, `sglx bundle verify` and `sglx bundle create` (on the chunks it just wrote) all scan
through it, so the arrow runs one way: bundle -> scan.

The rules a bundle is scanned by are its own profile's (meta/arch.yaml, the profile baked into
its image), never the checkout's: a bundle carried to another site is judged by what it was
built for. A bundle made before meta/arch.yaml existed falls back to the checkout's profile of
its arch.

The chunks' hashes are `sglx bundle verify`'s job; a scan only checks that they add up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.manifest import ImageRecord, parse
from sglx.bundle.verify import read_manifest_bytes
from sglx.progress import Progress
from sglx.scan.archive import DEFAULT_SITE, ChunkedArchive
from sglx.scan.command import scan_archive
from sglx.scan.rules import Rules
from sglx_core.errors import SglxError
from sglx_core.profile import Profile, load_profile, load_profile_file
from sglx_core.report import Result
from sglx_core.untrusted import read_json

FIX = "check the bundle with `sglx bundle verify` and re-copy what it names"


@dataclass(frozen=True)
class ScannedImage:
    """The image a scanned archive holds, as its SBOM names it."""

    ref: str
    image_id: str
    labels: dict[str, str]


def bundle_archive(bundle: Path) -> tuple[ChunkedArchive, Rules]:
    """The bundle folder's image chunks and wheelhouse, as the scan reads them, and the scan
    rules of the bundle's own profile."""
    archive, rules, _ = bundle_scan_input(bundle)
    return archive, rules


def bundle_scan_input(bundle: Path) -> tuple[ChunkedArchive, Rules, ScannedImage]:
    """`bundle_archive`'s, and the image the bundle carries as its SBOM names it: the
    reference and id of bundle.json, the labels of meta/labels.json."""
    if not bundle.is_dir():
        raise SglxError(
            f"bundle folder {bundle} does not exist or is not a folder",
            hint="pass a folder written by `sglx bundle create`",
            code="usage",
        )
    manifest = parse(read_manifest_bytes(bundle), str(bundle / layout.MANIFEST))
    if manifest.image.parent is not None:
        raise SglxError(
            f"{bundle} is a delta over the bundle {layout.shown(manifest.image.parent.bundle)}: "
            "its archive lacks that bundle's layers, so it cannot be scanned alone",
            hint="its report of the whole image, made at create, is meta/scan.json (`sglx bundle "
            "verify` shows its findings); or scan the image itself with `sglx scan --image REF`",
            code="usage",
        )
    if manifest.image.base is not None and manifest.image.from_base():
        raise SglxError(
            f"{bundle} leaves out the layers of its base image {manifest.image.base.ref}, so it "
            "cannot be scanned alone",
            hint="its report of the whole image, made at create, is meta/scan.json (`sglx bundle "
            "verify` shows its findings); or scan the image itself with `sglx scan --image REF`",
            code="usage",
        )
    profile = bundle_profile(bundle, manifest.arch)
    wheels = tuple(sorted((bundle / layout.WHEELHOUSE).glob("*.whl")))
    site = site_packages(profile) if wheels else ""
    image = ScannedImage(manifest.image.ref, manifest.image.id, _labels(bundle))
    return _archive(bundle, manifest.image, wheels, site), Rules.from_profile(profile), image


def _labels(bundle: Path) -> dict[str, str]:
    path = bundle / layout.LABELS
    if not path.is_file():
        return {}
    labels = read_json(path, what="image labels", max_bytes=layout.MAX_META_BYTES, hint=FIX)
    if not isinstance(labels, dict):
        raise SglxError(f"{path}: the image labels are not a JSON object", hint=FIX)
    return {str(k): str(v) for k, v in labels.items() if isinstance(v, str)}


def bundle_profile(bundle: Path, arch: str) -> Profile:
    """The profile the bundle was made with (meta/arch.yaml); the checkout's profile of `arch`
    for a bundle older than that file."""
    own = bundle / layout.PROFILE
    if not own.is_file():
        return load_profile(arch)
    profile = load_profile_file(own)
    if profile.arch != arch:
        raise SglxError(
            f"{own} is the profile of arch {profile.arch}, but bundle.json says {arch}",
            hint=FIX,
        )
    return profile


def written_archive(stage: Path, image: ImageRecord) -> ChunkedArchive:
    """The chunks `sglx bundle create` just wrote under `stage` (no wheels: the image alone)."""
    return _archive(stage, image, (), "")


def scan_bundle(bundle: Path, *, jobs: int, progress: Progress) -> Result:
    """The bundle's image archive and wheelhouse, scanned by its own profile's rules."""
    spec, rules = bundle_archive(bundle)
    return scan_archive(
        spec, {"kind": "bundle", "path": str(bundle)}, rules=rules, jobs=jobs, progress=progress
    )


def site_packages(profile: Profile) -> str:
    """Where the image keeps its venv's packages (the profile's python.venv and .version)."""
    python = profile.python
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

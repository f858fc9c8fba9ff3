"""What an unpacked image holds, as an SBOM lists it: its Debian packages (dpkg's status and file
lists), its Python distributions (each `*.dist-info`'s METADATA and RECORD) and the ELF files
the scan found that neither owns, with their SHA-256.

Everything here is read from a root the scan unpacked (sglx.scan.layers): an image's files are
untrusted input. Each file is read through RootFS (links followed inside the root only) and
bounded in size; the search for site-packages is bounded in depth; dpkg's status is parsed with
python-debian's deb822 reader and a distribution's METADATA with packaging's, not by hand.
"""

from __future__ import annotations

import csv
import io
import os
import posixpath
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from packaging.metadata import parse_email
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from sglx_core.errors import SglxError
from sglx_core.hashing import sha256_file
from sglx_core.rootfs import Kind, RootFS
from sglx_core.untrusted import read_bounded

DPKG_STATUS = "/var/lib/dpkg/status"
DPKG_INFO = "/var/lib/dpkg/info"
MAX_STATUS_BYTES = 64 << 20  # a full desktop's status is about 10 MB
MAX_LIST_BYTES = 32 << 20  # one package's file list
MAX_METADATA_BYTES = 4 << 20  # METADATA with a long description is some hundred KB
MAX_RECORD_BYTES = 64 << 20  # torch's RECORD is a few MB
MAX_OS_RELEASE_BYTES = 64 << 10
MAX_SEARCH_DEPTH = 8  # /opt/conda/envs/NAME/lib/python3.X/site-packages is 7 deep
PACKAGE_FOLDERS = frozenset({"site-packages", "dist-packages"})
_SKIP_TOP = frozenset({"proc", "sys", "dev", "tmp", "run"})


@dataclass(frozen=True)
class DebianPackage:
    name: str
    version: str
    architecture: str
    source: str  # the source package's name (the package's own when dpkg names none)
    source_version: str
    depends: tuple[str, ...]
    files: frozenset[str] = field(default=frozenset(), repr=False)


@dataclass(frozen=True)
class PythonDistribution:
    name: str  # as its METADATA spells it
    version: str
    location: str  # the site-packages folder (virtual path)
    requires: tuple[str, ...]  # canonical names of what it requires, markers aside
    files: frozenset[str] = field(default=frozenset(), repr=False)
    # Whether its RECORD names a file outside its own .dist-info: a metadata-only stand-in
    # holds no code, so no advisory against its code applies (sglx's own VEX says so).
    has_code: bool = True

    @property
    def key(self) -> str:
        return canonicalize_name(self.name)


@dataclass(frozen=True)
class LooseFile:
    """An ELF file no package or distribution claims: listed by path and hash."""

    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class OperatingSystem:
    """os-release's ID and VERSION_ID (`debian`, `12`): which Debian release's advisories apply."""

    id: str
    version_id: str


@dataclass(frozen=True)
class ImageContents:
    debian: tuple[DebianPackage, ...]
    python: tuple[PythonDistribution, ...]
    loose_elf: tuple[LooseFile, ...]
    os: OperatingSystem | None = None


def read_contents(rootfs: RootFS, elf_paths: Iterable[str]) -> ImageContents:
    """The contents of the unpacked root `rootfs`; `elf_paths` are the ELF files its scan
    found (canonical virtual paths)."""
    debian = tuple(debian_packages(rootfs))
    python = tuple(python_distributions(rootfs))
    owned: set[str] = set()
    for package in debian:
        owned |= package.files
    for distribution in python:
        owned |= distribution.files
    loose = []
    for path in sorted(set(elf_paths) - owned):
        real = Path(rootfs.host_path(path))
        if real.is_file() and not real.is_symlink():
            loose.append(LooseFile(path, sha256_file(real), real.stat().st_size))
    return ImageContents(debian, python, tuple(loose), operating_system(rootfs))


def operating_system(rootfs: RootFS) -> OperatingSystem | None:
    """/etc/os-release's ID and VERSION_ID (its fallback /usr/lib/os-release)."""
    for path in ("/etc/os-release", "/usr/lib/os-release"):
        raw = _read(rootfs, path, "os-release", MAX_OS_RELEASE_BYTES)
        if raw is None:
            continue
        fields = {}
        for line in raw.decode("utf-8", "replace").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key.strip()] = value.strip().strip("\"'")
        if fields.get("ID"):
            return OperatingSystem(fields["ID"], fields.get("VERSION_ID", ""))
    return None


def debian_packages(rootfs: RootFS) -> Iterator[DebianPackage]:
    """The packages dpkg's status says are installed, each with the files its list names
    (canonical paths: /lib/x86_64-linux-gnu/libc.so.6 is /usr/lib/... on a merged /usr)."""
    from debian.deb822 import Deb822

    raw = _read(rootfs, DPKG_STATUS, "dpkg status database", MAX_STATUS_BYTES)
    if raw is None:
        return
    canonical = _Canonical(rootfs)
    for paragraph in Deb822.iter_paragraphs(io.StringIO(raw.decode("utf-8", "replace"))):
        status = paragraph.get("Status", "").split()
        if status[-1:] != ["installed"] or "Package" not in paragraph:
            continue
        name, version = paragraph["Package"], paragraph.get("Version", "")
        arch = paragraph.get("Architecture", "")
        source, _, source_version = paragraph.get("Source", name).partition(" ")
        listed = _read(rootfs, f"{DPKG_INFO}/{name}:{arch}.list", "dpkg file list", MAX_LIST_BYTES)
        if listed is None:
            listed = _read(rootfs, f"{DPKG_INFO}/{name}.list", "dpkg file list", MAX_LIST_BYTES)
        files = canonical.paths((listed or b"").decode("utf-8", "replace").splitlines())
        yield DebianPackage(
            name=name,
            version=version,
            architecture=arch,
            source=source,
            source_version=source_version.strip("()") or version,
            depends=tuple(_debian_names(paragraph.get("Depends", ""))),
            files=files,
        )


def python_distributions(rootfs: RootFS) -> Iterator[PythonDistribution]:
    """Every `*.dist-info` in every site-packages or dist-packages folder of the root."""
    canonical = _Canonical(rootfs)
    for location in _package_folders(rootfs):
        listing = rootfs.listing(location) or {}
        for entry in sorted(listing):
            if not entry.endswith(".dist-info") or listing[entry] is not Kind.DIR:
                continue
            folder = f"{location}/{entry}"
            metadata = _read(rootfs, f"{folder}/METADATA", "METADATA", MAX_METADATA_BYTES)
            if metadata is None:
                continue
            fields, _ = parse_email(metadata)
            name, version = fields.get("name"), fields.get("version")
            if not name or not version:
                continue
            record = _read(rootfs, f"{folder}/RECORD", "RECORD", MAX_RECORD_BYTES) or b""
            files = canonical.paths(_record_paths(location, record))
            own = rootfs.resolve(folder) or folder
            yield PythonDistribution(
                name=name,
                version=version,
                location=location,
                requires=tuple(_requirement_names(fields.get("requires_dist") or [])),
                files=files,
                has_code=not record or any(not f.startswith(own + "/") for f in files),
            )


def _package_folders(rootfs: RootFS) -> list[str]:
    """The site-packages and dist-packages folders, found without following a link and
    without descending into them or below MAX_SEARCH_DEPTH."""
    found: list[str] = []
    top = Path(rootfs.host_path("/"))
    for here, folders, _ in os.walk(top, followlinks=False):
        relative = Path(here).relative_to(top)
        depth = len(relative.parts)
        if depth == 0:
            folders[:] = [f for f in folders if f not in _SKIP_TOP]
        kept = []
        for name in sorted(folders):
            if name in PACKAGE_FOLDERS:
                found.append("/" + (relative / name).as_posix())
            elif depth + 1 < MAX_SEARCH_DEPTH and not name.endswith((".dist-info", ".egg-info")):
                kept.append(name)
        folders[:] = kept
    return found


def _record_paths(location: str, record: bytes) -> Iterator[str]:
    reader = csv.reader(io.StringIO(record.decode("utf-8", "replace")))
    for row in reader:
        if row and row[0] and "\x00" not in row[0]:
            yield posixpath.normpath(posixpath.join(location, row[0]))


def _requirement_names(lines: Iterable[str]) -> Iterator[str]:
    for line in lines:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        marker = requirement.marker
        if marker is not None and "extra" in str(marker):
            continue  # needed only with an extra the image may not have asked for
        yield canonicalize_name(requirement.name)


def _debian_names(depends: str) -> Iterator[str]:
    for clause in depends.split(","):
        for alternative in clause.split("|"):
            name = alternative.strip().split(" ")[0].split(":")[0]
            if name:
                yield name


def _read(rootfs: RootFS, vpath: str, what: str, max_bytes: int) -> bytes | None:
    """The bytes of the regular file at `vpath` inside the root; None where there is none (or
    only the name the unpacking kept); an SglxError where it is larger than `max_bytes`."""
    canonical = rootfs.resolve(vpath)
    if canonical is None or rootfs.kind(canonical) is not Kind.FILE:
        return None
    real = Path(rootfs.host_path(canonical))
    if not real.exists():  # a placeholder: listed by the unpacking, not written
        return None
    try:
        return read_bounded(real, what=f"image's {what} {vpath}", max_bytes=max_bytes)
    except SglxError as exc:
        raise SglxError(
            f"{vpath} in the image: {exc.message}",
            hint="the image is damaged or not what its builder made; rebuild it",
            code=exc.code,
        ) from None


class _Canonical:
    """Paths as the scan names files: each folder resolved inside the root once."""

    def __init__(self, rootfs: RootFS) -> None:
        self._rootfs = rootfs
        self._folders: dict[str, str | None] = {}

    def paths(self, paths: Iterable[str]) -> frozenset[str]:
        out = set()
        for path in paths:
            if not path.startswith("/"):
                continue
            folder, name = posixpath.split(posixpath.normpath(path))
            if folder not in self._folders:
                self._folders[folder] = self._rootfs.resolve(folder)
            resolved = self._folders[folder]
            if resolved is not None and name:
                out.add(posixpath.join(resolved, name))
        return frozenset(out)

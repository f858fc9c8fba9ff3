"""An image archive carried into the site (``docker save`` output or an OCI layout tar), checked
before the engine sees any of it, and re-written for the engine from exactly what was checked.

Why: the archive comes from outside, so it is untrusted input. `inspect_archive` refuses
anything that is not a plain image archive (member paths that are absolute or hold ``..``,
links leading out of it, device files, duplicate names, too many members, JSON documents over
`MAX_JSON_BYTES`, manifests or indexes of the wrong shape, blobs whose size or digest disagree
with their descriptor) and predicts the image id (the sha256 of the config), so a pinned digest
is checked before anything is loaded, and the manifest digest Docker's containerd image store
names the image by instead (the manifest `index.json` names, which must lead to the same
config, or for Docker 20.10's archive the one that store writes on loading it).
`docker_archive_stream` then feeds the engine the checked members, each compared again with
what `inspect_archive` saw, and a manifest.json of sglx's own with no tags: the engine tags
nothing, and `sglx base load` tags only what it verified.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import os
import posixpath
import re
import tarfile
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TypeGuard

from sglx.image_identity import INDEX_TYPES, digest_of, imported_manifest, leads_to_config
from sglx.image_reference import check_reference
from sglx_core.digests import HEX64
from sglx_core.errors import SglxError
from sglx_core.hashing import CHUNK
from sglx_core.scratch import scratch_dir
from sglx_core.untrusted import parse_json

MAX_MEMBERS = 10_000
MAX_LAYERS = 500
MAX_JSON_BYTES = 1 << 20
MAX_SIDECAR_BYTES = 64 << 10
REF_NAME_ANNOTATIONS = ("io.containerd.image.name", "org.opencontainers.image.ref.name")

_HEX64 = re.compile(HEX64)
_DIGEST = re.compile(f"sha256:({HEX64})")
_SIDECAR_LINE = re.compile(r"([0-9a-fA-F]{64})(?:[ \t]+\*?(.+))?")

MAKE_IT = "make it on the connected side with `docker save -o FILE IMAGE`"
COPY_AGAIN = "it is damaged or cut short: copy it again from the connected side"
Kind = Literal["docker-archive", "oci-layout"]
# What identifies a member: normalised name, type, size and link target.
Signature = tuple[str, bytes, int, str]


@dataclass(frozen=True)
class ImageArchive:
    """A checked archive: what the engine will be given and what it should make of it."""

    path: Path
    kind: Kind
    image_id: str  # sha256:<digest of the config>, the id a classic engine gives the image
    manifest_digest: str | None  # the id the containerd image store gives it (None: unknown)
    config: str
    layers: tuple[str, ...]
    repo_tags: tuple[str, ...]  # the tags the archive asks for, each a valid reference
    members: tuple[Signature, ...]


def _invalid(archive: Path, problem: str, hint: str = MAKE_IT) -> SglxError:
    return SglxError(f"{archive}: {problem}", hint=hint, code="archive_invalid", path=str(archive))


# ---------------------------------------------------------------------------------------------
# the checksum to expect
# ---------------------------------------------------------------------------------------------


def expected_sha256(archive: Path, given: str | None) -> str:
    """The sha256 to expect: --sha256, else the one sidecar line (``sha256sum`` format) that
    names `archive` or names nothing."""
    if given is not None:
        value = given.strip().lower().removeprefix("sha256:")
        if not _HEX64.fullmatch(value):
            raise SglxError(
                f"--sha256 {given!r} is not a sha256 (64 hex digits)",
                hint=f"pass the first word of `sha256sum {archive.name}` on the connected side",
                code="usage",
            )
        return value
    sidecar = archive.with_name(archive.name + ".sha256")
    if not sidecar.is_file():
        raise SglxError(
            f"no checksum for {archive}: pass --sha256 HEX or put {sidecar.name} next to it",
            hint=f"on the connected side: sha256sum {archive.name} > {sidecar.name}",
            code="checksum_missing",
        )
    remake = f"remake it on the connected side: sha256sum {archive.name} > {sidecar.name}"
    if sidecar.stat().st_size > MAX_SIDECAR_BYTES:
        raise SglxError(
            f"{sidecar}: {sidecar.stat().st_size} bytes is too big for a sha256sum file "
            f"(at most {MAX_SIDECAR_BYTES})",
            hint=remake,
            code="checksum_invalid",
            path=str(sidecar),
        )
    try:
        text = sidecar.read_bytes().decode("ascii")
    except UnicodeDecodeError:
        raise SglxError(
            f"{sidecar}: not a sha256sum file (it holds binary data, not text)",
            hint=remake,
            code="checksum_invalid",
            path=str(sidecar),
        ) from None
    entries: list[tuple[str, str | None]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        match = _SIDECAR_LINE.fullmatch(line.strip())
        if match is None:
            raise SglxError(
                f"{sidecar}:{number}: not a sha256sum line (64 hex digits, then the file "
                f"name): {line[:80]!r}",
                hint=remake,
                code="checksum_invalid",
                path=str(sidecar),
            )
        entries.append((match.group(1).lower(), match.group(2)))
    if not entries:
        raise SglxError(
            f"{sidecar}: empty, it holds no sha256",
            hint=remake,
            code="checksum_invalid",
            path=str(sidecar),
        )
    if len(entries) == 1:
        return entries[0][0]
    for digest, name in entries:
        if name is not None and posixpath.basename(name.strip()) == archive.name:
            return digest
    raise SglxError(
        f"{sidecar}: {len(entries)} checksums and none for {archive.name}",
        hint=remake,
        code="checksum_invalid",
        path=str(sidecar),
    )


# ---------------------------------------------------------------------------------------------
# members
# ---------------------------------------------------------------------------------------------


def _normal(name: str) -> str:
    """A member name without leading "./" and trailing "/" ("" for the archive's root)."""
    while name.startswith("./"):
        name = name[2:]
    name = name.rstrip("/")
    return "" if name == "." else name


def _check_member(archive: Path, member: tarfile.TarInfo, root: str) -> str:
    """The member's normalised name, or an error if extracting it could leave the archive or
    make anything but a file, folder or link."""
    name = _normal(member.name)
    shown = member.name[:200]
    if "\x00" in member.name or "\x00" in member.linkname:
        raise _invalid(archive, f"member {shown!r} has a NUL byte in its name")
    if member.name.startswith("/"):  # data_filter would strip the slash, not refuse it
        raise _invalid(archive, f"member {shown!r} is an absolute path")
    if ".." in name.split("/"):
        raise _invalid(archive, f"member {shown!r} has a '..' path component")
    try:
        tarfile.data_filter(member, root)  # the library's check for safe extraction
    except tarfile.AbsolutePathError:
        raise _invalid(archive, f"member {shown!r} is an absolute path") from None
    except tarfile.OutsideDestinationError:
        raise _invalid(archive, f"member {shown!r} leads outside the archive") from None
    except tarfile.SpecialFileError:
        raise _invalid(
            archive,
            f"member {shown!r} is a device file or fifo; an image archive holds only files, "
            "folders and links",
        ) from None
    except tarfile.AbsoluteLinkError:
        raise _invalid(
            archive, f"member {shown!r} links to the absolute path {member.linkname[:200]!r}"
        ) from None
    except tarfile.LinkOutsideDestinationError:
        raise _invalid(
            archive, f"member {shown!r} links outside the archive ({member.linkname[:200]!r})"
        ) from None
    except tarfile.FilterError as exc:
        raise _invalid(archive, f"member {shown!r} cannot be extracted safely ({exc})") from None
    if not (member.isreg() or member.isdir() or member.issym() or member.islnk()):
        raise _invalid(archive, f"member {shown!r} is neither a file, a folder nor a link")
    return name


def _signature(member: tarfile.TarInfo, name: str) -> Signature:
    return (name, member.type, member.size, member.linkname)


def _open(archive: Path) -> tarfile.TarFile:
    try:
        return tarfile.open(archive, "r:*")
    except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
        raise _invalid(archive, f"not a tar archive ({exc})") from None


def _read_members(archive: Path, tar: tarfile.TarFile) -> dict[str, tarfile.TarInfo]:
    members: dict[str, tarfile.TarInfo] = {}
    with scratch_dir("sglx-archive-root-") as root:  # empty: data_filter resolves nothing real
        try:
            for count, member in enumerate(tar, start=1):
                if count > MAX_MEMBERS:
                    raise _invalid(
                        archive,
                        f"more than {MAX_MEMBERS} members; an image archive holds a few per layer",
                    )
                name = _check_member(archive, member, str(root))
                if name in members:
                    raise _invalid(archive, f"member {name!r} appears twice")
                if name:
                    members[name] = member
        except (tarfile.TarError, EOFError, zlib.error, lzma.LZMAError) as exc:
            raise _invalid(archive, f"not a readable tar archive ({exc})", COPY_AGAIN) from None
    _check_not_truncated(archive, tar)
    return members


def _check_not_truncated(archive: Path, tar: tarfile.TarFile) -> None:
    """An uncompressed tar cut short inside a header reads as a shorter, valid one: refuse it
    when the end-of-archive marker (two zero blocks) is missing where the members end. (tarfile
    itself fails on a cut inside member data, and a cut compressed stream fails while read.)"""
    if not isinstance(tar.fileobj, io.BufferedReader):
        return
    tar.fileobj.seek(tar.offset)
    marker = tar.fileobj.read(2 * tarfile.BLOCKSIZE)
    if len(marker) < 2 * tarfile.BLOCKSIZE or marker.strip(b"\0"):
        raise _invalid(
            archive,
            f"truncated or damaged: no end-of-archive marker after the last member (byte "
            f"{tar.offset})",
            hint=COPY_AGAIN,
        )


def _regular(archive: Path, members: dict[str, tarfile.TarInfo], name: str, what: str) -> str:
    """The member holding the bytes of `name` (a file, or a link inside the archive to one)."""
    seen: set[str] = set()
    current = _normal(name)
    while current not in seen:
        seen.add(current)
        member = members.get(current)
        if member is None:
            raise _invalid(archive, f"{what} {name!r} is not in the archive")
        if member.isreg():
            return current
        if member.issym():
            current = posixpath.normpath(
                posixpath.join(posixpath.dirname(current), member.linkname)
            )
        elif member.islnk():
            current = _normal(member.linkname)
        else:
            break
    raise _invalid(archive, f"{what} {name!r} is not a file in the archive")


def _read_json(
    archive: Path, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], name: str, what: str
) -> tuple[Any, bytes]:
    """The parsed JSON document `name` and its bytes, refused over `MAX_JSON_BYTES`."""
    member = members[_regular(archive, members, name, what)]
    if member.size > MAX_JSON_BYTES:
        raise _invalid(
            archive,
            f"{what} {name!r} is {member.size} bytes, more than the {MAX_JSON_BYTES} a JSON "
            "document of an image archive may have",
        )
    handle = tar.extractfile(member)
    data = b"" if handle is None else handle.read(MAX_JSON_BYTES + 1)
    try:
        return parse_json(data, path=Path(name), what=what), data
    except SglxError as exc:  # "NAME: the WHAT is not valid JSON (...)", said of the member
        said = exc.message.removeprefix(f"{name}: the {what} ")
        raise _invalid(archive, f"{what} {name!r} {said}") from None


# ---------------------------------------------------------------------------------------------
# manifests
# ---------------------------------------------------------------------------------------------


def inspect_archive(archive: Path, *, tag: str | None = None) -> ImageArchive:
    """Check every member and the manifest (or OCI index) of `archive`; read no layer."""
    with _open(archive) as tar:
        members = _read_members(archive, tar)
        signatures = tuple(_signature(m, name) for name, m in members.items())
        if "manifest.json" in members:
            return _docker_archive(archive, tar, members, signatures)
        if "index.json" in members:
            return _oci_layout(archive, tar, members, signatures, tag)
    raise _invalid(
        archive,
        "neither a docker-archive (manifest.json) nor an OCI layout (index.json)",
        hint="make it with `docker save -o FILE IMAGE`",
    )


def _string_list(value: Any) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _docker_archive(
    archive: Path,
    tar: tarfile.TarFile,
    members: dict[str, tarfile.TarInfo],
    signatures: tuple[Signature, ...],
) -> ImageArchive:
    manifest, _ = _read_json(archive, tar, members, "manifest.json", "manifest")
    if not isinstance(manifest, list) or not manifest:
        raise _invalid(archive, "manifest.json is not a list of images")
    if len(manifest) != 1:
        raise _invalid(
            archive,
            f"manifest.json lists {len(manifest)} images; a base archive holds one",
            hint="save only the base: docker save -o FILE IMAGE",
        )
    entry = manifest[0]
    if not isinstance(entry, dict):
        raise _invalid(archive, "manifest.json[0] is not an object")
    config, layers, tags = entry.get("Config"), entry.get("Layers"), entry.get("RepoTags")
    if not isinstance(config, str):
        raise _invalid(archive, "manifest.json[0].Config is missing or not a string")
    if not _string_list(layers) or not 0 < len(layers) <= MAX_LAYERS:
        raise _invalid(archive, f"manifest.json[0].Layers is not a list of 1 to {MAX_LAYERS} paths")
    if tags is not None and not _string_list(tags):
        raise _invalid(archive, "manifest.json[0].RepoTags is not a list of strings")
    layer_members = tuple(_regular(archive, members, layer, "layer") for layer in layers)
    config_member = _regular(archive, members, config, "config")
    document, data = _read_json(archive, tar, members, config_member, "config")
    diff_ids = _check_config(archive, document, len(layers))
    image_id = "sha256:" + hashlib.sha256(data).hexdigest()
    manifest_digest: str | None
    if "index.json" in members:  # Docker 25+ writes both; the containerd store reads the index
        manifest_digest = _indexed_digest(archive, tar, members, image_id)
    else:
        sizes = [members[name].size for name in layer_members]
        manifest_digest = digest_of(
            imported_manifest((image_id, len(data)), list(zip(diff_ids, sizes, strict=True)))
        )
    return ImageArchive(
        path=archive,
        kind="docker-archive",
        image_id=image_id,
        manifest_digest=manifest_digest,
        config=config_member,
        layers=layer_members,
        repo_tags=tuple(check_reference(t, f"{archive}: RepoTags") for t in tags or ()),
        members=signatures,
    )


def _check_config(archive: Path, document: Any, layers: int) -> list[str]:
    """The config's rootfs.diff_ids, one per layer."""
    rootfs = document.get("rootfs") if isinstance(document, dict) else None
    diff_ids = rootfs.get("diff_ids") if isinstance(rootfs, dict) else None
    if not _string_list(diff_ids):
        raise _invalid(archive, "the image config has no rootfs.diff_ids list")
    if len(diff_ids) != layers:
        raise _invalid(
            archive,
            f"the image config names {len(diff_ids)} layers but the manifest {layers}",
        )
    return diff_ids


def _indexed_digest(
    archive: Path, tar: tarfile.TarFile, members: dict[str, tarfile.TarInfo], image_id: str
) -> str | None:
    """The digest `index.json` names beside a docker-archive's manifest.json (Docker 25+),
    which the containerd store names the image by, once it is shown to lead to the config
    manifest.json names (image_identity.leads_to_config; a platform the save left out leads
    nowhere); None where index.json names no one image."""
    index, _ = _read_json(archive, tar, members, "index.json", "index")
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list) or len(manifests) != 1:
        return None

    def read(value: Any, where: str) -> Any:
        descriptor = _descriptor(archive, value, where)
        if f"blobs/sha256/{descriptor[2]}" not in members:
            return False
        return _digested_json(archive, tar, members, descriptor, where)

    if not leads_to_config(manifests[0], image_id, read, "index.json manifests[0]"):
        raise _invalid(archive, "index.json and manifest.json name different images")
    # the walk's first read checked this descriptor (sha256:<64 hex digits>)
    return str(manifests[0]["digest"])


def _descriptor(archive: Path, value: Any, where: str) -> tuple[str, int, str]:
    """(mediaType, size, hex digest) of an OCI descriptor."""
    if not isinstance(value, dict):
        raise _invalid(archive, f"{where} is not a descriptor object")
    media, size, digest = value.get("mediaType"), value.get("size"), value.get("digest")
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    if match is None:
        raise _invalid(archive, f"{where}.digest is missing or not sha256:<64 hex digits>")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise _invalid(archive, f"{where}.size is missing or not a byte count")
    return (media if isinstance(media, str) else "", size, match.group(1))


def _blob(
    archive: Path, members: dict[str, tarfile.TarInfo], size: int, digest: str, where: str
) -> str:
    """The member holding the blob a descriptor names, its size checked."""
    name = _regular(archive, members, f"blobs/sha256/{digest}", f"{where} blob")
    if members[name].size != size:
        raise _invalid(
            archive,
            f"{where} blob {digest[:12]} is {members[name].size} bytes, its descriptor says {size}",
        )
    return name


def _digested_json(
    archive: Path,
    tar: tarfile.TarFile,
    members: dict[str, tarfile.TarInfo],
    descriptor: tuple[str, int, str],
    where: str,
) -> Any:
    """A JSON blob, checked against its descriptor's size and digest."""
    _, size, digest = descriptor
    name = _blob(archive, members, size, digest, where)
    document, data = _read_json(archive, tar, members, name, where)
    if hashlib.sha256(data).hexdigest() != digest:
        raise _invalid(
            archive, f"{where} blob {digest[:12]} does not have the digest it is named by"
        )
    return document


def _oci_layout(
    archive: Path,
    tar: tarfile.TarFile,
    members: dict[str, tarfile.TarInfo],
    signatures: tuple[Signature, ...],
    tag: str | None,
) -> ImageArchive:
    index, _ = _read_json(archive, tar, members, "index.json", "index")
    manifests = index.get("manifests") if isinstance(index, dict) else None
    if not isinstance(manifests, list) or not manifests:
        raise _invalid(archive, "index.json has no 'manifests' list")
    if len(manifests) != 1:
        raise _invalid(
            archive,
            f"index.json lists {len(manifests)} images; a base archive holds one",
            hint="save only the base, for one platform",
        )
    descriptor = _descriptor(archive, manifests[0], "index.json manifests[0]")
    if descriptor[0] in INDEX_TYPES:
        raise _invalid(
            archive,
            "index.json points at a multi-platform index; sglx loads one platform",
            hint="save the base for one platform (docker save --platform linux/amd64)",
        )
    manifest = _digested_json(archive, tar, members, descriptor, "manifest")
    if not isinstance(manifest, dict):
        raise _invalid(archive, "the image manifest is not an object")
    config = _descriptor(archive, manifest.get("config"), "manifest config")
    layers = manifest.get("layers")
    if not isinstance(layers, list) or not 0 < len(layers) <= MAX_LAYERS:
        raise _invalid(archive, f"the image manifest's layers is not a list of 1 to {MAX_LAYERS}")
    layer_members = []
    for i, layer in enumerate(layers):
        _, size, digest = _descriptor(archive, layer, f"manifest layers[{i}]")
        layer_members.append(_blob(archive, members, size, digest, f"layer {i}"))
    _check_config(archive, _digested_json(archive, tar, members, config, "config"), len(layers))
    ref = _ref_name(manifests[0].get("annotations"))
    return ImageArchive(
        path=archive,
        kind="oci-layout",
        image_id=f"sha256:{config[2]}",
        manifest_digest=f"sha256:{descriptor[2]}",
        config=f"blobs/sha256/{config[2]}",
        layers=tuple(layer_members),
        repo_tags=() if tag or ref is None else (check_reference(ref, f"{archive}: ref name"),),
        members=signatures,
    )


def _ref_name(annotations: Any) -> str | None:
    """The full image name an OCI index annotates its manifest with, if any."""
    if not isinstance(annotations, dict):
        return None
    names = (annotations.get(key) for key in REF_NAME_ANNOTATIONS)
    return next((n for n in names if isinstance(n, str) and ":" in n), None)


# ---------------------------------------------------------------------------------------------
# what the engine reads
# ---------------------------------------------------------------------------------------------


def write_docker_archive(info: ImageArchive, sink: IO[bytes]) -> None:
    """Write to `sink` the docker-archive the engine loads: the members `inspect_archive`
    checked (compared again one by one: a changed archive stops here) and a manifest.json with
    no RepoTags."""
    changed = _invalid(
        info.path, "changed while it was being loaded", hint="do not modify it during a load"
    )
    with _open(info.path) as tar, tarfile.open(fileobj=sink, mode="w|") as out:
        index = 0
        for member in tar:
            name = _normal(member.name)
            if not name:
                continue
            if index >= len(info.members) or _signature(member, name) != info.members[index]:
                raise changed
            index += 1
            if name == "manifest.json":
                continue
            member.name = name
            if member.islnk():
                member.linkname = _normal(member.linkname)
            out.addfile(member, tar.extractfile(member) if member.isreg() else None)
        if index != len(info.members):
            raise changed
        data = json.dumps(
            [{"Config": info.config, "RepoTags": [], "Layers": list(info.layers)}]
        ).encode()
        manifest = tarfile.TarInfo("manifest.json")
        manifest.size = len(data)
        manifest.mode = 0o644
        out.addfile(manifest, io.BytesIO(data))


@contextmanager
def docker_archive_stream(info: ImageArchive) -> Iterator[Iterator[bytes]]:
    """The bytes of `write_docker_archive`, produced by a thread as they are read: no copy of
    a multi-GB base on disk. An error of the writer (the archive changed) wins over the
    engine's complaint about the truncated stream it caused."""
    read_fd, write_fd = os.pipe()
    failures: list[BaseException] = []

    def produce() -> None:
        try:
            with os.fdopen(write_fd, "wb") as sink:
                write_docker_archive(info, sink)
        except BrokenPipeError:
            pass  # the reader stopped; its own error says why
        except BaseException as exc:  # handed to the reading thread below
            failures.append(exc)

    thread = threading.Thread(target=produce, name="sglx-archive-writer", daemon=True)
    thread.start()
    source = os.fdopen(read_fd, "rb")
    try:
        try:
            yield iter(lambda: source.read(CHUNK), b"")
        finally:
            source.close()
            thread.join()
    except BaseException:
        if failures:
            raise failures[0] from None
        raise
    if failures:
        raise failures[0]

"""`bundle.json` and `SHA256SUMS`: what a bundle holds, and the two ways a site checks it.

`bundle.json` lists every file of the bundle except the three metadata files (itself, its
signature, SHA256SUMS) with size and sha256, plus the arch, the image digest and the creation
time. `SHA256SUMS` is not an independent list: it is rendered from `bundle.json` (every file of
it, then `bundle.json` and the signature themselves), so verify compares it byte for byte with
what it should be and a tampered copy of either file is found. A signature over `bundle.json`
therefore covers every byte of the bundle.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from sglx.bundle import layout
from sglx.errors import SglxError

FORMAT: Literal["sglx-bundle"] = "sglx-bundle"
FORMAT_VERSION: Literal[1] = 1
Sha256 = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]
ImageId = Annotated[str, StringConstraints(pattern=r"^sha256:[0-9a-f]{64}$")]
# Relative POSIX paths of plain names: no leading slash, no part starting with a dot (so no
# `..`), no spaces or backslashes (SHA256SUMS and install.sh read them unquoted).
RelPath = Annotated[
    str,
    StringConstraints(
        pattern=r"^[A-Za-z0-9_+@=-][A-Za-z0-9._+@=-]*(/[A-Za-z0-9_+@=-][A-Za-z0-9._+@=-]*)*$",
        max_length=layout.MAX_PATH_CHARS,
    ),
]
Kind = Literal["image-chunk", "meta", "install", "wheel", "lock", "weights", "ansible"]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class FileEntry(_Record):
    """One file of the bundle."""

    path: RelPath
    size: int = Field(ge=0)
    sha256: Sha256
    kind: Kind


class ImageRecord(_Record):
    """The image: its engine id, the tag it was saved under and the archive's chunks in order."""

    ref: str
    id: ImageId
    archive: RelPath
    size: int = Field(ge=0)
    chunk_size: int = Field(ge=layout.MIN_CHUNK_SIZE)
    chunks: tuple[RelPath, ...] = Field(min_length=1)


class WeightsRecord(_Record):
    """Converted weights carried beside the image (`--weights-outside`)."""

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._+-]+$")]
    path: RelPath
    digest: str
    size: int = Field(ge=0)


class Slot(_Record):
    """A part of the bundle that may be absent, and why."""

    included: bool
    path: RelPath | None = None
    note: str = ""


class BundleManifest(_Record):
    format: Literal["sglx-bundle"] = FORMAT
    format_version: Literal[1] = FORMAT_VERSION
    arch: str
    created: str
    sglx_version: str
    image: ImageRecord
    weights: WeightsRecord | None = None
    wheelhouse: Slot
    ansible: Slot
    files: tuple[FileEntry, ...] = Field(max_length=layout.MAX_FILES)

    def by_path(self) -> dict[str, FileEntry]:
        return {entry.path: entry for entry in self.files}

    def chunk_label(self, path: str) -> str | None:
        """'chunk 7 of image.tar' for a chunk's path, None for any other file."""
        if path not in self.image.chunks:
            return None
        name = PurePosixPath(self.image.archive).name
        return f"chunk {self.image.chunks.index(path)} of {name}"


def dump(manifest: BundleManifest) -> bytes:
    return (json.dumps(manifest.model_dump(mode="json"), indent=2, sort_keys=True) + "\n").encode()


def parse(raw: bytes, where: str) -> BundleManifest:
    """Validate `bundle.json` bytes; an unreadable one is an error naming the file."""
    if len(raw) > layout.MAX_MANIFEST_BYTES:
        raise SglxError(
            f"{where} is {len(raw)} bytes, more than a manifest can be "
            f"({layout.MAX_MANIFEST_BYTES} bytes)",
            hint="this is not an sglx bundle manifest; re-copy bundle.json from the source",
            code="bundle_manifest",
            path=where,
        )
    try:
        json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        # JSON mode: strict models still take JSON arrays for tuples.
        manifest = BundleManifest.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where_key = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise _invalid(where, f"{where_key}: {first['msg']}") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise _invalid(where, f"not JSON: {exc}") from None
    seen: set[str] = set()
    for entry in manifest.files:
        if entry.path in seen or entry.path in layout.METADATA:
            raise SglxError(
                f"{where} lists {entry.path} twice or lists a metadata file",
                hint="re-copy bundle.json from the source side",
                code="bundle_manifest",
                path=where,
            )
        if entry.path.count("/") >= layout.MAX_PATH_DEPTH:
            raise SglxError(f"{where}: {entry.path} is nested too deep", code="bundle_manifest")
        seen.add(entry.path)
    missing = [c for c in manifest.image.chunks if c not in seen]
    if missing:
        raise SglxError(
            f"{where}: image chunks {', '.join(missing)} have no file entry",
            hint="re-copy bundle.json from the source side",
            code="bundle_manifest",
            path=where,
        )
    return manifest


def _invalid(where: str, detail: str) -> SglxError:
    return SglxError(
        f"{where} is not a valid sglx bundle manifest ({detail})",
        hint="re-copy bundle.json from the source side, or re-create the bundle",
        code="bundle_manifest",
        path=where,
    )


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def render_sums(
    manifest: BundleManifest, manifest_sha256: str, signature_sha256: str | None
) -> str:
    """The `SHA256SUMS` text for this manifest (GNU coreutils format, two spaces, text mode)."""
    lines = [f"{entry.sha256}  {entry.path}" for entry in sorted(manifest.files, key=_path_key)]
    lines.append(f"{manifest_sha256}  {layout.MANIFEST}")
    if signature_sha256 is not None:
        lines.append(f"{signature_sha256}  {layout.SIGNATURE}")
    return "\n".join(lines) + "\n"


def _path_key(entry: FileEntry) -> str:
    return entry.path


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

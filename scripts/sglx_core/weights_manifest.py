"""The weights manifest (`sglx-weights.json`): what a converted model is and where it came from.

The manifest sits next to the weights and lists every other file of the folder (size, sha256),
every tensor (name, shard, dtype, shape, source dtype), the source checkpoint's digest, the
converter's version and the arch whose dtype policy was applied. It holds no time stamp or
path, so converting the same checkpoint for the same arch with the same sglx gives the same
manifest, byte for byte.

The *weights digest* names a converted model as a whole: ``sha256:`` + the sha256 of the
manifest's canonical JSON (keys sorted, no whitespace, UTF-8). Images carry it as a label and
bundles reference it; `manifest_digest` is the one function that computes it. The format is
documented in docs/reference/weights.md.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from sglx_core import untrusted
from sglx_core.digests import Digest, Sha256
from sglx_core.errors import SglxError
from sglx_core.output_files import atomic_write_text

MANIFEST_NAME = "sglx-weights.json"
MAX_MANIFEST_BYTES = 256 << 20
"""Largest manifest read. A tensor's record takes about 250 bytes, so this holds a million
tensors (a 60-layer MoE with 384 experts has some 200k); a damaged or hostile file (a 1 GiB
sparse one) is refused after reading this much, not read whole."""
FORMAT: Literal["sglx-weights"] = "sglx-weights"
FORMAT_VERSION: Literal[1] = 1
FileName = Annotated[str, StringConstraints(pattern=r"^[^/\\]+$")]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class FileRecord(_Record):
    """One file: its name in the folder, size in bytes and sha256 (hex)."""

    name: FileName
    size: int = Field(ge=0)
    sha256: Sha256


class TensorRecord(_Record):
    """One tensor of the converted weights."""

    name: str
    file: FileName
    dtype: str
    shape: tuple[int, ...]
    source_dtype: str


class SourceRecord(_Record):
    """The checkpoint the weights were converted from."""

    digest: Digest
    files: tuple[FileRecord, ...]


class ConverterRecord(_Record):
    name: Literal["sglx"] = "sglx"
    version: str


class Manifest(_Record):
    """The whole manifest (format version 1)."""

    format: Literal["sglx-weights"] = FORMAT
    format_version: Literal[1] = FORMAT_VERSION
    converter: ConverterRecord
    arch: str
    dtype: str
    quantization: str | None
    source: SourceRecord
    files: tuple[FileRecord, ...]
    tensors: tuple[TensorRecord, ...]

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def canonical_json(document: Any) -> bytes:
    """Keys sorted, no whitespace, UTF-8: the bytes every digest in the manifest is taken over."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def source_digest(files: tuple[FileRecord, ...]) -> str:
    """Digest of a source checkpoint: sha256 of the canonical JSON list of its file records."""
    listing = [f.model_dump(mode="json") for f in sorted(files, key=lambda f: f.name)]
    return "sha256:" + hashlib.sha256(canonical_json(listing)).hexdigest()


def manifest_path(path: Path) -> Path:
    """`path` itself when it is a file, else the manifest inside the folder `path`."""
    return path / MANIFEST_NAME if path.is_dir() else path


def read_manifest(path: Path) -> Manifest:
    """Load and validate the manifest of a converted model folder (or the manifest file).

    It comes with the weights, from outside: it is read only if a regular file of at most
    MAX_MANIFEST_BYTES, and parsed under sglx_core.untrusted's rules (no repeated key, bounded
    nesting) before the schema is applied."""
    file = manifest_path(path)
    if not file.exists():
        raise SglxError(
            f"{file}: no weights manifest",
            hint="this folder was not written by 'sglx weights convert'; convert the checkpoint",
            code="no_manifest",
            path=str(file),
        )
    fix = (
        "re-copy the converted model with its manifest, or convert the checkpoint again with "
        "this sglx"
    )
    raw = untrusted.read_bounded(
        file, what="weights manifest", max_bytes=MAX_MANIFEST_BYTES, hint=fix
    )
    return untrusted.parse_model(
        raw,
        Manifest,
        path=file,
        what="weights manifest",
        hint=fix,
    )


def manifest_digest(path: Path) -> str:
    """The weights digest (``sha256:...``) of a converted model folder or its manifest file.

    The image build puts it in the OCI label; bundles reference it.
    """
    manifest = read_manifest(path)
    return "sha256:" + hashlib.sha256(canonical_json(manifest.to_json())).hexdigest()


def write_manifest(folder: Path, manifest: Manifest) -> Path:
    """Write the manifest (indented for people; the digest ignores whitespace) atomically."""
    path = folder / MANIFEST_NAME
    atomic_write_text(path, json.dumps(manifest.to_json(), indent=2, sort_keys=True) + "\n")
    return path

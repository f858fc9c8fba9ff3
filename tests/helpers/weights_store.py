"""Helpers for the weights store tests: a converted-weights folder made by hand (its files and a
real sglx-weights.json listing them), without torch or a conversion."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def converted_weights(folder: Path, shards: int = 2, size: int = 64 << 10) -> str:
    """A folder `sglx weights convert` could have written (random shards, the manifest listing
    them); returns its weights digest."""
    from sglx_core.weights_manifest import (
        ConverterRecord,
        FileRecord,
        Manifest,
        SourceRecord,
        manifest_digest,
        write_manifest,
    )

    folder.mkdir(parents=True)
    records = []
    for index in range(shards):
        name = f"model-{index:05d}-of-{shards:05d}.safetensors"
        data = os.urandom(size)
        (folder / name).write_bytes(data)
        records.append(FileRecord(name=name, size=size, sha256=hashlib.sha256(data).hexdigest()))
    manifest = Manifest(
        converter=ConverterRecord(version="test"),
        arch="cpu",
        dtype="float32",
        quantization=None,
        source=SourceRecord(digest="sha256:" + "0" * 64, files=()),
        files=tuple(records),
        tensors=(),
    )
    write_manifest(folder, manifest)
    return manifest_digest(folder)


def flip_a_byte(path: Path) -> None:
    """Change one byte of `path` in place (same size)."""
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))

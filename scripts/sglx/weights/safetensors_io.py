"""Reading and checking safetensors headers; encoding the header of a file being written.

A safetensors file is an 8-byte little-endian header length, a JSON header naming each tensor's
dtype, shape and ``data_offsets`` (relative to the end of the header), then the raw bytes. The
converter streams tensor data itself (bounded memory, no mmap that would count the whole file as
resident), so it needs the offsets, and it checks the header before trusting them: every way a
file can be cut short or garbled gets a message naming the file, the tensor and the numbers.
The `safetensors` library then re-validates each file as a second opinion, so a file sglx
accepts is one the loaders accept too.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx.weights.bounded_json import parse_json
from sglx.weights.dtypes import Dtype, lookup
from sglx_core.errors import SglxError
from sglx_core.untrusted import open_regular

LENGTH_BYTES = 8
# The safetensors library refuses headers above 100 MB; so do we, before reading one.
MAX_HEADER_BYTES = 100_000_000
METADATA_KEY = "__metadata__"


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file, with absolute byte positions."""

    name: str
    file: str
    dtype: Dtype
    shape: tuple[int, ...]
    offset: int  # absolute position of the first data byte in the file
    nbytes: int

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class SafetensorsFile:
    """A checked safetensors header: tensors in data order, metadata, sizes."""

    path: Path
    size: int
    data_start: int
    metadata: Mapping[str, str]
    tensors: tuple[TensorEntry, ...]


def _fail(path: Path, message: str, *, code: str, hint: str | None = None) -> SglxError:
    return SglxError(
        f"{path}: {message}",
        hint=hint or "re-copy the file from the original checkpoint; it is damaged or cut short",
        code=code,
        path=str(path),
    )


def _parse_entry(path: Path, name: str, raw: Any, data_start: int) -> TensorEntry:
    where = f"{path}: tensor '{name}'"
    if not isinstance(raw, dict):
        raise _fail(path, f"header entry of tensor '{name}' is not an object", code="corrupt")
    dtype_code, shape, offsets = raw.get("dtype"), raw.get("shape"), raw.get("data_offsets")
    if not isinstance(dtype_code, str):
        raise _fail(path, f"tensor '{name}' has no dtype in the header", code="corrupt")
    dtype = lookup(dtype_code, where=where)
    if not (isinstance(shape, list) and all(type(d) is int and d >= 0 for d in shape)):
        raise _fail(path, f"tensor '{name}' has a malformed shape {shape!r}", code="corrupt")
    if not (
        isinstance(offsets, list)
        and len(offsets) == 2
        and all(type(o) is int and o >= 0 for o in offsets)
        and offsets[0] <= offsets[1]
    ):
        raise _fail(path, f"tensor '{name}' has malformed data_offsets {offsets!r}", code="corrupt")
    begin, end = offsets
    needed = dtype.nbytes(math.prod(shape))
    if needed is None or needed != end - begin:
        raise _fail(
            path,
            f"tensor '{name}': shape {shape} of {dtype.code} needs "
            f"{needed if needed is not None else 'a fractional number of'} bytes but its "
            f"data_offsets span {end - begin}",
            code="corrupt",
        )
    return TensorEntry(name, path.name, dtype, tuple(shape), data_start + begin, end - begin)


def read_header(path: Path) -> SafetensorsFile:
    """Read and check the header of `path`; raise a clear `SglxError` for any damage."""
    handle = open_regular(path, what="safetensors file")  # a FIFO would hang the read
    try:
        with handle:
            size = os.fstat(handle.fileno()).st_size
            length_raw = handle.read(LENGTH_BYTES)
            if len(length_raw) < LENGTH_BYTES:
                raise _fail(
                    path,
                    f"truncated header: the file is {size} bytes, shorter than the "
                    f"{LENGTH_BYTES}-byte header length every safetensors file starts with",
                    code="truncated",
                )
            (length,) = struct.unpack("<Q", length_raw)
            if length > MAX_HEADER_BYTES:
                raise _fail(
                    path,
                    f"header length field says {length} bytes (limit {MAX_HEADER_BYTES}): "
                    "not a safetensors file, or its first bytes are damaged",
                    code="corrupt",
                )
            if length > size - LENGTH_BYTES:
                raise _fail(
                    path,
                    f"truncated header: the header length says {length} bytes but only "
                    f"{size - LENGTH_BYTES} follow",
                    code="truncated",
                )
            header_raw = handle.read(length)
    except OSError as exc:
        raise SglxError(
            f"{path}: cannot read: {exc.strerror}", code="environment", path=str(path)
        ) from None
    header = parse_json(header_raw, path=path, what="safetensors header")
    if not isinstance(header, dict):
        raise _fail(path, "header is not a JSON object", code="corrupt")
    metadata = header.pop(METADATA_KEY, None) or {}
    if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
        raise _fail(path, f"{METADATA_KEY} must map strings to strings", code="corrupt")
    data_start = LENGTH_BYTES + length
    entries = sorted(
        (_parse_entry(path, name, raw, data_start) for name, raw in header.items()),
        key=lambda e: (e.offset, e.nbytes),
    )
    expected = data_start
    for entry in entries:
        if entry.offset != expected:
            problem = "overlaps the one before it" if entry.offset < expected else "leaves a gap"
            raise _fail(path, f"tensor '{entry.name}' {problem} in the data", code="corrupt")
        expected += entry.nbytes
    if expected > size:
        raise _fail(
            path,
            f"truncated data: the header places {expected - data_start} bytes of tensor data "
            f"but the file holds {size - data_start}",
            code="truncated",
        )
    if expected < size:
        raise _fail(
            path,
            f"{size - expected} bytes follow the last tensor's data: not written by a "
            "safetensors writer, or two files were concatenated",
            code="corrupt",
        )
    _library_agrees(path)
    return SafetensorsFile(path, size, data_start, dict(metadata), tuple(entries))


def _library_agrees(path: Path) -> None:
    """Let the safetensors library validate the file too (it is what sglang loads with)."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="numpy") as handle:
            handle.keys()
    except SafetensorError as exc:
        raise _fail(
            path, f"the safetensors library rejects the file: {exc}", code="corrupt"
        ) from None


def encode_header(
    tensors: Sequence[tuple[str, str, Sequence[int], int]], metadata: Mapping[str, str]
) -> bytes:
    """Length prefix plus JSON header for tensors `(name, dtype code, shape, nbytes)` in order.

    The header is padded with spaces to a multiple of 8 bytes, as the safetensors writer does, so
    the data starts aligned.
    """
    header: dict[str, Any] = {METADATA_KEY: dict(metadata)} if metadata else {}
    offset = 0
    for name, code, shape, nbytes in tensors:
        header[name] = {
            "dtype": code,
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw

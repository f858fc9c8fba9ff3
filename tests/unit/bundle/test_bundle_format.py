"""The bundle format's pieces without an engine: chunked writing and reading, the manifest,
SHA256SUMS rendering and the --chunk-size argument."""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sglx.bundle import layout
from sglx.bundle.chunks import ChunkWriter, iter_blocks
from sglx.bundle.manifest import parse
from sglx.scan.chunked import ChunkedReader
from sglx_core.errors import SglxError

CliRunner = Callable[..., tuple[int, str, str]]


def test_chunk_writer_splits_and_hashes_while_writing(tmp_path: Path) -> None:
    data = os.urandom(10_000)
    blocks = [data[i : i + 777] for i in range(0, len(data), 777)]
    written = ChunkWriter(tmp_path, 4096).write_all(blocks)
    assert [c.size for c in written.chunks] == [4096, 4096, 1808]
    assert [c.path for c in written.chunks] == [layout.chunk_name(i) for i in range(3)]
    for chunk in written.chunks:
        assert hashlib.sha256((tmp_path / chunk.path).read_bytes()).hexdigest() == chunk.sha256
    paths = [tmp_path / c.path for c in written.chunks]
    assert b"".join(iter_blocks(paths, block=1000)) == data


def test_chunked_reader_is_one_seekable_file_that_tarfile_reads(tmp_path: Path) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name in ("a", "b/c"):
            payload = os.urandom(3000)
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    written = ChunkWriter(tmp_path, 1024).write_all([buffer.getvalue()])
    reader = ChunkedReader([tmp_path / c.path for c in written.chunks])
    assert reader.size == len(buffer.getvalue())
    reader.seek(1500)
    assert reader.read(100) == buffer.getvalue()[1500:1600]
    reader.seek(0)
    with tarfile.open(fileobj=reader, mode="r:") as tar:
        assert tar.getnames() == ["a", "b/c"]


@pytest.mark.parametrize(
    ("text", "size"), [("1GiB", 1 << 30), ("700MB", 700_000_000), ("4MiB", 4 << 20), ("2048", 2048)]
)
def test_chunk_size_parsing(text: str, size: int) -> None:
    assert layout.parse_chunk_size(text) == size


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("big", "is not a size"),
        ("1.5GB", "is not a size"),
        ("10", "is 10 bytes, below the 1 KiB minimum"),
    ],
)
def test_bad_chunk_sizes_are_usage_errors(sglx: CliRunner, text: str, words: str) -> None:
    code, out, err = sglx("bundle", "create", "--chunk-size", text, "--arch", "cpu")
    assert code == 2
    assert f"--chunk-size '{text}' {words}" in err
    assert "Traceback" not in out + err


def test_a_manifest_that_is_not_json_or_not_a_manifest_names_the_problem() -> None:
    with pytest.raises(SglxError, match=r"b/bundle.json: the bundle manifest is not valid JSON"):
        parse(b"{nope", "b/bundle.json")
    with pytest.raises(SglxError, match=r"not a valid sglx bundle manifest \(arch: Field required"):
        parse(b'{"format": "sglx-bundle"}', "b/bundle.json")
    with pytest.raises(SglxError, match="more than a manifest can be"):
        parse(b" " * (layout.MAX_MANIFEST_BYTES + 1), "b/bundle.json")


def test_chunked_reads_are_full_across_chunk_boundaries(tmp_path: Path) -> None:
    data = os.urandom(5000)
    written = ChunkWriter(tmp_path, 1024).write_all([data])
    reader = ChunkedReader([tmp_path / c.path for c in written.chunks])
    reader.seek(1000)
    assert reader.read(3000) == data[1000:4000]
    assert reader.read(5000) == data[4000:]
    assert reader.read(10) == b""


def test_verify_names_a_missing_path_and_a_folder_that_is_no_bundle(
    sglx: CliRunner, tmp_path: Path
) -> None:
    code, out, err = sglx("bundle", "verify", str(tmp_path / "nope"))
    assert code == 2
    assert f"{tmp_path / 'nope'} does not exist" in err
    code, out, err = sglx("bundle", "verify", str(tmp_path))
    assert code == 2
    assert "has no bundle.json: it is not an sglx bundle, or the copy is incomplete" in err
    code, out, err = sglx("bundle", "verify", str(tmp_path), "--jobs", "0")
    assert code == 2
    assert "argument --jobs: 0 is out of range: give 1 to 64" in err
    assert "Traceback" not in out + err

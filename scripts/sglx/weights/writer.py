"""Streaming one output safetensors file: header, then blocks, hashed as they go.

Blocks are converted on a thread pool in order with bounded look-ahead (`ordered_map`), so at
most a few blocks are in memory. The writer puts each block at its position in the file:

- converted bytes are written from memory (`pwrite`);
- bytes kept as they are (same dtype, integers, quantized data) are copied by the kernel from
  the source file (`copy_file_range`), which on Linux costs a third of a read plus a write,
  the same path `cp` takes. The block was still read to check it for NaN/Inf and to hash it.
  Where the kernel cannot copy between the two files (another file system on an old kernel,
  some network file systems), the writer falls back to writing the bytes it read.

The sha256 of the file runs on its own thread, fed in file order, so hashing overlaps writing.
"""

from __future__ import annotations

import errno
import hashlib
import os
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from sglx.weights.plan import ShardPlan
from sglx.weights.transform import Output, blocks, convert_block
from sglx_core.errors import SglxError
from sglx_core.weights_manifest import FileRecord

T = TypeVar("T")
R = TypeVar("R")
# copy_file_range errors that mean "not between these two files": write the bytes instead.
_NO_KERNEL_COPY = frozenset(
    {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.ETXTBSY}
)


def ordered_map(
    pool: ThreadPoolExecutor, fn: Callable[[T], R], items: Iterable[T], lookahead: int
) -> Iterator[R]:
    """`map(fn, items)` on `pool`, results in order, at most `lookahead` items in flight."""
    pending: deque[Future[R]] = deque()
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= lookahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()


class PositionalFile:
    """An output file written by position, by pwrite or by kernel copy from a source file."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        self.position = 0
        self.kernel_copy = True

    def write(self, data: bytes | memoryview) -> None:
        view = memoryview(data).cast("B")
        while view:
            written = os.pwrite(self.fd, view, self.position)
            self.position += written
            view = view[written:]

    def copy(self, source_fd: int, source_offset: int, data: bytes | memoryview) -> None:
        """Put the source bytes `data` (read from `source_offset`) at the current position."""
        done = 0
        size = len(memoryview(data).cast("B"))
        while self.kernel_copy and done < size:
            try:
                copied = os.copy_file_range(
                    source_fd, self.fd, size - done, source_offset + done, self.position
                )
            except OSError as exc:
                if exc.errno not in _NO_KERNEL_COPY:
                    raise
                copied = 0
                self.kernel_copy = False
            if copied == 0:
                break
            done += copied
            self.position += copied
        if done < size:
            self.write(memoryview(data).cast("B")[done:])

    def close(self) -> None:
        os.close(self.fd)


def write_shard(
    shard: ShardPlan,
    folder: Path,
    source_fds: Mapping[str, int],
    pool: ThreadPoolExecutor,
    lookahead: int,
    advance: Callable[[int], None],
    stop: threading.Event,
) -> FileRecord:
    """Write `shard` into `folder`; its file record (size, sha256)."""
    path = folder / shard.name
    digest = hashlib.sha256(shard.header)
    work = (b for t in shard.tensors for b in blocks(t, source_fds[t.source.file]))
    hashing: deque[Future[None]] = deque()
    out = PositionalFile(path)
    try:
        with ThreadPoolExecutor(1, thread_name_prefix="sglx-digest") as hasher:
            out.write(shard.header)
            advance(len(shard.header))
            piece: Output
            for piece in ordered_map(pool, convert_block, work, lookahead):
                if stop.is_set():
                    raise SglxError("conversion stopped", code="interrupted")
                if piece.kept:
                    out.copy(piece.block.source_fd, piece.block.offset, piece.data)
                else:
                    out.write(piece.data)
                hashing.append(hasher.submit(digest.update, piece.data))
                if len(hashing) > lookahead:
                    hashing.popleft().result()
                advance(len(piece.data))
            for future in hashing:
                future.result()
    finally:
        out.close()
    size = path.stat().st_size
    if size != shard.size:
        raise SglxError(
            f"{path}: wrote {size} bytes, expected {shard.size}",
            code="write_failed",
            hint="is the disk full?",
        )
    return FileRecord(name=shard.name, size=size, sha256=digest.hexdigest())

"""Several files read in order as one seekable, read-only file: a `docker save` archive kept
as chunks (a bundle's `image/image.tar.NNN`, a split of one's own) is read by `tarfile` as one
stream, never reassembled on disk. Which files, and in which order, is the caller's to say.
"""

from __future__ import annotations

import bisect
import io
import os
from collections.abc import Sequence
from pathlib import Path


class ChunkedReader(io.RawIOBase):
    """The concatenation of `paths` as one seekable, read-only binary file."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self._paths = list(paths)
        self._starts: list[int] = []
        total = 0
        for path in self._paths:
            self._starts.append(total)
            total += path.stat().st_size
        self._size = total
        self._pos = 0
        self._index = -1
        self._handle: io.BufferedReader | None = None

    @property
    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Fill `buffer` across chunk boundaries: short only at the end of the last chunk
        (tarfile expects full reads)."""
        view = memoryview(buffer).cast("B")
        filled = 0
        while filled < len(view) and self._pos < self._size:
            got = self._read_some(view[filled:])
            if not got:
                break
            filled += got
        return filled

    def _read_some(self, view: memoryview) -> int:
        index = bisect.bisect_right(self._starts, self._pos) - 1
        if index != self._index:
            if self._handle is not None:
                self._handle.close()
            self._handle = self._paths[index].open("rb")
            self._index = index
        assert self._handle is not None
        self._handle.seek(self._pos - self._starts[index])
        end = self._starts[index + 1] if index + 1 < len(self._starts) else self._size
        want = min(len(view), end - self._pos)
        got: int = self._handle.readinto(view[:want])
        self._pos += got
        return got

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
        super().close()

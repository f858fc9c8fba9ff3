"""The sha256 of a file, and the stamp that says a file is still the one that was hashed:
the one file-hashing loop of sglx (wheels, bases, weights, bundles)."""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import BinaryIO, cast

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes: the one file-hashing loop of sglx (wheels, bases,
    weights), done by `hashlib.file_digest`, which reads in large blocks without Python-level
    looping."""
    with path.open("rb") as handle:
        return sha256_handle(handle)


def file_stamp(info: os.stat_result) -> tuple[int, int, int, int, int]:
    """What says a file is the one that was hashed: the same inode on the same device, with the
    same size and change times (a rewrite, a rename over it or a touch changes one of them)."""
    return (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def sha256_handle(handle: BinaryIO) -> str:
    """The hex sha256 of what is left to read of an open binary file (one opened safely, by
    sglx_core.untrusted.open_regular, for example)."""
    return hashlib.file_digest(cast(io.BufferedReader, handle), "sha256").hexdigest()

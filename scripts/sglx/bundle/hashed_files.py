"""Writing and copying files for bundles: hashed while written, staged, then renamed.

Every byte a bundle step writes is hashed on its way to disk (no read-back pass), and every
result appears under its final name only when complete.
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from sglx_core.errors import SglxError
from sglx_core.sizes import human_bytes

BLOCK = 4 << 20


@dataclass(frozen=True)
class Copied:
    size: int
    sha256: str


def copy_hashed(src: Path, dst: Path) -> Copied:
    """Copy `src` to `dst`, hashing the bytes as they pass (one read of the source)."""
    digest = hashlib.sha256()
    size = 0
    dst.parent.mkdir(parents=True, exist_ok=True)
    with src.open("rb") as source, dst.open("wb") as out:
        while block := source.read(BLOCK):
            digest.update(block)
            out.write(block)
            size += len(block)
    return Copied(size, digest.hexdigest())


def write_hashed(path: Path, data: bytes) -> Copied:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return Copied(len(data), hashlib.sha256(data).hexdigest())


def existing_parent(path: Path) -> Path:
    """The nearest folder of `path` (or itself) that exists: where its bytes will land."""
    probe = path.absolute()
    while not probe.exists():
        probe = probe.parent
    return probe


def require_space(needs: dict[Path, int], what: str) -> None:
    """Refuse before writing anything when a filesystem lacks the bytes `needs` puts on it."""
    by_fs: dict[int, tuple[Path, int]] = {}
    for path, size in needs.items():
        where = existing_parent(path)
        device = where.stat().st_dev
        seen = by_fs.get(device)
        by_fs[device] = (seen[0] if seen else where, (seen[1] if seen else 0) + size)
    for where, size in by_fs.values():
        free = shutil.disk_usage(where).free
        if size > free:
            raise SglxError(
                f"{what} needs {human_bytes(size)} on the filesystem of {where}, which has "
                f"{human_bytes(free)} free; nothing was written",
                hint=f"free {human_bytes(size - free)} there, or choose a folder on a larger "
                "filesystem",
                code="no_space",
                path=str(where),
            )

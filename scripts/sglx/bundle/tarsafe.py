"""Reading a bundle that arrived as one tar (`create --tar`) without trusting it.

Every member is checked before anything is written: absolute names, `..`, links (a bundle
holds none; one that points outside the target is named as such), device files, FIFOs,
duplicate names, too many members or too deep a tree are refused with the member's name.
Only then are the members extracted, plain files and folders only, with tarfile's `data`
filter as a second guard, into a staging folder renamed into place at the end.
"""

from __future__ import annotations

import posixpath
import shutil
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.files import require_space
from sglx.errors import SglxError


@dataclass(frozen=True)
class TarListing:
    """What a checked tar holds: its top folder and the total size of its files."""

    top: str
    members: int
    size: int


def _refuse(tar_path: Path, name: str, why: str) -> SglxError:
    return SglxError(
        f"{tar_path}: member '{name}' {why}; nothing was extracted",
        hint="this tar was not written by `sglx bundle create --tar`: get the bundle again "
        "from its source and do not use this one",
        code="bundle_tar_unsafe",
        path=str(tar_path),
    )


def check_tar(tar_path: Path) -> TarListing:
    """Refuse the tar if any member could write outside the target or is not a plain entry."""
    seen: set[str] = set()
    tops: set[str] = set()
    size = 0
    try:
        with tarfile.open(tar_path, "r:") as tar:
            for member in tar:
                name = member.name
                if len(seen) >= layout.MAX_FILES:
                    raise _refuse(tar_path, name, f"is past the {layout.MAX_FILES}-member limit")
                if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
                    raise _refuse(tar_path, name, "has an absolute path")
                parts = [p for p in name.split("/") if p not in ("", ".")]
                if ".." in parts or "\\" in name:
                    raise _refuse(tar_path, name, "has '..' in its path")
                if not parts or len(parts) > layout.MAX_PATH_DEPTH + 2:
                    raise _refuse(tar_path, name, "has an empty or too deep path")
                if len(name) > layout.MAX_PATH_CHARS + 100:
                    raise _refuse(tar_path, name, "has too long a path")
                clean = "/".join(parts)
                if member.issym() or member.islnk():
                    kind = "symlink" if member.issym() else "hardlink"
                    if _escapes(clean, member.linkname, member.issym()):
                        raise _refuse(
                            tar_path, name, f"is a {kind} pointing outside ({member.linkname})"
                        )
                    raise _refuse(tar_path, name, f"is a {kind}, and bundles hold no links")
                if member.isfifo():
                    raise _refuse(tar_path, name, "is a FIFO")
                if member.isdev():
                    raise _refuse(tar_path, name, "is a device file")
                if not (member.isfile() or member.isdir()):
                    raise _refuse(tar_path, name, "is not a plain file or folder")
                if clean in seen:
                    raise _refuse(tar_path, name, "appears twice")
                seen.add(clean)
                tops.add(parts[0])
                size += member.size
    except tarfile.TarError as exc:
        raise SglxError(
            f"{tar_path} is not a readable tar ({exc})",
            hint="re-copy the bundle tar from its source",
            code="bundle_tar",
            path=str(tar_path),
        ) from None
    if len(tops) != 1:
        raise SglxError(
            f"{tar_path} holds {len(tops)} top-level entries, not one bundle folder",
            hint="pass a tar written by `sglx bundle create --tar`",
            code="bundle_tar",
            path=str(tar_path),
        )
    return TarListing(top=tops.pop(), members=len(seen), size=size)


def _escapes(name: str, target: str, symbolic: bool) -> bool:
    if target.startswith("/"):
        return True
    base = posixpath.dirname(name) if symbolic else ""
    joined = posixpath.normpath(posixpath.join(base, target))
    return joined == ".." or joined.startswith("../")


def extract_tar(tar_path: Path, dest_parent: Path) -> Path:
    """Check, then extract the tar's bundle folder under `dest_parent`; returns its path."""
    listing = check_tar(tar_path)
    final = dest_parent / listing.top
    if final.exists():
        raise SglxError(
            f"{final} already exists; the tar would be unpacked there",
            hint=f"remove {final} or pass the folder itself instead of the tar",
            code="usage",
            path=str(final),
        )
    require_space({dest_parent: listing.size}, f"unpacking {tar_path.name}")
    staging = dest_parent / f".{listing.top}.unpack-{uuid.uuid4().hex[:8]}"
    staging.mkdir(parents=True)
    try:
        with tarfile.open(tar_path, "r:") as tar:
            tar.extractall(staging, filter="data")
        (staging / listing.top).rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final

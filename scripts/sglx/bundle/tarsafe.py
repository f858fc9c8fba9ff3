"""Reading a bundle that arrived as one tar (`create --tar`) without trusting it.

Every member is checked before anything is written: absolute names, `..`, links (a bundle
holds none; one that points outside the target is named as such), device files, FIFOs,
duplicate names, too many members or too deep a tree are refused with the member's name.

The tar must also read the same way in every tar reader, since users may unpack it with GNU
tar after `sglx bundle verify` passed it. Python's tarfile and GNU tar disagree on a member
that carries both a GNU long-name record and a pax header (tarfile takes one name, GNU tar
the other), on a NUL byte in a name (GNU tar cuts the name there), and on a header that fails
its checksum (tarfile stops reading, GNU tar skips it and reads the members after it). So a
member may carry at most one pax header or the GNU long-name records, never both, with only
the pax keys tarfile writes; no global pax header; and after the end of the archive only
zero padding may follow.

Only then are the members tarfile listed extracted, plain files and folders only, with
tarfile's `data` filter as a second guard, from the same open file, into a staging folder
renamed into place at the end.
"""

from __future__ import annotations

import posixpath
import shutil
import tarfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from sglx.bundle import layout
from sglx.bundle.hashed_files import require_space
from sglx_core.errors import SglxError
from sglx_core.untrusted import open_regular

_BLOCK = tarfile.BLOCKSIZE
_PLAIN = (tarfile.REGTYPE, tarfile.AREGTYPE, tarfile.DIRTYPE)
# Extension headers a member may carry: one pax header, or GNU long name / long link records.
_EXTENSIONS = {
    tarfile.XHDTYPE: "pax",
    tarfile.GNUTYPE_LONGNAME: "GNU long-name",
    tarfile.GNUTYPE_LONGLINK: "GNU long-link",
}
# The pax keys tarfile and GNU tar both apply the same way (tarfile.PAX_FIELDS and the times).
_PAX_KEYS = frozenset({*tarfile.PAX_FIELDS, "atime", "ctime"})
_TAIL_READ = 1 << 20


@dataclass(frozen=True)
class TarListing:
    """What a checked tar holds: its top folder and the total size of its files."""

    top: str
    members: int
    size: int


def _refuse(tar_path: Path, what: str) -> SglxError:
    return SglxError(
        f"{tar_path}: {what}; nothing was extracted",
        hint="this tar was not written by `sglx bundle create --tar`: get the bundle again "
        "from its source and do not use this one",
        code="bundle_tar_unsafe",
        path=str(tar_path),
    )


def _refuse_member(tar_path: Path, name: str, why: str) -> SglxError:
    return _refuse(tar_path, f"member '{_shown(name)}' {why}")


def _shown(name: str) -> str:
    """`name` with control characters escaped, so a message stays one honest line."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in name)


def check_tar(tar_path: Path) -> TarListing:
    """Refuse the tar if any member could write outside the target, is not a plain entry, or
    could be read differently by another tar reader."""
    with _opened(tar_path) as (handle, tar):
        return _check(tar_path, handle, tar)[0]


@contextmanager
def _opened(tar_path: Path) -> Iterator[tuple[BinaryIO, tarfile.TarFile]]:
    """The tar opened once, as a regular file (a FIFO would hang the reader), and as tarfile."""
    hint = "pass the .tar written by `sglx bundle create --tar`"
    with open_regular(tar_path, what="bundle tar", hint=hint) as handle:
        try:
            tar = tarfile.open(fileobj=handle, mode="r:")  # noqa: SIM115 - closed below
        except tarfile.TarError as exc:
            raise _unreadable(tar_path, exc) from None
        with tar:
            yield handle, tar


def _unreadable(tar_path: Path, exc: Exception) -> SglxError:
    return SglxError(
        f"{tar_path} is not a readable tar ({exc})",
        hint="re-copy the bundle tar from its source",
        code="bundle_tar",
        path=str(tar_path),
    )


def _check(
    tar_path: Path, handle: BinaryIO, tar: tarfile.TarFile
) -> tuple[TarListing, list[tarfile.TarInfo]]:
    seen: set[str] = set()
    tops: set[str] = set()
    members: list[tarfile.TarInfo] = []
    size = 0
    try:
        for member in tar:
            name = member.name
            if len(seen) >= layout.MAX_FILES:
                raise _refuse_member(tar_path, name, f"is past the {layout.MAX_FILES}-member limit")
            _check_headers(tar_path, handle, tar, member)
            if "\0" in name or "\0" in member.linkname:
                raise _refuse_member(
                    tar_path, name, "has a NUL byte in its path: GNU tar would cut the name there"
                )
            if name.startswith("/") or (len(name) > 1 and name[1] == ":"):
                raise _refuse_member(tar_path, name, "has an absolute path")
            parts = [p for p in name.split("/") if p not in ("", ".")]
            if ".." in parts or "\\" in name:
                raise _refuse_member(tar_path, name, "has '..' in its path")
            if not parts or len(parts) > layout.MAX_PATH_DEPTH + 2:
                raise _refuse_member(tar_path, name, "has an empty or too deep path")
            if len(name) > layout.MAX_PATH_CHARS + 100:
                raise _refuse_member(tar_path, name, "has too long a path")
            clean = "/".join(parts)
            if member.issym() or member.islnk():
                kind = "symlink" if member.issym() else "hardlink"
                if _escapes(clean, member.linkname, member.issym()):
                    raise _refuse_member(
                        tar_path, name, f"is a {kind} pointing outside ({member.linkname})"
                    )
                raise _refuse_member(tar_path, name, f"is a {kind}, and bundles hold no links")
            if member.isfifo():
                raise _refuse_member(tar_path, name, "is a FIFO")
            if member.isdev():
                raise _refuse_member(tar_path, name, "is a device file")
            if member.type not in _PLAIN:
                raise _refuse_member(tar_path, name, "is not a plain file or folder")
            if clean in seen:
                raise _refuse_member(tar_path, name, "appears twice")
            seen.add(clean)
            tops.add(parts[0])
            members.append(member)
            size += member.size
        _check_end(tar_path, handle, tar.offset)
    except tarfile.TarError as exc:
        raise _unreadable(tar_path, exc) from None
    if len(tops) != 1:
        raise SglxError(
            f"{tar_path} holds {len(tops)} top-level entries, not one bundle folder",
            hint="pass a tar written by `sglx bundle create --tar`",
            code="bundle_tar",
            path=str(tar_path),
        )
    return TarListing(top=tops.pop(), members=len(seen), size=size), members


def _check_headers(
    tar_path: Path, handle: BinaryIO, tar: tarfile.TarFile, member: tarfile.TarInfo
) -> None:
    """Refuse extension headers that tar readers apply differently (see the module docstring)."""
    name = member.name
    if tar.pax_headers:
        raise _refuse_member(
            tar_path, name, "follows a global pax header, which tar readers apply differently"
        )
    unknown = sorted(set(member.pax_headers) - _PAX_KEYS)
    if unknown:
        raise _refuse_member(
            tar_path, name, f"has pax records sglx never writes ({', '.join(map(_shown, unknown))})"
        )
    kinds: list[str] = []
    position = member.offset
    own_header = member.offset_data - _BLOCK
    while position < own_header:
        handle.seek(position)
        header = tarfile.TarInfo.frombuf(handle.read(_BLOCK), tar.encoding, tar.errors)
        kind = _EXTENSIONS.get(header.type)
        if kind is None:
            raise _refuse_member(tar_path, name, f"has an extension header of type {header.type!r}")
        if kind in kinds:
            raise _refuse_member(
                tar_path, name, f"has two {kind} headers; tar readers disagree on which applies"
            )
        kinds.append(kind)
        position += _BLOCK + -(-header.size // _BLOCK) * _BLOCK
    if "pax" in kinds and len(kinds) > 1:
        why = "has both GNU long-name records and a pax header: tar readers disagree on its name"
        for key in ("path", "linkpath"):
            if key in member.pax_headers:
                why += f" (the pax header gives the {key} '{_shown(member.pax_headers[key])}')"
        raise _refuse_member(tar_path, name, why)


def _check_end(tar_path: Path, handle: BinaryIO, end: int) -> None:
    """Refuse anything but zero padding where tarfile stopped reading."""
    handle.seek(end)
    first = handle.read(_BLOCK)
    if first.strip(b"\0"):
        try:
            tarfile.TarInfo.frombuf(first.ljust(_BLOCK, b"\0"), "utf-8", "surrogateescape")
            why = "cannot be read"
        except tarfile.HeaderError as exc:
            why = "fails its checksum" if "checksum" in str(exc) else f"is not valid ({exc})"
        raise _refuse(
            tar_path,
            f"the header at byte {end} {why}: tarfile stops reading there, while GNU tar skips "
            "it and unpacks the members after it",
        )
    position = end + len(first)
    while chunk := handle.read(_TAIL_READ):
        stripped = chunk.lstrip(b"\0")
        if stripped:
            offset = position + len(chunk) - len(stripped)
            raise _refuse(
                tar_path,
                f"holds data after its end-of-archive marker (at byte {offset}); only zero "
                "padding may follow it",
            )
        position += len(chunk)


def _escapes(name: str, target: str, symbolic: bool) -> bool:
    if target.startswith("/"):
        return True
    base = posixpath.dirname(name) if symbolic else ""
    joined = posixpath.normpath(posixpath.join(base, target))
    return joined == ".." or joined.startswith("../")


def extract_tar(tar_path: Path, dest_parent: Path) -> Path:
    """Check, then extract the tar's bundle folder under `dest_parent`; returns its path.

    The members extracted are the ones the check read, from the same open file."""
    with _opened(tar_path) as (handle, tar):
        listing, members = _check(tar_path, handle, tar)
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
            tar.extractall(staging, members=members, filter="data")
            (staging / listing.top).rename(final)
        except tarfile.TarError as exc:
            raise _unreadable(tar_path, exc) from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return final

"""Unpack image filesystems into a scratch root, safely: a tar from `docker export` (one flat
filesystem) or the layers of a `docker save` archive, applied in order with their whiteouts.

Every member lands inside the destination, whatever its name or the links before it:
- names are cleaned: a leading `/` or `./` is dropped, and a name with a `..` part is skipped;
- parent directories are resolved inside the destination as a chroot would (an absolute link
  is re-rooted, `..` stops at the root), so a layer cannot write through a link to the host;
- a file never replaces what a link points to: an existing entry is removed first and the file
  is created with O_EXCL | O_NOFOLLOW;
- links are stored as they are and never followed while writing;
- device nodes and FIFOs are skipped (a scan needs none, and creating them needs privileges);
- files the caller's `names_only` picks (a scan's sources, bytecode and text, which it never
  opens) are kept as names in `placeholders`, not written: nine in ten of an image's files are
  such, and creating, then removing, each of them was most of a scan's time.
`tarfile`'s own extraction filters are not used: the 'data' filter refuses absolute links, which
every root filesystem has, and the checks above are the ones a root needs.
"""

from __future__ import annotations

import errno
import io
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from sglx.errors import SglxError

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
_MAX_LINKS = 40
_PROGRESS_BYTES = 512 << 20
_STREAM_READ = 1 << 20


@dataclass
class ExtractStats:
    members: int = 0
    bytes: int = 0
    skipped: dict[str, int] = field(default_factory=dict)  # why -> how many

    def skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


class IterStream(io.RawIOBase):
    """A readable file over an iterator of byte chunks (the Docker SDK's export stream)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


class RootWriter:
    """Writes tar members into `root` under the rules of the module docstring."""

    def __init__(
        self,
        root: Path,
        progress: Callable[[str], None],
        names_only: Callable[[str], bool] = lambda name: False,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = str(root.resolve())
        self.progress = progress
        self.names_only = names_only
        self.stats = ExtractStats()
        self._dirs: dict[str, str] = {"/": "/"}  # virtual dir -> canonical virtual dir
        # host dir -> names of the regular files kept as names only; such a name has nothing
        # on disk, and each new entry at its path releases it first (`_replace`).
        self._held: dict[str, set[str]] = {}
        self._next_report = _PROGRESS_BYTES

    @property
    def placeholders(self) -> Mapping[str, frozenset[str]]:
        """Canonical virtual dir -> the regular files in it that were not written."""
        cut = len(self.root)
        return {
            (host[cut:] or "/"): frozenset(names) for host, names in self._held.items() if names
        }

    # -- one layer or one flat tar --------------------------------------------------------

    def apply(self, fileobj: IO[bytes], *, whiteouts: bool) -> None:
        """Apply one tar stream (plain or compressed) on top of what is already in the root."""
        created: set[str] = set()  # entries this layer made: opaque dirs keep them
        try:
            # 1 MiB reads, not tarfile's 10 KiB records: a sixth less unpack time (cpu image).
            with tarfile.open(fileobj=fileobj, mode="r|*", bufsize=_STREAM_READ) as archive:
                for member in archive:
                    self._member(archive, member, whiteouts, created)
        except tarfile.TarError as exc:
            raise ValueError(f"not a readable tar stream ({exc})") from None
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise SglxError(
                f"no space left to unpack the image's files under {self.root}",
                hint="a scan unpacks the whole filesystem (about the image's size) into "
                "$TMPDIR and removes it afterwards; free space there or point TMPDIR at a "
                "larger disk",
                code="environment",
            ) from None

    def _member(
        self, archive: tarfile.TarFile, member: tarfile.TarInfo, whiteouts: bool, created: set[str]
    ) -> None:
        self.stats.members += 1
        vpath = clean_name(member.name)
        if vpath is None:
            self.stats.skip("unsafe name")
            return
        if vpath == "/":
            return
        parent, name = posixpath.split(vpath)
        if whiteouts and name.startswith(WHITEOUT):
            self._whiteout(parent, name, created)
            return
        host_parent = self._dir(parent)
        if host_parent is None:
            self.stats.skip("parent is not a directory")
            return
        target = f"{host_parent}/{name}" if host_parent != "/" else f"/{name}"
        created.add(vpath)
        if member.isdir():
            self._make_dir(target, member.mode)
        elif member.isreg():
            self._replace(target)
            if self.names_only(name):
                self._held.setdefault(host_parent, set()).add(name)
            else:
                self._write_file(archive, member, target)
        elif member.issym():
            self._replace(target)
            Path(target).symlink_to(member.linkname)
        elif member.islnk():
            self._replace(target)
            self._hard_link(member.linkname, target)
        else:
            self.stats.skip("device node or fifo")

    def _write_file(self, archive: tarfile.TarFile, member: tarfile.TarInfo, target: str) -> None:
        source = archive.extractfile(member)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(target, flags, (member.mode & 0o777) | 0o600)
        with os.fdopen(fd, "wb") as out:
            if source is not None:
                shutil.copyfileobj(source, out, 1 << 20)
        self.stats.bytes += member.size
        if self.stats.bytes >= self._next_report:
            self._next_report += _PROGRESS_BYTES
            self.progress(f"unpacked {self.stats.bytes >> 20} MiB ({self.stats.members} entries)")

    def _hard_link(self, linkname: str, target: str) -> None:
        source_v = clean_name(linkname)
        parent = None if source_v is None else self._dir(posixpath.dirname(source_v))
        if source_v is None or parent is None:
            self.stats.skip("hard link outside the root")
            return
        source = f"{parent.rstrip('/')}/{posixpath.basename(source_v)}"
        if self._is_held(source):
            head, _, name = target.rpartition("/")
            self._held.setdefault(head, set()).add(name)
            return
        try:
            os.link(source, target, follow_symlinks=False)
        except OSError:
            self.stats.skip("hard link to a missing file")

    def _make_dir(self, target: str, mode: int) -> None:
        if self._is_held(target):
            self._replace(target)
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            Path(target).mkdir(mode=(mode & 0o777) | 0o700)
            return
        if not stat.S_ISDIR(st.st_mode):
            self._replace(target)
            Path(target).mkdir(mode=(mode & 0o777) | 0o700)

    def _replace(self, target: str) -> None:
        """Remove what is at `target` (never following a link) so a new entry can take its place."""
        head, _, name = target.rpartition("/")
        held = self._held.get(head)
        if held is not None and name in held:
            held.discard(name)
            return
        try:
            st = os.lstat(target)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(target)
            for folder in [f for f in self._held if f == target or f.startswith(target + "/")]:
                del self._held[folder]
        else:
            Path(target).unlink()
        self._dirs = {"/": "/"}

    def _whiteout(self, parent: str, name: str, created: set[str]) -> None:
        host_parent = self._dir(parent, create=False)
        if host_parent is None:
            return
        if name == OPAQUE:  # hide everything the lower layers put in this directory
            prefix = "" if parent == "/" else parent
            for entry in Path(host_parent).iterdir():
                if f"{prefix}/{entry.name}" not in created:
                    self._replace(str(entry))
            held = self._held.get(host_parent)
            if held:
                held -= {n for n in held if f"{prefix}/{n}" not in created}
            return
        hidden = name[len(WHITEOUT) :]
        if hidden and hidden not in (".", ".."):
            self._replace(f"{host_parent.rstrip('/')}/{hidden}")

    # -- paths ----------------------------------------------------------------------------

    def _dir(self, vdir: str, *, create: bool = True) -> str | None:
        """Host path of directory `vdir`, links followed inside the root; made if missing."""
        canonical = self._canonical_dir(vdir, create, 0)
        if canonical is None:
            return None
        return self.root if canonical == "/" else self.root + canonical

    def _canonical_dir(self, vdir: str, create: bool, depth: int) -> str | None:
        vdir = posixpath.normpath(vdir) if vdir not in ("", "/") else "/"
        if vdir.startswith("//"):
            vdir = vdir[1:]
        if vdir in self._dirs:
            return self._dirs[vdir]
        if depth > _MAX_LINKS:
            return None
        head, name = posixpath.split(vdir)
        parent = self._canonical_dir(head, create, depth)
        if parent is None:
            return None
        here = f"{parent.rstrip('/')}/{name}"
        host = self.root + here
        if self._is_held(host):
            return None  # a regular file
        try:
            st = os.lstat(host)
        except FileNotFoundError:
            if not create:
                return None
            Path(host).mkdir(mode=0o755)
            st = os.lstat(host)
        if stat.S_ISLNK(st.st_mode):
            link = str(Path(host).readlink())
            target = link if link.startswith("/") else f"{parent.rstrip('/')}/{link}"
            found = self._canonical_dir(target, create, depth + 1)
        elif stat.S_ISDIR(st.st_mode):
            found = here
        else:
            found = None
        if found is not None:
            self._dirs[vdir] = found
        return found

    def _is_held(self, host: str) -> bool:
        head, _, name = host.rpartition("/")
        return name in self._held.get(head, ())


def clean_name(name: str) -> str | None:
    """The virtual path of a tar member name, None if it tries to leave the root."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None
    return "/" + "/".join(parts)

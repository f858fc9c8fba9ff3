"""Unpack image filesystems into a scratch root, safely: a tar from `docker export` (one flat
filesystem) or the layers of a `docker save` archive, applied in order with their whiteouts.

Every member lands inside the destination, whatever its name or the links before it:
- names are cleaned: a leading `/` or `./` is dropped, and a name with a `..` part is skipped;
- parent directories are resolved inside the destination as a chroot would (an absolute link
  is re-rooted, `..` stops at the root, at most MAX_LINKS links in one path, in a loop rather
  than a recursion), so a layer cannot write through a link to the host;
- a file never replaces what a link points to: an existing entry is removed first and the file
  is created with O_EXCL | O_NOFOLLOW;
- links are stored as they are and never followed while writing;
- device nodes and FIFOs are skipped (a scan needs none, and creating them needs privileges),
  and so are names with a NUL byte or too long for the file system;
- a compressed layer (gzip, bzip2, xz) is inflated in bounded steps, in constant memory, and a
  layer, or all the layers of one root, that inflates past `max_layer_bytes` or
  `max_total_bytes` is refused (tarfile's own `r|*` decompression inflates each 1 MiB read in
  one piece and then copies what is left of it on every read: quadratic time and memory);
- files the caller's `names_only` picks (a scan's sources, bytecode and text, which it never
  opens) are kept as names in `placeholders`, not written: nine in ten of an image's files are
  such, and creating, then removing, each of them was most of a scan's time.
`tarfile`'s own extraction filters are not used: the 'data' filter refuses absolute links, which
every root filesystem has, and the checks above are the ones a root needs.
"""

from __future__ import annotations

import bz2
import errno
import gzip
import io
import lzma
import os
import posixpath
import stat
import tarfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import IO

from sglx_core.errors import SglxError
from sglx_core.rootfs import Kind, Step, follow
from sglx_core.scratch import remove_tree

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
MAX_LAYER_BYTES = 128 << 30
"""Most bytes one layer's tar may inflate to (the largest real layers are some tens of GiB)."""
MAX_TOTAL_BYTES = 512 << 30
"""Most bytes all the layers of one image may inflate to."""
_PROGRESS_BYTES = 512 << 20
_STREAM_READ = 1 << 20
# First bytes of a compressed layer -> how to inflate it in bounded steps.
_COMPRESSED: tuple[tuple[bytes, str, Callable[[IO[bytes]], io.BufferedIOBase]], ...] = (
    (b"\x1f\x8b", "gzip", lambda raw: gzip.GzipFile(fileobj=raw, mode="rb")),
    (b"BZh", "bzip2", lambda raw: bz2.BZ2File(raw, mode="rb")),
    (b"\xfd7zXZ\x00", "xz", lambda raw: lzma.LZMAFile(raw, mode="rb")),  # noqa: SIM115
)
_ZSTD = b"\x28\xb5\x2f\xfd"
_INFLATE_ERRORS = (OSError, EOFError, zlib.error, lzma.LZMAError)


class TooLarge(ValueError):
    """A layer, or an image, that inflates past the bounds its RootWriter was given."""


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
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            try:
                self._pending = memoryview(next(self._chunks))
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size


class _Inflated(io.RawIOBase):
    """The tar bytes of one layer, counted against the bounds as they are read."""

    def __init__(
        self, source: IO[bytes] | io.BufferedIOBase, kind: str, writer: RootWriter
    ) -> None:
        self._source = source
        self._kind = kind
        self._writer = writer
        self._read = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        try:
            data = self._source.read(len(buffer))
        except _INFLATE_ERRORS as exc:
            if self._kind == "tar":
                raise
            raise ValueError(f"not a readable {self._kind} stream ({exc})") from None
        size = len(data)
        buffer[:size] = data
        writer = self._writer
        self._read += size
        writer.inflated += size
        if self._read > writer.max_layer_bytes:
            raise TooLarge(
                f"inflates to more than {_gib(writer.max_layer_bytes)} ({self._kind}); "
                "no real layer is this large"
            )
        if writer.inflated > writer.max_total_bytes:
            raise TooLarge(
                f"brings the image's layers past {_gib(writer.max_total_bytes)} in all "
                f"({self._kind}); no real image is this large"
            )
        return size


def _gib(size: int) -> str:
    return f"{size / (1 << 30):g} GiB" if size >= 1 << 30 else f"{size >> 20} MiB"


def _tar_stream(fileobj: IO[bytes], writer: RootWriter) -> IO[bytes]:
    """The uncompressed tar of a layer, bounded by `writer`'s limits."""
    raw = fileobj if isinstance(fileobj, io.BufferedReader) else None
    if raw is None:
        chunks = iter(partial(fileobj.read, _STREAM_READ), b"")
        raw = io.BufferedReader(IterStream(chunks), _STREAM_READ)
    head = raw.peek(6)[:6]
    if head.startswith(_ZSTD):
        raise ValueError("compressed with zstd, which sglx cannot read")
    for magic, kind, inflate in _COMPRESSED:
        if head.startswith(magic):
            return io.BufferedReader(_Inflated(inflate(raw), kind, writer), _STREAM_READ)
    return io.BufferedReader(_Inflated(raw, "tar", writer), _STREAM_READ)


class RootWriter:
    """Writes tar members into `root` under the rules of the module docstring."""

    def __init__(
        self,
        root: Path,
        progress: Callable[[str], None],
        names_only: Callable[[str], bool] = lambda name: False,
        *,
        max_layer_bytes: int = MAX_LAYER_BYTES,
        max_total_bytes: int = MAX_TOTAL_BYTES,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = str(root.resolve())
        self.progress = progress
        self.names_only = names_only
        self.max_layer_bytes = max_layer_bytes
        self.max_total_bytes = max_total_bytes
        self.inflated = 0  # tar bytes read from every layer so far
        self.stats = ExtractStats()
        self._dirs: dict[str, Step] = {}  # virtual dir -> where it led (directories only)
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
        stream = _tar_stream(fileobj, self)
        try:
            # 1 MiB reads, not tarfile's 10 KiB records: a sixth less unpack time (cpu image).
            with tarfile.open(fileobj=stream, mode="r|", bufsize=_STREAM_READ) as archive:
                for member in archive:
                    try:
                        self._member(archive, member, whiteouts, created)
                    except OSError as exc:
                        if exc.errno != errno.ENAMETOOLONG:
                            raise
                        self.stats.skip("name too long")
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
            if "\0" in member.linkname:
                self.stats.skip("unsafe name")
                return
            self._replace(target)
            Path(target).symlink_to(member.linkname)
        elif member.islnk():
            self._replace(target)
            self._hard_link(member.linkname, target)
        else:
            self.stats.skip("device node or fifo")

    def _write_file(self, archive: tarfile.TarFile, member: tarfile.TarInfo, target: str) -> None:
        self._create(target, archive.extractfile(member), member.mode)
        self.stats.bytes += member.size
        if self.stats.bytes >= self._next_report:
            self._next_report += _PROGRESS_BYTES
            self.progress(f"unpacked {self.stats.bytes >> 20} MiB ({self.stats.members} entries)")

    def _create(self, target: str, source: IO[bytes] | None, mode: int) -> None:
        """A new regular file at `target` (never through a link) holding what `source` reads."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(target, flags, (mode & 0o777) | 0o600)
        with os.fdopen(fd, "wb") as out:
            while source is not None and (chunk := source.read(_STREAM_READ)):
                out.write(chunk)

    def add_file(self, vpath: str, source: IO[bytes], mode: int = 0o644) -> bool:
        """Write one file at virtual path `vpath` from an archive other than a layer (a wheel),
        under the same rules; False when its name or folder is unsafe (then nothing is written)."""
        clean = clean_name(vpath)
        parent, name = posixpath.split(clean or "/")
        host_parent = None if clean is None or not name else self._dir(parent)
        if host_parent is None:
            return False
        target = f"{host_parent}/{name}" if host_parent != "/" else f"/{name}"
        self._replace(target)
        self._create(target, source, mode)
        return True

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
            remove_tree(Path(target))
            for folder in [f for f in self._held if f == target or f.startswith(target + "/")]:
                del self._held[folder]
        else:
            Path(target).unlink()
        self._dirs = {}

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
        lookup = self._make_missing if create else self._entry
        step = follow(lookup, vdir, self._dirs, _is_dir)
        if step.path is None or step.kind is not Kind.DIR:
            return None
        return self.root if step.path == "/" else self.root + step.path

    def _entry(self, directory: str, name: str) -> tuple[Kind | None, str | None]:
        host = f"{self.root}{directory.rstrip('/')}/{name}"
        if self._is_held(host):
            return Kind.FILE, None  # a regular file kept as its name
        try:
            st = os.lstat(host)
        except FileNotFoundError:
            return None, None
        if stat.S_ISLNK(st.st_mode):
            return Kind.LINK, str(Path(host).readlink())
        return (Kind.DIR if stat.S_ISDIR(st.st_mode) else Kind.FILE), None

    def _make_missing(self, directory: str, name: str) -> tuple[Kind | None, str | None]:
        found = self._entry(directory, name)
        if found[0] is not None:
            return found
        Path(f"{self.root}{directory.rstrip('/')}/{name}").mkdir(mode=0o755)
        return Kind.DIR, None

    def _is_held(self, host: str) -> bool:
        head, _, name = host.rpartition("/")
        return name in self._held.get(head, ())


def _is_dir(step: Step) -> bool:
    return step.kind is Kind.DIR


def clean_name(name: str) -> str | None:
    """The virtual path of a tar member name, None if it tries to leave the root or holds a
    NUL byte (no file system name can)."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts) or "\0" in name:
        return None
    return "/" + "/".join(parts)

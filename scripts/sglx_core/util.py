"""Small helpers shared by the step modules, written once."""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import BinaryIO, cast

from sglx_core.digests import HEX64
from sglx_core.errors import SglxError
from sglx_core.untrusted import file_kind

CHUNK = 1 << 20
_SHA256 = re.compile(f"sha256:({HEX64})")


def sha256_hex(digest: str, what: str) -> str:
    """The 64 hex digits of `digest` ("sha256:" and 64 lowercase hex): the one rule for naming
    a folder after a digest (the JIT cache's per image, the weights store's per manifest), so
    no digest from a record can name a path outside its root."""
    found = _SHA256.fullmatch(digest)
    if found is None:
        raise ValueError(f"{digest!r} is not {what} (sha256: and 64 lowercase hex digits)")
    return found.group(1)


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


def default_jobs(cap: int | None = None) -> int:
    """Worker threads for parallel work: the cores this process may run on (its affinity, as
    a container's cpuset limits it), at most `cap`."""
    cores = max(1, len(os.sched_getaffinity(0)))
    return cores if cap is None else min(cap, cores)


def check_output_file(path: Path, *, label: str = "output file") -> None:
    """Refuse `path` as a place to write unless it is a regular file or does not exist yet.

    sglx writes through a temporary file renamed over the target, and a rename replaces
    whatever the name held: `--out /dev/full` would turn the device into a regular file, and
    `--junitxml` naming a link (to /proc/self/fd/1, or /dev/stdout as root) would replace the
    link. So the name itself is judged (lstat: a symlink is refused, not followed), and only a
    regular file or a new name is written. `label` names the option in the message
    (`--out`). Every write of a user-given file goes through `atomic_write_bytes`, which
    applies this rule; commands call it early as well, so that nothing runs before a refusal.
    """
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise SglxError(
            f"{label} {path}: cannot write there: {exc.strerror}",
            hint="name a regular file, or a path that does not exist yet",
            code="usage",
            path=str(path),
        ) from None
    if not stat.S_ISREG(mode):
        raise SglxError(
            f"{label} {path} is {file_kind(mode)}: sglx writes only to a regular file or to a "
            "path that does not exist yet",
            hint="name a regular file or a new path; sglx replaces the file it writes, so it "
            "never writes through a link or onto a device, a FIFO or a folder",
            code="usage",
            path=str(path),
        )


MAX_NEW_FOLDERS = 64
"""Most missing parent folders sglx creates for one output path (a real one lacks a few)."""


def make_folders(folder: Path, *, label: str = "output folder", mode: int = 0o777) -> None:
    """Create `folder` and its missing parents, walking up then down without recursion
    (`Path.mkdir(parents=True)` recurses once per missing folder: a thousand raised
    RecursionError), at most MAX_NEW_FOLDERS of them; refused with an SglxError naming the
    path when there are more, or the file system says no."""
    missing: list[Path] = []
    current = folder.absolute()
    while not current.is_dir():
        if os.path.lexists(current):
            raise SglxError(
                f"{label} {folder}: {current} is a file, not a folder",
                hint="name a path whose parents are folders",
                code="usage",
                path=str(folder),
            )
        missing.append(current)
        if len(missing) > MAX_NEW_FOLDERS:
            raise SglxError(
                f"{label} {folder}: more than {MAX_NEW_FOLDERS} of its parent folders do not "
                "exist; sglx creates a few, not a tree",
                hint="check the path, or create its parents first",
                code="usage",
                path=str(folder),
            )
        if current.parent == current:
            break
        current = current.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=mode, exist_ok=True)
        except OSError as exc:
            raise SglxError(
                f"{label} {folder}: cannot create {path}: {exc.strerror}",
                hint="name a folder sglx may create, with a shorter name where the file system "
                "refuses a long one",
                code="usage",
                path=str(folder),
            ) from None


def atomic_write_bytes(path: Path, data: bytes, *, label: str = "output file") -> None:
    """Write `data` to `path` through a temporary file (mode 0600) in the same folder, then
    rename; refused, with nothing written, unless `check_output_file` accepts `path`."""
    check_output_file(path, label=label)
    make_folders(path.parent, label=label)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str, *, label: str = "output file") -> None:
    """`atomic_write_bytes` of `text` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"), label=label)


@contextmanager
def scratch_dir(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A temporary folder removed when the block ends, whatever happens in it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        remove_tree(path)


def remove_tree(path: Path) -> None:
    """Remove the folder `path` and all it holds, ignoring errors as `shutil.rmtree` does with
    ignore_errors. shutil recurses once per level, so a tree deeper than Python's recursion
    limit (an unpacked image may hold one) is finished by `_remove_deep`."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        _remove_deep(path)


def _remove_deep(top: Path) -> None:
    """Empty and remove `top` with a loop that holds one folder open at a time: down into the
    first subfolder, up through `..` once a folder is empty. Links are never followed, and a
    folder that cannot be emptied is left (and never entered again)."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(top, flags)
    except OSError:
        return
    below: list[str] = []  # names from `top` down to the open folder
    stuck: set[tuple[int, int]] = set()
    while True:
        child = None
        with suppress(OSError), os.scandir(fd) as entries:
            for entry in entries:
                if not entry.is_dir(follow_symlinks=False):
                    with suppress(OSError):
                        os.unlink(entry.name, dir_fd=fd)
                    continue
                info = entry.stat(follow_symlinks=False)
                if (info.st_dev, info.st_ino) not in stuck:
                    child = entry.name, (info.st_dev, info.st_ino)
                    break
        if child is not None:
            try:
                inner = os.open(child[0], flags, dir_fd=fd)
            except OSError:
                stuck.add(child[1])
                continue
            os.close(fd)
            fd = inner
            below.append(child[0])
            continue
        if not below:
            os.close(fd)
            with suppress(OSError):
                top.rmdir()
            return
        info = os.fstat(fd)
        parent = os.open("..", flags, dir_fd=fd)
        os.close(fd)
        fd = parent
        try:
            os.rmdir(below.pop(), dir_fd=fd)
        except OSError:
            stuck.add((info.st_dev, info.st_ino))


def run_streaming(
    argv: Sequence[str],
    *,
    on_line: Callable[[str], None],
    timeout: float,
    what: str,
    hint: str,
) -> None:
    """Run `argv`, hand each output line to `on_line`; on failure show the tail of the output.

    A watchdog kills the process after `timeout` seconds even if it prints nothing.
    """
    tail: list[str] = []
    try:
        proc = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except FileNotFoundError:
        raise SglxError(f"{argv[0]} not found", hint=hint, code="environment") from None
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        for line in proc.stdout or ():
            tail = [*tail[-19:], line.rstrip()]
            on_line(tail[-1])
        proc.wait()
    finally:
        watchdog.cancel()
        if proc.stdout is not None:
            proc.stdout.close()
    if proc.returncode != 0:
        joined = "\n    ".join(tail)
        timed_out = proc.returncode == -signal.SIGKILL
        problem = (
            f"took longer than {timeout:.0f} s"
            if timed_out
            else (f"failed (exit {proc.returncode})")
        )
        raise SglxError(
            f"{what} {problem}; last output:\n    {joined}", hint=hint, code="environment"
        )

"""Scratch folders: made for one step and removed after it, however deep the tree it left."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path


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

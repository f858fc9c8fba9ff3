"""Files and folders sglx writes for the user: the output path checked before any work,
folders created bounded, and atomic writes (a temporary file in the folder, renamed over)."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from sglx_core.errors import SglxError
from sglx_core.untrusted import file_kind


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


def atomic_write_bytes(
    path: Path, data: bytes, *, label: str = "output file", mode: int = 0o600
) -> None:
    """Write `data` to `path` through a temporary file (`mode`, 0600 unless another reader
    needs it) in the same folder, then rename; refused, with nothing written, unless
    `check_output_file` accepts `path`."""
    check_output_file(path, label=label)
    make_folders(path.parent, label=label)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(
    path: Path, text: str, *, label: str = "output file", mode: int = 0o600
) -> None:
    """`atomic_write_bytes` of `text` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"), label=label, mode=mode)

"""A bundle as given on the command line: its folder, or the tar of it unpacked safely first."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sglx.bundle.tarsafe import extract_tar
from sglx.progress import Progress
from sglx_core.errors import SglxError
from sglx_core.scratch import scratch_dir


@contextmanager
def bundle_folder(path: Path, progress: Progress) -> Iterator[Path]:
    """The bundle folder at `path`; a `.tar` is checked member by member, then unpacked into
    a hidden folder beside it that is removed when the block ends."""
    if path.is_dir():
        yield path
        return
    if not path.is_file():
        raise SglxError(
            f"{path} does not exist",
            hint="pass a bundle folder, or the .tar written by `sglx bundle create --tar`",
            code="usage",
            path=str(path),
        )
    progress(f"checking the members of {path.name} before unpacking it")
    with scratch_dir(".sglx-bundle-unpack-", parent=path.parent.absolute()) as scratch:
        folder = extract_tar(path, scratch)
        yield folder

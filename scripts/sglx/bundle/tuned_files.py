"""A tuned set (sglx tuned capture) carried in a bundle at tuned/: its files and manifest
copied and hashed, checked against the manifest the set was loaded with."""

from __future__ import annotations

from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.hashed_files import copy_hashed
from sglx.bundle.manifest import FileEntry
from sglx.progress import Progress
from sglx_core import tuned
from sglx_core.errors import SglxError
from sglx_core.tuned import TunedSet


def copy_tuned(tuned_set: TunedSet | None, stage: Path, progress: Progress) -> list[FileEntry]:
    """The tuned set's files and manifest, copied to tuned/ (checked when it was loaded)."""
    if tuned_set is None:
        return []
    records = {r.name: r.sha256 for r in tuned_set.manifest.files}
    names = [tuned.MANIFEST, *records]
    progress(f"copying the tuned set {tuned_set.digest} ({len(records)} files)")
    (stage / layout.TUNED).mkdir()
    entries = []
    for name in names:
        path = f"{layout.TUNED}/{name}"
        copied = copy_hashed(tuned_set.folder / name, stage / path)
        if name in records and copied.sha256 != records[name]:
            raise SglxError(
                f"{tuned_set.folder / name} changed while the bundle was made",
                hint="leave the tuned set alone while `bundle create` runs, then run it again",
                code="usage",
                path=str(tuned_set.folder / name),
            )
        entries.append(FileEntry(path=path, size=copied.size, sha256=copied.sha256, kind="tuned"))
    return entries

"""The install record: what `sglx bundle install` has done, kept outside the bundle.

One JSON file per bundle under the install's state folder, named by the sha256 of the
bundle's `bundle.json`. A file counts as verified only while its inode, size, mtime and ctime
are those it had when it was hashed: editing a file (or the bundle's metadata) changes its
ctime, which no user can set back, so the record cannot be forged by editing the bundle. The
record is rewritten atomically after each step, so a kill at any point loses at most the step
in progress.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglx.bundle.layout import MAX_RECORD_BYTES
from sglx.bundle.manifest import FileEntry
from sglx.errors import SglxError
from sglx.untrusted import read_json
from sglx.util import atomic_write_text

SAVE_EVERY_S = 1.0


def stamp(info: os.stat_result) -> list[int]:
    return [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]


@dataclass
class InstallRecord:
    path: Path
    verified: dict[str, list[Any]] = field(default_factory=dict)
    steps: dict[str, Any] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _saved: float = 0.0

    @classmethod
    def load(cls, state: Path, manifest_sha256: str, *, fresh: bool) -> InstallRecord:
        path = state / f"bundle-{manifest_sha256}.json"
        record = cls(path=path)
        if fresh or not path.is_file():
            return record
        try:
            document = read_json(path, what="install record", max_bytes=MAX_RECORD_BYTES)
            record.verified = dict(document.get("verified", {}))
            record.steps = dict(document.get("steps", {}))
        except (SglxError, ValueError, TypeError, AttributeError):
            return cls(path=path)  # an unreadable record is no record: work is redone
        return record

    def is_verified(self, entry: FileEntry, info: os.stat_result) -> bool:
        return self.verified.get(entry.path) == [entry.sha256, *stamp(info)]

    def mark_verified(self, entry: FileEntry, info: os.stat_result) -> None:
        with self._lock:
            self.verified[entry.path] = [entry.sha256, *stamp(info)]
            if time.monotonic() - self._saved >= SAVE_EVERY_S:
                self._save_locked()

    def step_done(self, name: str, value: Any) -> None:
        with self._lock:
            self.steps[name] = value
            self._save_locked()

    def save(self) -> None:
        with self._lock:
            self._save_locked()

    def _save_locked(self) -> None:
        document = {"format": "sglx-install-record", "verified": self.verified, "steps": self.steps}
        atomic_write_text(self.path, json.dumps(document, indent=1, sort_keys=True) + "\n")
        self._saved = time.monotonic()

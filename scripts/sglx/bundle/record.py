"""The install record: one file per installed bundle, written and read by every door.

Three doors install a bundle: `sglx bundle install`, the bundle's own `install.sh` (coreutils
only) and the Ansible role `bundle_install`. Each writes the same record, in the same folder:
`STATE/sha256-<hex>.json`, named by the sha256 of the bundle's `bundle.json` (the bundle's
digest). STATE is `--state` (sglx and install.sh), `bundle_install_state_dir` (the role), else
`$SGLX_STATE_DIR`, else `/var/lib/sglx/bundles`. Each door reads it to say "already
installed", and the host checks read it to say a host's bundle was installed.

`FIELDS` is the format, defined once: `render` writes it, install.sh's writer is generated
from it (`sglx.bundle.install_sh`), and a unit test holds the role's writer and reader to it.
The layout is fixed, one field per line and one verified file per line, so that install.sh
can read the verified lines back with grep alone.

A verified file counts only while its device, inode, size, mtime and ctime are those it had
when it was hashed (stat taken before hashing): editing a file (or the bundle's metadata)
changes its ctime, which no user can set back, so the record cannot be forged by editing the
bundle, and editing `bundle.json` names another record. The record is rewritten atomically
after each step, so a kill at any point loses at most the step in progress.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglx.bundle import layout
from sglx.bundle.manifest import BundleManifest, FileEntry, sha256_bytes
from sglx_core.digests import DIGEST
from sglx_core.errors import SglxError
from sglx_core.hashing import file_stamp
from sglx_core.output_files import atomic_write_text
from sglx_core.untrusted import open_regular, read_json

FORMAT = "sglx-install-record"
VERSION = 1
DEFAULT_STATE = "/var/lib/sglx/bundles"
STATE_ENV = "SGLX_STATE_DIR"
# The doors, as the `door` field names them.
DOORS = ("sglx", "install.sh", "bundle_install")
SAVE_EVERY_S = 1.0
_DIGEST = re.compile(DIGEST)

# The format, in the order the file lists it; `verified` is last (install.sh appends its lines).
FIELDS: dict[str, str] = {
    "format": f'"{FORMAT}"',
    "version": f"{VERSION}: a reader refuses any other",
    "bundle_digest": '"sha256:<hex>" of bundle.json: the key (the file is named by it)',
    "sums": '"sha256:<hex>" of the SHA256SUMS that was checked; null until verified',
    "arch": "the bundle's arch",
    "image_ref": "the image reference",
    "image_id": "the image id loaded into the engine; null until it is loaded",
    "bundle_path": "the bundle folder installed from",
    "door": "who wrote it: " + ", ".join(DOORS),
    "installed_at": "UTC time the install finished (YYYY-MM-DDTHH:MM:SSZ); null until then",
    "steps": "sglx's optional steps (venv, weights) and what they installed; {} elsewhere",
    "verified": "bundle path -> [sha256, st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns]",
}


def default_state() -> Path:
    """$SGLX_STATE_DIR, else /var/lib/sglx/bundles: outside any bundle, beside the engine."""
    return Path(os.environ.get(STATE_ENV) or DEFAULT_STATE)


def file_name(digest: str) -> str:
    """`sha256-<hex>.json` for the digest `sha256:<hex>` (the role: `replace(':', '-')`)."""
    return digest.replace(":", "-") + ".json"


def now_utc() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def render(document: dict[str, Any]) -> str:
    """The record's text in its fixed layout: ` "field": JSON,` lines in FIELDS order, then
    `  "path": [sha256, dev, ino, size, mtime_ns, ctime_ns]` lines sorted by path."""
    lines = ["{"]
    for name in FIELDS:
        if name != "verified":
            lines.append(f" {json.dumps(name)}: {json.dumps(document.get(name), sort_keys=True)},")
    lines.append(' "verified": {')
    entries = sorted(document.get("verified", {}).items())
    for number, (path, value) in enumerate(entries, start=1):
        comma = "," if number < len(entries) else ""
        lines.append(f"  {json.dumps(path)}: {json.dumps(value)}{comma}")
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def _keyed(document: Any, digest: str) -> bool:
    """A record of this format and version, keyed by `digest`."""
    return (
        isinstance(document, dict)
        and document.get("format") == FORMAT
        and document.get("version") == VERSION
        and document.get("bundle_digest") == digest
    )


def installed(document: Any, digest: str) -> bool:
    """Whether a parsed record says the bundle `digest` was installed: its format and version,
    the digest it is keyed by, a loaded image id and the time it finished."""
    return (
        _keyed(document, digest)
        and isinstance(document.get("image_id"), str)
        and _DIGEST.fullmatch(document["image_id"]) is not None
        and isinstance(document.get("installed_at"), str)
    )


def stamp(info: os.stat_result) -> list[int]:
    """The record's form of the file's stamp (sglx_core.hashing.file_stamp): a JSON list."""
    return list(file_stamp(info))


@dataclass
class InstallRecord:
    path: Path
    digest: str
    verified: dict[str, list[Any]] = field(default_factory=dict)
    steps: dict[str, Any] = field(default_factory=dict)
    facts: dict[str, Any] = field(default_factory=dict)
    # What the record said when loaded, when it said the bundle was installed.
    before: dict[str, Any] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _saved: float = 0.0

    @classmethod
    def load(cls, state: Path, manifest_sha256: str, *, fresh: bool) -> InstallRecord:
        digest = f"sha256:{manifest_sha256}"
        path = state / file_name(digest)
        record = cls(path=path, digest=digest)
        if fresh or not path.is_file():
            return record
        try:
            document = read_json(path, what="install record", max_bytes=layout.MAX_RECORD_BYTES)
        except (SglxError, ValueError):
            return record  # an unreadable record is no record: work is redone
        if not _keyed(document, digest):
            return record  # another format, or not this bundle's: no record
        verified, steps = document.get("verified"), document.get("steps")
        record.verified = dict(verified) if isinstance(verified, dict) else {}
        record.steps = dict(steps) if isinstance(steps, dict) else {}
        record.facts = {k: document.get(k) for k in FIELDS if k not in ("verified", "steps")}
        if installed(document, digest):
            record.before = {k: document[k] for k in ("door", "installed_at", "image_id")}
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

    def image_loaded(self, bundle: Path, manifest: BundleManifest) -> None:
        """The engine holds the bundle's image: name it, and what was verified to load it."""
        sums = bundle / layout.SUMS
        with open_regular(sums, what="checksum list") as f:
            sums_sha = sha256_bytes(f.read(layout.MAX_MANIFEST_BYTES + 1))
        with self._lock:
            self.facts.update(
                sums=f"sha256:{sums_sha}",
                arch=manifest.arch,
                image_ref=manifest.image.ref,
                image_id=manifest.image.id,
                bundle_path=str(bundle.absolute()),
            )
            self._save_locked()

    def finish(self, door: str = "sglx") -> None:
        """Every step is done: the record now says the bundle is installed."""
        with self._lock:
            self.facts.update(door=door, installed_at=now_utc())
            self._save_locked()

    def save(self) -> None:
        with self._lock:
            self._save_locked()

    def _save_locked(self) -> None:
        document = {
            **self.facts,
            "format": FORMAT,
            "version": VERSION,
            "bundle_digest": self.digest,
            "door": self.facts.get("door") or "sglx",
            "steps": self.steps,
            "verified": self.verified,
        }
        atomic_write_text(self.path, render(document), label="install record")
        self._saved = time.monotonic()

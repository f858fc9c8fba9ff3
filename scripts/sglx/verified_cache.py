"""A per-user record of files already hashed, so re-checking a multi-GB folder costs nothing
when nothing in it changed, and cannot be talked into vouching for a file that did change.

Why it is shaped like this:

- It lives outside the artefact it vouches for (``$SGLX_CACHE_DIR``, else
  ``$XDG_CACHE_HOME/sglx``, else ``~/.cache/sglx``): a wheelhouse carried in from elsewhere
  brings no say over what counts as verified.
- An entry is trusted only while the file's identity is unchanged: device, inode, size,
  ``mtime_ns`` and ``ctime_ns``. A user can set mtime back (``touch -d``) but not ctime, and
  every write, rename or ``utime`` moves ctime on. The expected sha256 and a context (the
  lock digest) are part of the key too.
- Each entry carries an HMAC-SHA256 under a 32-byte per-user key kept beside it (mode 0600), so
  an entry edited or written by hand does not verify and the file is hashed again.
- Hashes of files changed within `RACY_MARGIN_NS` of hashing are not recorded (as git's "racy"
  index entries): a same-size write in the same timestamp tick would keep the identity.

Anything odd about the cache (missing, unreadable, too big, malformed, wrong owner or loose
modes) makes it empty, never an error: the cost is hashing again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import os
import secrets
import stat
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglx_core.hashing import file_stamp
from sglx_core.output_files import atomic_write_text

CACHE_DIR_ENV = "SGLX_CACHE_DIR"
KEY_NAME = "hmac.key"
KEY_BYTES = 32
FORMAT_VERSION = 1
MAX_CACHE_BYTES = 16 << 20
MAX_ENTRIES = 50_000
RACY_MARGIN_NS = 1_000_000_000

log = logging.getLogger(__name__)


def cache_dir() -> Path:
    """Where sglx keeps per-user caches: $SGLX_CACHE_DIR, $XDG_CACHE_HOME/sglx or ~/.cache/sglx."""
    override = os.environ.get(CACHE_DIR_ENV)
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "sglx"


def cacheable(before: os.stat_result, after: os.stat_result, started_ns: int) -> bool:
    """Whether a hash taken between `before` and `after` (hashing began at `started_ns`) may be
    recorded: the file did not change while it was read, nor just before."""
    return (
        file_stamp(before) == file_stamp(after) and after.st_ctime_ns < started_ns - RACY_MARGIN_NS
    )


def _private_file(fd: int) -> bool:
    """A regular file owned by this user that nobody else may read or write."""
    st = os.fstat(fd)
    return stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _read_private(path: Path, limit: int) -> bytes | None:
    """The bytes of `path` if it is a private regular file (no symlink) of at most `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not _private_file(fd) or os.fstat(fd).st_size > limit:
            log.debug("%s is not a private file of at most %d bytes: not trusted", path, limit)
            return None
        return handle.read(limit + 1)


def _write_private_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path` with mode 0600, through a temporary file renamed into place."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)  # mkstemp: mode 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _private_dir(path: Path) -> bool:
    """Create `path` (mode 0700) if needed; usable only when this user owns it and nobody else
    may write in it."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _key(folder: Path) -> bytes | None:
    """The per-user HMAC key, made now when missing or not private (which voids old entries)."""
    path = folder / KEY_NAME
    key = _read_private(path, KEY_BYTES)
    if key is not None and len(key) == KEY_BYTES:
        return key
    key = secrets.token_bytes(KEY_BYTES)
    try:
        _write_private_bytes(path, key)
    except OSError as exc:
        log.debug("cannot write %s (%s): no verified cache", path, exc)
        return None
    return key


@dataclass
class VerifiedCache:
    """The hashes this user already checked for one kind of artefact (e.g. "wheels")."""

    path: Path
    key: bytes
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)
    changed: bool = False

    @classmethod
    def open(cls, name: str) -> VerifiedCache | None:
        """The cache called `name`, or None when no private cache folder can be had."""
        folder = cache_dir()
        if not _private_dir(folder):
            log.debug("%s is not a private folder of this user: no verified cache", folder)
            return None
        key = _key(folder)
        if key is None:
            return None
        path = folder / f"{name}-verified.json"
        return cls(path=path, key=key, entries=_load_entries(path))

    def _mac(self, path: Path, st: os.stat_result, sha256: str, context: str) -> str:
        message = json.dumps(
            [FORMAT_VERSION, str(path), *file_stamp(st), sha256, context], separators=(",", ":")
        )
        return hmac.new(self.key, message.encode(), hashlib.sha256).hexdigest()

    def vouches(self, path: Path, st: os.stat_result, sha256: str, context: str) -> bool:
        """Whether `path`, as `st` describes it now, was hashed to `sha256` under `context`."""
        entry = self.entries.get(str(path))
        mac = entry.get("mac") if isinstance(entry, dict) else None
        return isinstance(mac, str) and hmac.compare_digest(
            mac, self._mac(path, st, sha256, context)
        )

    def remember(self, path: Path, st: os.stat_result, sha256: str, context: str) -> None:
        self.entries[str(path)] = {
            "dev": st.st_dev,
            "ino": st.st_ino,
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns,
            "sha256": sha256,
            "context": context,
            "at": time.time_ns(),
            "mac": self._mac(path, st, sha256, context),
        }
        self.changed = True

    def save(self) -> bool:
        """Write the entries back (merged with what another run wrote meanwhile), mode 0600;
        False when that was not possible, which only costs hashing again next time."""
        if not self.changed:
            return True
        merged = {**_load_entries(self.path), **self.entries}
        if len(merged) > MAX_ENTRIES:
            newest = sorted(merged.items(), key=lambda kv: _at(kv[1]), reverse=True)
            merged = dict(newest[:MAX_ENTRIES])
        text = json.dumps({"version": FORMAT_VERSION, "entries": merged}, sort_keys=True)
        try:
            atomic_write_text(self.path, text + "\n")  # atomic_write_text: mkstemp, mode 0600
        except OSError as exc:
            log.debug("cannot write %s (%s)", self.path, exc)
            return False
        self.changed = False
        return True


def _at(entry: Any) -> int:
    at = entry.get("at") if isinstance(entry, dict) else None
    return at if isinstance(at, int) else 0


def _load_entries(path: Path) -> dict[str, dict[str, Any]]:
    data = _read_private(path, MAX_CACHE_BYTES)
    if data is None:
        return {}
    try:
        loaded = json.loads(data)
    except ValueError:
        return {}
    if not isinstance(loaded, dict) or loaded.get("version") != FORMAT_VERSION:
        return {}
    entries = loaded.get("entries")
    if not isinstance(entries, dict):
        return {}
    return {k: v for k, v in entries.items() if isinstance(k, str) and isinstance(v, dict)}

"""A wheelhouse: the folder holding exactly the wheels a lock names, each checked by sha256.

`fetch` fills one on the connected side with pip (resumable: wheels already present with the
right hash are kept, damaged ones are fetched again); `verify` proves one complete before an
offline install, naming any missing or tampered wheel. Hashes already checked are kept in the
per-user `VerifiedCache` (outside the wheelhouse, keyed on inode, size, mtime and ctime, HMAC
signed), so re-checking a multi-GB wheelhouse costs nothing when it did not change; ``full``
trusts no cache. The old in-wheelhouse cache file (`LEGACY_CACHE`) is never read.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sglx.progress import Progress
from sglx.verified_cache import VerifiedCache, cacheable
from sglx.wheels.lockfile import Lock, Wheel
from sglx.wheels.target import Target
from sglx_core.errors import SglxError
from sglx_core.hashing import sha256_file

# Written into wheelhouses by older sglx, keyed on size and mtime: forgeable, so never read;
# `fetch` deletes it.
LEGACY_CACHE = ".sglx-verified.json"
SHOW_HASHING_BYTES = 50_000_000
PIP_TIMEOUT_S = 7200


@dataclass(frozen=True)
class Problem:
    wheel: Wheel
    kind: str  # "missing" | "tampered"
    detail: str


@dataclass(frozen=True)
class Verification:
    """What `verify` found, and how: which wheels it hashed and which the cache vouched for."""

    problems: tuple[Problem, ...]
    hashed: tuple[str, ...]
    cached: tuple[str, ...]
    cache: Path | None  # the cache consulted; None with ``full`` or when none is usable


def verify(lock: Lock, folder: Path, progress: Progress, *, full: bool = False) -> Verification:
    """Check every locked wheel in `folder`; ``full`` re-hashes all of them, trusting no cache
    (what it hashes still refreshes the cache)."""
    cache = VerifiedCache.open("wheels")
    trusted = None if full else cache
    problems: list[Problem] = []
    hashed: list[str] = []
    cached: list[str] = []
    for index, wheel in enumerate(lock.wheels, start=1):
        path = (folder / wheel.filename).resolve()
        if not path.is_file():
            problems.append(Problem(wheel, "missing", f"{wheel.filename} is not in {folder}"))
            continue
        before = path.stat()
        if trusted is not None and trusted.vouches(path, before, wheel.sha256, lock.digest):
            cached.append(wheel.filename)
            continue
        if before.st_size > SHOW_HASHING_BYTES:
            progress(
                f"[{index}/{len(lock.wheels)}] hashing {wheel.filename} "
                f"({before.st_size / 1e6:.0f} MB)"
            )
        started_ns = time.time_ns()
        actual = sha256_file(path)
        hashed.append(wheel.filename)
        if actual != wheel.sha256:
            problems.append(
                Problem(
                    wheel,
                    "tampered",
                    f"{wheel.filename}: sha256 {actual} does not match the lock's {wheel.sha256}",
                )
            )
            continue
        after = path.stat()
        if cache is not None and cacheable(before, after, started_ns):
            cache.remember(path, after, wheel.sha256, lock.digest)
    if cache is not None:
        cache.save()
    return Verification(
        problems=tuple(problems),
        hashed=tuple(hashed),
        cached=tuple(cached),
        cache=None if trusted is None else trusted.path,
    )


def require_complete(
    lock: Lock, folder: Path, progress: Progress, *, full: bool = False
) -> Verification:
    """Fail, naming each missing or tampered wheel, unless `folder` holds the whole lock."""
    if not folder.is_dir():
        raise SglxError(
            f"no wheelhouse at {folder}",
            code="wheelhouse_missing",
            hint=f"fill it on a connected machine: sglx wheels fetch --arch "
            f"{lock.arch} --dest {folder}, then carry it in",
        )
    checked = verify(lock, folder, progress, full=full)
    if checked.problems:
        lines = "\n    ".join(f"{p.kind}: {p.detail}" for p in checked.problems)
        raise SglxError(
            f"the wheelhouse {folder} does not match the {lock.arch} lock:\n    {lines}",
            hint=f"re-fetch on a connected machine (sglx wheels fetch --arch {lock.arch}); "
            "never edit a wheelhouse by hand",
            code="wheelhouse_mismatch",
        )
    return checked


def fetch(lock: Lock, lock_path: Path, target: Target, dest: Path, progress: Progress) -> int:
    """Download every locked wheel into `dest` with pip; returns how many were downloaded."""
    dest.mkdir(parents=True, exist_ok=True)
    (dest / LEGACY_CACHE).unlink(missing_ok=True)
    damaged = [p for p in verify(lock, dest, progress).problems if p.kind == "tampered"]
    for problem in damaged:
        progress(f"removing damaged {problem.wheel.filename}")
        (dest / problem.wheel.filename).unlink()
    missing = [w for w in lock.wheels if not (dest / w.filename).is_file()]
    if not missing:
        progress(f"all {len(lock.wheels)} wheels already present")
        return 0
    progress(f"downloading {len(missing)} of {len(lock.wheels)} wheels into {dest}")
    argv = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--require-hashes",
        "--disable-pip-version-check",
        "--progress-bar",
        "off",
        "--dest",
        str(dest),
        *target.pip_args(),
        "-r",
        str(lock_path),
    ]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    done = 0
    tail: list[str] = []
    for line in proc.stdout or ():
        line = line.strip()
        tail = [*tail[-9:], line]
        if line.startswith(("Saved ", "File was already downloaded")):
            done += 1
            progress(f"[{done}/{len(lock.wheels)}] {Path(line.split()[-1]).name}")
    if proc.wait(timeout=PIP_TIMEOUT_S) != 0:
        raise SglxError(
            "pip download failed:\n    " + "\n    ".join(tail),
            hint="check the index is reachable; rerun to resume (wheels already "
            "downloaded are kept)",
            code="environment",
        )
    problems = verify(lock, dest, progress).problems
    if problems:
        raise SglxError(
            "downloaded wheels do not match the lock: " + "; ".join(p.detail for p in problems),
            code="wheelhouse_mismatch",
            hint="the index serves different files than when the lock was made; "
            "regenerate the lock",
        )
    return len(missing)

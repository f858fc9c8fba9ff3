"""A wheelhouse: the folder holding exactly the wheels a lock names, each checked by sha256.

`fetch` fills one on the connected side with pip (resumable: wheels already present with the
right hash are kept, damaged ones are fetched again); `verify` proves one complete before an
offline install, naming any missing or tampered wheel. Verified hashes are cached by size and
mtime so re-checking a multi-GB wheelhouse costs nothing when it did not change.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from sglx.errors import SglxError
from sglx.progress import Progress
from sglx.util import atomic_write_text, sha256_file
from sglx.wheels.lockfile import Lock, Wheel
from sglx.wheels.target import Target

CACHE = ".sglx-verified.json"
PIP_TIMEOUT_S = 7200


@dataclass(frozen=True)
class Problem:
    wheel: Wheel
    kind: str  # "missing" | "tampered"
    detail: str


def verify(lock: Lock, folder: Path, progress: Progress) -> list[Problem]:
    cache_file = folder / CACHE
    try:
        cache = json.loads(cache_file.read_text())
    except (OSError, ValueError):
        cache = {}
    problems: list[Problem] = []
    fresh: dict[str, list[object]] = {}
    for index, wheel in enumerate(lock.wheels, start=1):
        path = folder / wheel.filename
        if not path.is_file():
            problems.append(Problem(wheel, "missing", f"{wheel.filename} is not in {folder}"))
            continue
        stat = path.stat()
        key = [stat.st_size, stat.st_mtime_ns]
        cached = cache.get(wheel.filename)
        if cached == [*key, wheel.sha256]:
            fresh[wheel.filename] = cached
            continue
        if stat.st_size > 50_000_000:
            progress(
                f"[{index}/{len(lock.wheels)}] hashing {wheel.filename} "
                f"({stat.st_size / 1e6:.0f} MB)"
            )
        actual = sha256_file(path)
        if actual != wheel.sha256:
            problems.append(
                Problem(
                    wheel,
                    "tampered",
                    f"{wheel.filename}: sha256 {actual} does not match the lock's {wheel.sha256}",
                )
            )
            continue
        fresh[wheel.filename] = [*key, wheel.sha256]
    if fresh != cache and os.access(folder, os.W_OK):
        atomic_write_text(cache_file, json.dumps(fresh, indent=1, sort_keys=True) + "\n")
    return problems


def require_complete(lock: Lock, folder: Path, progress: Progress) -> None:
    """Fail, naming each missing or tampered wheel, unless `folder` holds the whole lock."""
    if not folder.is_dir():
        raise SglxError(
            f"no wheelhouse at {folder}",
            code="wheelhouse_missing",
            hint=f"fill it on a connected machine: sglx wheels fetch --arch "
            f"{lock.arch} --dest {folder}, then carry it in",
        )
    problems = verify(lock, folder, progress)
    if problems:
        lines = "\n    ".join(f"{p.kind}: {p.detail}" for p in problems)
        raise SglxError(
            f"the wheelhouse {folder} does not match the {lock.arch} lock:\n    {lines}",
            hint=f"re-fetch on a connected machine (sglx wheels fetch --arch {lock.arch}); "
            "never edit a wheelhouse by hand",
            code="wheelhouse_mismatch",
        )


def fetch(lock: Lock, lock_path: Path, target: Target, dest: Path, progress: Progress) -> int:
    """Download every locked wheel into `dest` with pip; returns how many were downloaded."""
    dest.mkdir(parents=True, exist_ok=True)
    damaged = [p for p in verify(lock, dest, progress) if p.kind == "tampered"]
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
    problems = verify(lock, dest, progress)
    if problems:
        raise SglxError(
            "downloaded wheels do not match the lock: " + "; ".join(p.detail for p in problems),
            code="wheelhouse_mismatch",
            hint="the index serves different files than when the lock was made; "
            "regenerate the lock",
        )
    return len(missing)

"""The node-local weights store on a host (sglx_core.weights_store): an entry checked against
its files, an entry placed.

An entry is `<root>/<64 hex of the weights digest>`: exactly the converted model's files and its
manifest, each a regular file of the recorded size and sha256. `problem` says why an entry is
not that (missing, a link, a file too many or too few, a size or sha256 that differs, a
manifest of other weights); `place` copies the files into a hidden staging folder beside it,
re-checks every sha256 of the copies and renames the folder into place, the entry it replaces
(one found damaged) renamed aside first and removed last. Entries of other digests are never
touched: image versions share them, and a rollback finds its own in place. `sglx bundle
install` and `sglx image build` use this module; install.sh does the same in sh.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from sglx.progress import Progress
from sglx.weights.signature import SIGNATURE_NAME
from sglx_core.errors import SglxError
from sglx_core.hashing import sha256_file
from sglx_core.weights_manifest import MANIFEST_NAME, manifest_digest, read_manifest
from sglx_core.weights_store import ROOT_ENV, entry_name

BLOCK = 4 << 20
DIR_MODE = 0o755
FILE_MODE = 0o644


@dataclass(frozen=True)
class StoredFile:
    """One file of an entry: its name in the folder, size and sha256 (hex)."""

    name: str
    size: int
    sha256: str


def root(given: Path | None, default: str | None) -> Path | None:
    """The store's root: `given` (--models-root), else $SGLX_MODELS_ROOT, else `default` (the
    profile's weights.store, from the bundle's run spec); None when none is known."""
    if given is not None:
        return given.absolute()
    if env := os.environ.get(ROOT_ENV):
        return Path(env).absolute()
    return None if default is None else Path(default)


def entry(store_root: Path, digest: str) -> Path:
    return store_root / entry_name(digest)


def folder_files(folder: Path) -> list[StoredFile]:
    """The files of a converted model folder as its manifest lists them, plus the manifest
    itself and, when the weights were signed (`sglx weights sign`), their OMS signature (both
    hashed here): what an entry of these weights holds, so the signature travels with them."""
    manifest = read_manifest(folder)
    files = [StoredFile(f.name, f.size, f.sha256) for f in manifest.files]
    for name in (MANIFEST_NAME, SIGNATURE_NAME):
        path = folder / name
        if name == MANIFEST_NAME or (path.is_file() and not path.is_symlink()):
            files.append(StoredFile(name, path.stat().st_size, sha256_file(path)))
    return files


def problem(
    place: Path, files: Sequence[StoredFile], digest: str | None = None, jobs: int = 1
) -> str | None:
    """Why `place` is not an entry holding exactly `files` (and, given `digest`, a manifest of
    that digest), or None when it is. Every file is hashed (`jobs` threads)."""
    try:
        info = place.lstat()
    except FileNotFoundError:
        return "is not there"
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        return "is not a folder (a link or a file is there)"
    want = {f.name: f for f in files}
    present = {child.name for child in place.iterdir()}
    extra, missing = sorted(present - set(want)), sorted(set(want) - present)
    if missing:
        return f"lacks {missing[0]}" + (f" and {len(missing) - 1} more" if len(missing) > 1 else "")
    if extra:
        return f"holds {extra[0]}, which its manifest does not list"
    for name, record in want.items():
        found = (place / name).lstat()
        if not stat.S_ISREG(found.st_mode):
            return f"{name} is not a regular file"
        if found.st_size != record.size:
            return f"{name} is {found.st_size} bytes, its manifest says {record.size}"
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        hashes = dict(zip(want, pool.map(lambda n: sha256_file(place / n), want), strict=True))
    for name, record in want.items():
        if hashes[name] != record.sha256:
            return f"{name} does not match its sha256 (it changed after it was placed)"
    if digest is not None:
        try:
            found_digest = manifest_digest(place)
        except SglxError as exc:
            return exc.message
        if found_digest != digest:
            return f"its manifest is of the weights {found_digest}, not {digest}"
    return None


def place(target: Path, sources: Sequence[tuple[Path, StoredFile]], progress: Progress) -> None:
    """Copy each source file into a staging folder beside `target` under its stored name,
    check the sha256 of every copy, then rename the folder to `target` (an entry already there
    is renamed aside first and removed after)."""
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    for stale in parent.glob(f".{target.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = parent / f".{target.name}.partial-{uuid.uuid4().hex[:8]}"
    staging.mkdir(mode=DIR_MODE)
    old = None
    try:
        staging.chmod(DIR_MODE)
        for number, (source, record) in enumerate(sources, start=1):
            copy = staging / record.name
            sha = _copy_hashed(source, copy)
            if sha != record.sha256:
                raise SglxError(
                    f"{source} does not match its sha256 while it is copied into the weights store",
                    hint="run install again; do not edit the bundle while it installs",
                    code="environment",
                    path=str(source),
                )
            copy.chmod(FILE_MODE)
            progress(f"placed {number}/{len(sources)} weight files in {target} ({record.name})")
        if target.exists() or target.is_symlink():
            old = parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            target.rename(old)
        staging.rename(target)
    except BaseException:
        if old is not None and not (target.exists() or target.is_symlink()):
            old.rename(target)
            old = None
        shutil.rmtree(staging, ignore_errors=True)
        raise
    if old is not None:
        if old.is_symlink() or not old.is_dir():
            old.unlink(missing_ok=True)
        else:
            shutil.rmtree(old, ignore_errors=True)


def _copy_hashed(source: Path, dest: Path) -> str:
    digest = hashlib.sha256()
    with source.open("rb") as reader, dest.open("wb") as writer:
        while block := reader.read(BLOCK):
            digest.update(block)
            writer.write(block)
    return digest.hexdigest()

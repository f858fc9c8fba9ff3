"""`sglx wheels lock | fetch | verify`: each returns a Result for the CLI to render."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from sglx.progress import Progress
from sglx.wheels import lockfile, wheelhouse
from sglx.wheels.resolve import resolve
from sglx.wheels.target import target_of
from sglx_core.errors import SglxError
from sglx_core.output_files import atomic_write_text
from sglx_core.profile import Profile, images_dir
from sglx_core.profile.loader import display_path
from sglx_core.report import Finding, Result, Table

WHEELHOUSE_ENV = "SGLX_WHEELHOUSE"


def lock_path(arch: str) -> Path:
    return lockfile.locks_dir(images_dir()) / f"{arch}.txt"


def default_wheelhouse(arch: str) -> Path:
    """$SGLX_WHEELHOUSE/<arch> if set, else wheelhouse/<arch> in the checkout."""
    root = os.environ.get(WHEELHOUSE_ENV)
    return Path(root) / arch if root else images_dir().parent / "wheelhouse" / arch


def lock_at_hand(arch: str | None) -> lockfile.Lock | None:
    """The checkout's lock of `arch` as it reads, or None (no arch, no lock, unreadable): for
    the wheels' hashes in an SBOM, used only where its digest is the image's lock label, so a
    stale lock does no harm."""
    if not arch:
        return None
    try:
        return lockfile.parse(lock_path(arch))
    except (SglxError, OSError):
        return None


def load_lock(profile: Profile) -> lockfile.Lock:
    """The arch's lock, refused when stale or when it would replace the base's packages."""
    path = lock_path(profile.arch)
    lock = lockfile.parse(path)
    if lock.inputs != lockfile.inputs_digest(profile):
        raise SglxError(
            f"{display_path(path)} is stale: the {profile.arch} profile's python, base or "
            "sglang section changed since it was generated",
            hint=f"regenerate it: sglx wheels lock --arch {profile.arch}",
            code="lock_stale",
        )
    replaced = sorted(lock.names() & {lockfile.canonical(n) for n in profile.base.provides})
    if replaced:
        raise SglxError(
            f"{display_path(path)} would replace {', '.join(replaced)}, which the base "
            f"{profile.base.ref} provides",
            hint="regenerate the lock with `sglx wheels lock`, which leaves them out",
            code="lock_replaces_base",
        )
    return lock


def lock(
    profile: Profile,
    find_links: Sequence[Path],
    check: bool,
    progress: Progress,
    *,
    uploaded_prior_to: str | None = None,
    drift: bool = False,
) -> Result:
    """Write the arch's lock, resolved from the index as it was at `uploaded_prior_to` (default:
    now). `check` resolves again with the cutoff the committed lock records and compares: the
    same answer on any day. `drift` (with `check`) also resolves against today's index and lists
    what a new lock would change, as information only."""
    path = lock_path(profile.arch)
    committed = lockfile.parse(path) if check and path.exists() else None
    cutoff = uploaded_prior_to or (
        committed.header.get(lockfile.UPLOADED_PRIOR_TO) if committed else None
    )
    if check and committed is not None and not isinstance(cutoff, str):
        return _unpinned_lock(profile, path)
    cutoff = lockfile.upload_cutoff(cutoff, what="the cutoff") if cutoff else lockfile.now_cutoff()
    new = resolve(profile, find_links=find_links, uploaded_prior_to=cutoff, progress=progress)
    text = _lock_text(new)
    data: dict[str, object] = {
        "lock": str(path),
        "wheels": len(new.wheels),
        "digest": new.digest,
        "sglang": new.header["sglang"],
        lockfile.UPLOADED_PRIOR_TO: cutoff,
        "notes": list(new.notes),
    }
    if check:
        current = path.read_text() if path.is_file() else ""
        lines: list[str] = []
        findings: tuple[Finding, ...] = ()
        if current != text:
            rewritten = _rewritten_history(
                profile, find_links, committed, new, current, cutoff, progress
            )
            if rewritten is None:
                findings = (
                    Finding(
                        "lock_stale",
                        f"{display_path(path)} differs from a fresh resolution of its inputs "
                        f"with uploads before {cutoff}",
                        hint=f"sglx wheels lock --arch {profile.arch}",
                    ),
                )
            else:
                data["index_rewrote_history"] = rewritten
                lines += [
                    f"information: the index now lists {len(rewritten)} wheel(s) as uploaded "
                    f"before {cutoff} that a resolution then did not take (uploaded with an "
                    "earlier date, or yanked and restored since); the locked wheels still "
                    "resolve with their hashes, so the lock stands and a new lock takes them:",
                    *(f"  {name}: {was} -> {now}" for name, was, now in rewritten),
                ]
        lines.insert(0, f"{display_path(path)}: {'up to date' if not findings else 'stale'}")
        if drift:
            newer = _drift(profile, find_links, new, progress)
            data["drift"] = newer
            lines += (
                [
                    f"information: today's index would change {len(newer)} wheel(s) (a new lock "
                    "takes them; this lock stays valid):",
                    *(f"  {name}: {was} -> {now}" for name, was, now in newer),
                ]
                if newer
                else ["information: today's index resolves to the same wheels"]
            )
        return Result(("wheels", "lock"), data=data, findings=findings, lines=tuple(lines))
    atomic_write_text(path, text)
    rows = tuple((w.name, w.version, w.filename) for w in new.wheels)
    return Result(
        ("wheels", "lock"),
        data=data,
        tables=(
            Table(
                ("package", "version", "wheel"),
                rows,
                title=f"{display_path(path)}: {len(rows)} wheels, uploads before {cutoff}",
            ),
        ),
        lines=tuple(f"note: {n}" for n in new.notes),
    )


def _lock_text(lock: lockfile.Lock) -> str:
    """The lock file's text, naming the profile it was generated from."""
    return lockfile.render(lock, f"images/{lock.arch}/arch.yaml")


def _unpinned_lock(profile: Profile, path: Path) -> Result:
    return Result(
        ("wheels", "lock"),
        data={"lock": str(path)},
        findings=(
            Finding(
                "lock_unpinned",
                f"{display_path(path)} records no {lockfile.UPLOADED_PRIOR_TO} cutoff, so no "
                "later resolution can reproduce it",
                hint=f"regenerate it: sglx wheels lock --arch {profile.arch}",
            ),
        ),
    )


def _rewritten_history(
    profile: Profile,
    find_links: Sequence[Path],
    committed: lockfile.Lock | None,
    fresh: lockfile.Lock,
    committed_text: str,
    cutoff: str,
    progress: Progress,
) -> list[tuple[str, str, str]] | None:
    """Where a fresh resolution differs from the committed lock only because the index changed
    what it held before the cutoff (a file published with an earlier upload time, a yank
    undone), the committed pins still resolve to exactly the committed lock: then the changed
    wheels, else None (the lock is stale: its inputs, or its text, changed)."""
    if committed is None or committed.inputs != fresh.inputs:
        return None
    progress("the fresh resolution differs: asking whether the locked wheels still resolve")
    try:
        again = resolve(
            profile,
            find_links=find_links,
            uploaded_prior_to=cutoff,
            progress=progress,
            pins=committed.wheels,
        )
    except SglxError:
        return None
    if _lock_text(again) != committed_text:
        return None
    return _changed(committed, fresh)


def _changed(was_lock: lockfile.Lock, now_lock: lockfile.Lock) -> list[tuple[str, str, str]]:
    """(name, version in `was_lock`, version in `now_lock`) for each wheel that differs; '-'
    stands for absent."""
    was = {lockfile.canonical(w.name): w.version for w in was_lock.wheels}
    now = {lockfile.canonical(w.name): w.version for w in now_lock.wheels}
    return [
        (name, was.get(name, "-"), now.get(name, "-"))
        for name in sorted(was.keys() | now.keys())
        if was.get(name) != now.get(name)
    ]


def _drift(
    profile: Profile, find_links: Sequence[Path], locked: lockfile.Lock, progress: Progress
) -> list[tuple[str, str, str]]:
    """(name, locked version, today's version) for each wheel a resolution now would change;
    '-' stands for absent."""
    today = resolve(
        profile, find_links=find_links, uploaded_prior_to=lockfile.now_cutoff(), progress=progress
    )
    return _changed(locked, today)


def fetch(profile: Profile, dest: Path | None, progress: Progress) -> Result:
    current = load_lock(profile)
    dest = dest or default_wheelhouse(profile.arch)
    downloaded = wheelhouse.fetch(
        current, lock_path(profile.arch), target_of(profile), dest, progress
    )
    size = sum((dest / w.filename).stat().st_size for w in current.wheels)
    return Result(
        ("wheels", "fetch"),
        data={
            "wheelhouse": str(dest),
            "wheels": len(current.wheels),
            "downloaded": downloaded,
            "bytes": size,
        },
        lines=(
            f"{dest}: {len(current.wheels)} wheels ({size / 1e9:.2f} GB), {downloaded} "
            "downloaded now, all hashes match the lock",
        ),
    )


def verify(
    profile: Profile, folder: Path | None, progress: Progress, *, full: bool = False
) -> Result:
    """Check a wheelhouse against the lock; the report says which wheels were hashed now and
    which the per-user verified cache vouched for (none with ``full``)."""
    current = load_lock(profile)
    folder = folder or default_wheelhouse(profile.arch)
    if not folder.is_dir():
        raise SglxError(
            f"no wheelhouse at {folder}",
            code="wheelhouse_missing",
            hint=f"sglx wheels fetch --arch {profile.arch} --dest {folder}",
        )
    checked = wheelhouse.verify(current, folder, progress, full=full)
    findings = tuple(
        Finding(f"wheel_{p.kind}", p.detail, path=str(folder / p.wheel.filename))
        for p in checked.problems
    )
    how = (
        "all hashed now (--full)"
        if full
        else f"{len(checked.hashed)} hashed now, {len(checked.cached)} vouched for by the "
        "verified cache"
    )
    lines = [
        f"{folder}: {len(current.wheels) - len(checked.problems)} of "
        f"{len(current.wheels)} wheels match the lock ({how})"
    ]
    if (folder / wheelhouse.LEGACY_CACHE).exists():
        lines.append(
            f"note: ignored {wheelhouse.LEGACY_CACHE}, an old in-wheelhouse cache that is no "
            "longer trusted; it can be deleted"
        )
    return Result(
        ("wheels", "verify"),
        data={
            "wheelhouse": str(folder),
            "wheels": len(current.wheels),
            "problems": len(checked.problems),
            "full": full,
            "hashed": list(checked.hashed),
            "cached": list(checked.cached),
            "cache": None if checked.cache is None else str(checked.cache),
        },
        findings=findings,
        lines=tuple(lines),
    )

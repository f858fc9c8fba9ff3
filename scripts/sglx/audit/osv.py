"""An OSV database the site carries in, read offline and bounded: a folder of advisories
(`*.json`), OSV's per-ecosystem exports (`all.zip`, as published at
https://osv-vulnerabilities.storage.googleapis.com/ECOSYSTEM/all.zip), or one of either.

Only the advisories of the packages asked about are kept. A range is judged as the OSV schema
says (https://ossf.github.io/osv-schema/#evaluation): its events sorted by version, `introduced`
turns affected on, `fixed` (at or below the version) and `last_affected` (below it) turn it off;
an `introduced` of "0" is below every version; `versions` lists affected versions outright.
ECOSYSTEM ranges use the ecosystem's ordering, SEMVER ranges SemVer 2.0's; GIT ranges name
commits, not versions, and are not judged here.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglx.audit import versions
from sglx_core.errors import SglxError
from sglx_core.untrusted import parse_json, read_bounded

MAX_ADVISORY_BYTES = 8 << 20  # the largest OSV advisories (kernel CVEs) are some hundred KB
MAX_ZIP_MEMBERS = 1_000_000  # Debian's all.zip holds some 100k advisories
MAX_ZIP_BYTES = 16 << 30  # all members of one export, inflated
MAX_FILES = 2_000_000
MAX_DEPTH = 4
FIX = (
    "give --db a folder of OSV advisories (*.json) or OSV's per-ecosystem exports (all.zip), "
    "as downloaded from osv-vulnerabilities.storage.googleapis.com"
)
RANKS = {"none": 0, "low": 1, "medium": 2, "high": 3, "critical": 4}
SEVERITY_WORDS = {"moderate": "medium", "important": "high"}


@dataclass(frozen=True)
class Hit:
    """An advisory that affects one version of one package."""

    id: str
    aliases: tuple[str, ...]
    summary: str
    severity: str  # none, low, medium, high, critical or unknown
    fixed: str | None  # the first version that fixes it, where the advisory names one


@dataclass
class Database:
    """Advisories by (ecosystem family, package name as the ecosystem compares names)."""

    advisories: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    read: int = 0  # advisories read
    notes: list[str] = field(default_factory=list)

    def hits(self, ecosystem: str, name: str, version: str) -> list[Hit]:
        found = []
        for advisory in self.advisories.get((_family(ecosystem), package_key(ecosystem, name)), []):
            for affected in advisory.get("affected") or []:
                package = affected.get("package") or {}
                if not _same_ecosystem(str(package.get("ecosystem", "")), ecosystem):
                    continue
                if package_key(ecosystem, str(package.get("name", ""))) != package_key(
                    ecosystem, name
                ):
                    continue
                judged = _affects(affected, ecosystem, version, advisory, self.notes)
                if judged is not None:
                    found.append(_hit(advisory, affected, judged))
                    break
        return found


def package_key(ecosystem: str, name: str) -> str:
    """How the ecosystem compares package names (PyPI: PEP 503's normalised name)."""
    if _family(ecosystem) == "PyPI":
        from packaging.utils import canonicalize_name

        return str(canonicalize_name(name))
    return name


def load(path: Path, wanted: set[tuple[str, str]]) -> Database:
    """The advisories under `path` naming a (family, package key) of `wanted`."""
    if not path.exists():
        raise SglxError(f"--db {path} does not exist", hint=FIX, code="usage")
    database = Database()
    for name, raw in _documents(path):
        database.read += 1
        advisory = parse_json(raw, path=Path(name), what="OSV advisory", hint=FIX)
        if not isinstance(advisory, dict) or not isinstance(advisory.get("id"), str):
            raise SglxError(f"{name}: not an OSV advisory (a JSON object with an id)", hint=FIX)
        if advisory.get("withdrawn"):
            continue
        keys = set()
        for affected in advisory.get("affected") or []:
            package = affected.get("package") if isinstance(affected, dict) else None
            if isinstance(package, dict):
                ecosystem, pkg = str(package.get("ecosystem", "")), str(package.get("name", ""))
                keys.add((_family(ecosystem), package_key(ecosystem, pkg)))
        for key in keys & wanted:
            database.advisories.setdefault(key, []).append(advisory)
    if database.read == 0:
        raise SglxError(f"--db {path} holds no OSV advisory", hint=FIX, code="usage")
    return database


def _documents(path: Path) -> Iterator[tuple[str, bytes]]:
    files = [path] if path.is_file() else _walk(path)
    for file in files:
        if file.suffix == ".zip":
            yield from _zip_members(file)
        elif file.suffix == ".json":
            yield str(file), read_bounded(file, what="OSV advisory", max_bytes=MAX_ADVISORY_BYTES)


def _walk(top: Path) -> Iterator[Path]:
    count = 0
    pending = [(top, 0)]
    while pending:
        folder, depth = pending.pop()
        for entry in sorted(folder.iterdir()):
            if entry.is_symlink():
                continue
            if entry.is_dir() and depth < MAX_DEPTH:
                pending.append((entry, depth + 1))
            elif entry.is_file() and entry.suffix in (".json", ".zip"):
                count += 1
                if count > MAX_FILES:
                    raise SglxError(f"--db {top} holds more than {MAX_FILES} files", hint=FIX)
                yield entry


def _zip_members(file: Path) -> Iterator[tuple[str, bytes]]:
    try:
        archive = zipfile.ZipFile(file)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SglxError(f"{file}: not a readable zip archive ({exc})", hint=FIX) from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_ZIP_MEMBERS:
            raise SglxError(f"{file} holds {len(members)} members, more than any OSV export")
        total = 0
        for member in members:
            if member.is_dir() or not member.filename.endswith(".json"):
                continue
            if member.file_size > MAX_ADVISORY_BYTES:
                raise SglxError(f"{file}: {member.filename} is larger than any OSV advisory")
            total += member.file_size
            if total > MAX_ZIP_BYTES:
                raise SglxError(f"{file} inflates past {MAX_ZIP_BYTES >> 30} GiB", hint=FIX)
            with archive.open(member) as handle:
                raw = handle.read(MAX_ADVISORY_BYTES + 1)  # the header's size may lie
            if len(raw) > MAX_ADVISORY_BYTES:
                raise SglxError(f"{file}: {member.filename} is larger than any OSV advisory")
            yield f"{file}:{member.filename}", raw


def _family(ecosystem: str) -> str:
    return ecosystem.partition(":")[0]


def _same_ecosystem(advisory: str, ours: str) -> bool:
    """`Debian:12` advisories apply to Debian 12; a bare `Debian` to every release."""
    if _family(advisory) != _family(ours):
        return False
    release = advisory.partition(":")[2]
    return not release or release == ours.partition(":")[2]


def _affects(
    affected: dict[str, Any], ecosystem: str, version: str, advisory: dict[str, Any],
    notes: list[str],
) -> str | None:  # fmt: skip
    """None when `version` is not affected; else the fixing version ('' where none is named)."""
    listed = affected.get("versions") or []
    hit = version in listed
    fixed = ""
    for span in affected.get("ranges") or []:
        kind = span.get("type")
        key = versions.ordering(ecosystem) if kind == "ECOSYSTEM" else (
            versions.semver if kind == "SEMVER" else None)  # fmt: skip
        if key is None:
            continue
        judged = _in_range(key, version, span.get("events") or [])
        if judged is None:
            notes.append(f"{advisory['id']}: a {kind} range of {ecosystem} could not be read "
                         f"against version {version}; not judged")  # fmt: skip
            continue
        if judged[0]:
            hit, fixed = True, judged[1] or fixed
    return fixed if hit else None


def _in_range(key: versions.Key, version: str, events: Iterable[Any]) -> tuple[bool, str] | None:
    """OSV's evaluation of one range: (affected, the fix above `version`); None when a version
    in it is unreadable."""
    ours = key(version)
    if ours is None:
        return None
    ordered = []
    for event in events:
        if not isinstance(event, dict) or len(event) != 1:
            return None
        ((kind, value),) = event.items()
        if kind == "limit":
            continue
        if kind == "introduced" and value == "0":
            ordered.append((0, None, kind, value))
            continue
        parsed = key(str(value))
        if parsed is None:
            return None
        ordered.append((1, parsed, kind, str(value)))
    ordered.sort(key=lambda e: (e[0], e[1]) if e[1] is not None else (e[0],))
    affected, fix = False, ""
    for _, parsed, kind, value in ordered:
        if kind == "introduced" and (parsed is None or ours >= parsed):
            affected, fix = True, ""
        elif kind == "fixed" and parsed is not None:
            if ours >= parsed:
                affected = False
            elif affected and not fix:
                fix = value
        elif kind == "last_affected" and parsed is not None and ours > parsed:
            affected = False
    return affected, fix


def _hit(advisory: dict[str, Any], affected: dict[str, Any], fixed: str) -> Hit:
    aliases = tuple(str(a) for a in advisory.get("aliases") or [] if isinstance(a, str))
    return Hit(
        id=str(advisory["id"]),
        aliases=aliases,
        summary=str(advisory.get("summary") or advisory.get("details") or "")[:200],
        severity=severity(advisory, affected),
        fixed=fixed or None,
    )


def severity(advisory: dict[str, Any], affected: dict[str, Any]) -> str:
    """The advisory's qualitative severity: a database's own word (GHSA's `HIGH`, `MODERATE`)
    where it gives one, else the CVSS vector's rating (the `cvss` library), else unknown."""
    for where in (affected.get("ecosystem_specific"), affected.get("database_specific"),
                  advisory.get("database_specific")):  # fmt: skip
        word = str((where or {}).get("severity") or "").lower() if isinstance(where, dict) else ""
        word = SEVERITY_WORDS.get(word, word)
        if word in RANKS:
            return word
    for entry in advisory.get("severity") or []:
        rating = _cvss_rating(entry) if isinstance(entry, dict) else None
        if rating is not None:
            return rating
    return "unknown"


def _cvss_rating(entry: dict[str, Any]) -> str | None:
    from cvss import CVSS3, CVSS4
    from cvss.exceptions import CVSSError

    vector, kind = str(entry.get("score", "")), entry.get("type")
    try:
        if kind == "CVSS_V3":
            return str(CVSS3(vector).severities()[0]).lower()
        if kind == "CVSS_V4":
            return str(CVSS4(vector).severity).lower()
    except CVSSError:
        return None
    return None

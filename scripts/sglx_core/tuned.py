"""Tuned GEMM configurations: the files AITER, PyTorch's TunableOp and hipBLASLt read instead
of searching for the fastest kernel of each shape, carried from the host that tuned them to the
hosts that serve (seed 004: tune once per M, N, K, reuse the results).

A tuned set is a folder of such files and `manifest.json`: each file's name, kind (a rule of
the profile's `tuning.files`), sha256, size, rows and the facts that tie it to hardware and
software (AITER's gfx and cu_num columns, TunableOp's Validator lines, hipBLASLt's Git Version
line), the arch it was checked for, where it was captured, and the set's digest over all of
it. The same checks run when the set is captured (`sglx tuned capture`), carried
(`sglx bundle create --tuned`) and served (sglx-serve, which also checks the host's devices):
a set of another arch is refused at every step, never passed to a library that would pick
kernels that do not exist here.

Every file is untrusted input: read only if regular and within the profile's size bound, at
most `max_files` of them, names matching a rule, rows parsed field by field.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import stat
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from sglx_core import untrusted
from sglx_core.digests import HEX64
from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.profile.schema import TunedFileRule

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
MAX_MANIFEST_BYTES = 1 << 20
MAX_ROW_FIELDS = 64
# The columns every AITER tuned table has (aiter/configs/*_tuned_*.csv): rows are looked up by
# the running card's cu_num, and by gfx where the table has that column.
AITER_KEYS = ("cu_num",)
# TunableOp's first lines (torch/cuda/tunable.py): "Validator,<name>,<value>".
TUNABLEOP_REQUIRED = ("PT_VERSION", "ROCM_VERSION")
HIPBLASLT_HEADER = "Git Version: "
# hipBLASLt's override rows: transA, transB, batch_count, m, n, k, a/b/c/compute types, solution
# index, and in newer files the solution name (UserDrivenTuningParser.hpp HeaderFields).
HIPBLASLT_MIN_FIELDS = 11


class TunedFileRecord(BaseModel):
    """One file of a tuned set, as its manifest records it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    name: str
    rule: str
    sha256: str = Field(pattern=f"^{HEX64}$")
    size: int = Field(ge=0)
    rows: int = Field(ge=0)
    facts: dict[str, list[str]] = Field(default_factory=dict)


class Provenance(BaseModel):
    """Where the set came from: the folder or container, the host, when, and which sglx."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    captured_from: str
    host: str
    captured_at: str
    sglx: str


class TunedManifest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    format: int = Field(ge=FORMAT_VERSION, le=FORMAT_VERSION)
    arch: str
    files: tuple[TunedFileRecord, ...]
    provenance: Provenance

    def digest(self) -> str:
        """sha256 over the manifest's canonical JSON: the set's name on hosts and in bundles."""
        body = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(body.encode()).hexdigest()


@dataclass(frozen=True)
class TunedSet:
    folder: Path
    manifest: TunedManifest

    @property
    def digest(self) -> str:
        return self.manifest.digest()


def rule_for(name: str, profile: Profile) -> tuple[str, TunedFileRule] | None:
    """The profile's rule whose pattern matches file `name`, or None."""
    for rule_name, rule in profile.tuning.files.items():
        if fnmatchcase(name, rule.pattern):
            return rule_name, rule
    return None


def check_file(path: Path, profile: Profile) -> TunedFileRecord:
    """`path` read, parsed and checked against the profile: its record for the manifest."""
    found = rule_for(path.name, profile)
    if found is None:
        raise _refused(path, "is no tuned-configuration file the {arch} profile knows", profile)
    rule_name, rule = found
    raw = untrusted.read_bounded(
        path,
        what=f"tuned {rule.format} file",
        max_bytes=profile.tuning.max_file_bytes,
        hint="a tuned table is at most a few MiB; check that this is the file the library wrote",
    )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise _bad(path, "is not UTF-8 text") from None
    rows, facts = _PARSERS[rule.format](path, text, profile)
    return TunedFileRecord(
        name=path.name,
        rule=rule_name,
        sha256=hashlib.sha256(raw).hexdigest(),
        size=len(raw),
        rows=rows,
        # numbers in numeric order ("80" before "304"), other values in text order
        facts={k: sorted(v, key=lambda x: (len(x), x)) for k, v in facts.items()},
    )


def capture(
    source: Path, out: Path, profile: Profile, *, captured_from: str, host: str, sglx: str
) -> tuple[TunedSet, list[str]]:
    """Copy the tuned files of folder `source` into the new folder `out` with a manifest; the
    names of `source`'s other entries (left behind) come back too."""
    names = _entries(source, profile)
    kept = [n for n in names if rule_for(n, profile) is not None]
    left = [n for n in names if n not in kept]
    if not kept:
        raise SglxError(
            f"{source}: holds no tuned-configuration file the {profile.arch} profile knows "
            f"({', '.join(r.pattern for r in profile.tuning.files.values()) or 'none'})",
            hint="run the tuning first (docs/reference/tuned.md), or name the folder it wrote",
            code="not_found",
            path=str(source),
        )
    records = [check_file(source / name, profile) for name in kept]
    manifest = TunedManifest(
        format=FORMAT_VERSION,
        arch=profile.arch,
        files=tuple(records),
        provenance=Provenance(
            captured_from=captured_from,
            host=host,
            captured_at=datetime.now(UTC).isoformat(timespec="seconds"),
            sglx=sglx,
        ),
    )
    _refuse_other_arch(manifest, profile, source)
    out.mkdir(parents=True)
    for name in kept:
        (out / name).write_bytes((source / name).read_bytes())
    (out / MANIFEST).write_text(json.dumps(manifest.model_dump(mode="json"), indent=2) + "\n")
    return TunedSet(out, manifest), left


def load(folder: Path, profile: Profile) -> TunedSet:
    """The tuned set in `folder`, every file re-read and matched against its manifest record,
    nothing else in the folder, checked for the profile's arch."""
    manifest = read_manifest(folder)
    if manifest.arch != profile.arch:
        raise SglxError(
            f"{folder}: the tuned set was captured for {manifest.arch}, not {profile.arch}",
            hint=f"capture a set on a {profile.arch} host (`sglx tuned capture`), or remove it",
            code="wrong_arch",
            path=str(folder),
        )
    names = set(_entries(folder, profile)) - {MANIFEST}
    listed = {r.name for r in manifest.files}
    if names != listed:
        extra, missing = sorted(names - listed), sorted(listed - names)
        raise _bad(
            folder, f"does not hold what its manifest lists (extra {extra}, missing {missing})"
        )
    for record in manifest.files:
        found = check_file(folder / record.name, profile)
        if found != record:
            raise _bad(
                folder / record.name, "differs from its manifest record (changed since capture)"
            )
    _refuse_other_arch(manifest, profile, folder)
    return TunedSet(folder, manifest)


def read_manifest(folder: Path) -> TunedManifest:
    path = folder / MANIFEST
    fix = "capture the set again with `sglx tuned capture`"
    raw = untrusted.read_bounded(
        path, what="tuned-set manifest", max_bytes=MAX_MANIFEST_BYTES, hint=fix
    )
    return untrusted.parse_model(raw, TunedManifest, path=path, what="tuned-set manifest", hint=fix)


def server_env(tuned: TunedSet, target: str, profile: Profile) -> dict[str, str]:
    """The variables that make the libraries read the set mounted at `target`."""
    env: dict[str, str] = {}
    for record in tuned.manifest.files:
        rule = profile.tuning.files[record.rule]
        for key, value in rule.env.items():
            env[key] = value.replace("{path}", f"{target}/{record.name}").replace(
                "{target}", target
            )
    return env


def unused_on(tuned: TunedSet, compute_units: Iterable[int]) -> list[str]:
    """Files of the set none of whose rows apply to cards of these compute-unit counts (AITER
    looks rows up by the running card's cu_num): a set tuned on other cards of the same arch."""
    here = {str(n) for n in compute_units}
    return [
        f"{r.name}: rows for {', '.join(r.facts['cu_num'])} compute units, none for this host's "
        f"{', '.join(sorted(here))}"
        for r in tuned.manifest.files
        if "cu_num" in r.facts and here and not here & set(r.facts["cu_num"])
    ]


def _refuse_other_arch(manifest: TunedManifest, profile: Profile, where: Path) -> None:
    """Every AITER table must hold rows of this arch: gfx where the table names it, else a
    compute-unit count of the arch's cards."""
    tuning = profile.tuning
    cus = {str(n) for n in tuning.compute_units}
    for record in manifest.files:
        gfx, cu = set(record.facts.get("gfx", [])), set(record.facts.get("cu_num", []))
        if not cu and not gfx:
            continue
        ours = (tuning.gfx in gfx) if gfx else bool(cu & cus)
        if not ours:
            named = f"gfx {', '.join(sorted(gfx))}" if gfx else f"cu_num {', '.join(sorted(cu))}"
            counts = ", ".join(sorted(cus, key=int)) or "?"
            raise SglxError(
                f"{where / record.name}: tuned for other cards ({named}), none of them "
                f"{profile.arch} ({tuning.gfx or '?'}, {counts} compute units)",
                hint=f"capture the set on a {profile.arch} host, or leave this file out",
                code="wrong_arch",
                path=str(where / record.name),
            )


def _entries(folder: Path, profile: Profile) -> list[str]:
    """The names in `folder`, refused when it is no folder, holds a link, a folder or a special
    file, or more entries than a tuned set has."""
    try:
        names = sorted(p.name for p in folder.iterdir())
    except OSError as exc:
        raise SglxError(
            f"{folder}: cannot list the tuned-configuration folder: {exc.strerror or exc}",
            hint="name a folder of tuned files",
            code="not_found",
            path=str(folder),
        ) from None
    if len(names) > profile.tuning.max_files + 1:
        raise _bad(
            folder,
            f"holds {len(names)} entries; a tuned set has at most {profile.tuning.max_files} files",
        )
    for name in names:
        mode = (folder / name).lstat().st_mode
        if not untrusted.is_plain_name(name) or not stat.S_ISREG(mode):
            kind = untrusted.file_kind(mode) if untrusted.is_plain_name(name) else "an odd name"
            raise _bad(folder / name, f"is {kind}; a tuned set holds regular files only")
    return names


def _rows(path: Path, text: str) -> list[list[str]]:
    rows = []
    for number, row in enumerate(csv.reader(io.StringIO(text)), start=1):
        if len(row) > MAX_ROW_FIELDS:
            raise _bad(path, f"line {number} has {len(row)} fields; no tuned table has that many")
        if row:
            rows.append(row)
    return rows


def _aiter(path: Path, text: str, profile: Profile) -> tuple[int, Mapping[str, set[str]]]:
    try:
        rows = _rows(path, text)
    except csv.Error as exc:
        raise _bad(path, f"is not a CSV table ({exc})") from None
    if not rows:
        raise _bad(path, "is empty; an AITER tuned table has a header and one row per shape")
    header, body = rows[0], rows[1:]
    missing = [k for k in AITER_KEYS if k not in header]
    if missing:
        raise _bad(path, f"has no {', '.join(missing)} column; not an AITER tuned table")
    facts: dict[str, set[str]] = {"cu_num": set()}
    columns = {name: header.index(name) for name in ("cu_num", "gfx") if name in header}
    if "gfx" in columns:
        facts["gfx"] = set()
    for number, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise _bad(path, f"line {number} has {len(row)} fields, the header {len(header)}")
        cu = row[columns["cu_num"]]
        if not cu.isdigit():
            raise _bad(path, f"line {number}: cu_num is {cu!r}, not a number")
        facts["cu_num"].add(str(int(cu)))
        if "gfx" in columns:
            facts["gfx"].add(row[columns["gfx"]])
    return len(body), facts


def _tunableop(path: Path, text: str, profile: Profile) -> tuple[int, Mapping[str, set[str]]]:
    try:
        rows = _rows(path, text)
    except csv.Error as exc:
        raise _bad(path, f"is not a TunableOp results file ({exc})") from None
    validators: dict[str, str] = {}
    results = 0
    for number, row in enumerate(rows, start=1):
        if row[0] == "Validator":
            if len(row) != 3:
                raise _bad(path, f"line {number}: a Validator line has 3 fields, not {len(row)}")
            validators[row[1]] = row[2]
        elif len(row) in (3, 4):
            results += 1
        else:
            raise _bad(path, f"line {number} has {len(row)} fields; a TunableOp result has 3 or 4")
    missing = [k for k in TUNABLEOP_REQUIRED if k not in validators]
    if missing:
        raise _bad(
            path,
            f"has no Validator line for {', '.join(missing)}: not a TunableOp "
            "results file of a ROCm stack",
        )
    return results, {f"validator:{k}": {v} for k, v in validators.items()}


def _hipblaslt(path: Path, text: str, profile: Profile) -> tuple[int, Mapping[str, set[str]]]:
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or HIPBLASLT_HEADER not in lines[0]:
        raise _bad(
            path,
            f"does not start with a '{HIPBLASLT_HEADER}' line: not a hipBLASLt "
            "tuning file (hipblaslt-bench writes it to HIPBLASLT_TUNING_FILE)",
        )
    version = lines[0].split(HIPBLASLT_HEADER, 1)[1].strip()
    for number, line in enumerate(lines[1:], start=2):
        fields = line.split(",")
        if len(fields) < HIPBLASLT_MIN_FIELDS or len(fields) > MAX_ROW_FIELDS:
            raise _bad(
                path,
                f"line {number} has {len(fields)} fields; a hipBLASLt override "
                f"has {HIPBLASLT_MIN_FIELDS} or more",
            )
    return len(lines) - 1, {"git_version": {version}}


_PARSERS = {"aiter_csv": _aiter, "tunableop_csv": _tunableop, "hipblaslt_override": _hipblaslt}


def _bad(path: Path, what: str) -> SglxError:
    return SglxError(
        f"{path}: {what}",
        hint="use the file the library wrote, unchanged; capture the set again",
        code="corrupt",
        path=str(path),
    )


def _refused(path: Path, what: str, profile: Profile) -> SglxError:
    known = ", ".join(r.pattern for r in profile.tuning.files.values()) or "none"
    return SglxError(
        f"{path}: {what.format(arch=profile.arch)} (known: {known})",
        hint="leave it out of the set; only files a library of this arch reads are carried",
        code="unknown_file",
        path=str(path),
    )


def describe(record: TunedFileRecord) -> str:
    """The record's hardware and software facts, in words (reports, logs)."""
    parts = []
    if "gfx" in record.facts:
        parts.append("gfx " + ", ".join(record.facts["gfx"]))
    if "cu_num" in record.facts:
        parts.append("cu_num " + ", ".join(record.facts["cu_num"]))
    for key, values in record.facts.items():
        if key.startswith("validator:"):
            parts.append(f"{key.split(':', 1)[1]} {', '.join(values)}")
    if "git_version" in record.facts:
        parts.append("hipBLASLt " + ", ".join(record.facts["git_version"]))
    return "; ".join(parts)


def to_json(tuned: TunedSet) -> dict[str, Any]:
    return {"digest": tuned.digest, **tuned.manifest.model_dump(mode="json")}

"""`sglx bundle audit`: the bundle's SBOM (meta/sbom.cdx.json, checked against its manifest
entry before it is read), its VEX statements (meta/vex.json where it carries one) and the
site's, audited offline against an OSV database (sglx.audit)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sglx.audit import vex
from sglx.audit.report import audit
from sglx.bundle import layout
from sglx.bundle.delta import Bundle, read_bundle
from sglx.progress import Progress
from sglx_core.errors import SglxError
from sglx_core.report import Result
from sglx_core.untrusted import read_bounded

REMAKE = "make the bundle again with the scan (without --no-scan): its SBOM comes from it"


@dataclass(frozen=True)
class AuditPolicy:
    """The audit `bundle verify --audit-db` runs after the files verified: the site's OSV
    database, its VEX documents, and the severity that makes it a finding (None: report only)."""

    db: Path
    vex_files: tuple[Path, ...] = ()
    fail_on: str | None = None


def bundle_sbom(path: Path, what: str) -> tuple[Bundle, bytes]:
    """The bundle and its SBOM's bytes, checked against bundle.json before anything
    reads them (`what` names the command in an error)."""
    bundle = read_bundle(path, what)
    entries = {entry.path: entry for entry in bundle.manifest.files}
    if layout.SBOM not in entries:
        raise SglxError(
            f"{bundle.folder} carries no SBOM ({layout.SBOM}): it was made with --no-scan, or "
            "by an sglx before SBOMs",
            hint=REMAKE,
            code="usage",
        )
    raw = _checked(bundle.folder, layout.SBOM, entries[layout.SBOM].sha256, layout.MAX_SBOM_BYTES)
    return bundle, raw


def audit_bundle(
    path: Path, db: Path, vex_files: Sequence[Path], fail_on: str | None, progress: Progress
) -> Result:
    bundle, sbom = bundle_sbom(path, "audit")
    folder = bundle.folder
    entries = {entry.path: entry for entry in bundle.manifest.files}
    statements = []
    if layout.VEX in entries:
        _checked(folder, layout.VEX, entries[layout.VEX].sha256, vex.MAX_VEX_BYTES)
        statements += vex.read(folder / layout.VEX)
    for file in vex_files:
        statements += vex.read(file)
    return audit(sbom.decode("utf-8", "replace"), str(folder / layout.SBOM), db,
                 statements, fail_on, progress)  # fmt: skip


def _checked(folder: Path, name: str, sha256: str, max_bytes: int) -> bytes:
    raw = read_bounded(folder / name, what=name, max_bytes=max_bytes)
    if hashlib.sha256(raw).hexdigest() != sha256.removeprefix("sha256:"):
        raise SglxError(
            f"{folder / name} does not match its sha256 in bundle.json",
            hint="check the bundle with `sglx bundle verify` and re-copy what it names",
            code="corrupt",
        )
    return raw

"""`sglx bundle verify`: the file check (verify.py), bundle.json's layers against the archive
(image_archive.py), then the dependency scan of the image archive with the arch's rules, as one
report (exit 0 ok, 1 findings, 2 usage or environment).

A delta (bundle.json's image.parent) says which parent it needs, and a bundle without its
base's layers (image.base) which base; such an archive lacks those layers, so its scan is the
report made at create from the whole image. With `--with PARENT` (repeatable) each link of a
delta's chain is checked (sglx.bundle.delta.chain_findings).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sglx.bundle import layout
from sglx.bundle.audit import AuditPolicy
from sglx.bundle.delta import Bundle, chain_findings, describe, read_bundle
from sglx.bundle.given import bundle_folder
from sglx.bundle.image_archive import layer_findings
from sglx.bundle.manifest import BundleManifest
from sglx.bundle.scan_report import NOT_SCANNED, not_scanned, report_findings
from sglx.bundle.verify import FileCheck, SignaturePolicy, check_files
from sglx.progress import Progress
from sglx_core.errors import SglxError
from sglx_core.report import Finding, Result, Table
from sglx_core.sizes import human_bytes


def verify_bundle(
    path: Path,
    *,
    signature: SignaturePolicy,
    scan: bool,
    jobs: int,
    progress: Progress,
    parents: Sequence[Path] = (),
    audit: AuditPolicy | None = None,
) -> Result:
    chain = [read_bundle(parent, "--with") for parent in parents]
    try:
        with bundle_folder(path, progress) as folder:
            return _verify(folder, path, signature, scan, jobs, progress, chain, audit)
    except SglxError as exc:
        if exc.code != "bundle_tar_unsafe":
            raise
        finding = Finding(exc.code, exc.message, None, exc.hint)
        return Result(("bundle", "verify"), data={"path": str(path)}, findings=(finding,))


def _verify(
    folder: Path,
    given: Path,
    signature: SignaturePolicy,
    scan: bool,
    jobs: int,
    progress: Progress,
    chain: Sequence[Bundle] = (),
    audit: AuditPolicy | None = None,
) -> Result:
    started = time.monotonic()
    check = check_files(folder, threads=jobs, progress=progress, signature=signature)
    hashing_s = time.monotonic() - started
    findings = list(check.findings)
    manifest = check.manifest
    if manifest is not None and not findings:
        findings += layer_findings(folder, manifest)
    partial = manifest is not None and bool(manifest.image.referenced())
    scan_status = "skipped (--no-scan)" if not scan else "not run: the files did not verify"
    if scan and not findings and manifest is not None and partial:
        which = "a delta" if manifest.image.parent is not None else "without its base's layers"
        missing = not_scanned(
            f"and its image is not whole here ({which}) to scan it now", "verify with --no-scan"
        )
        findings += report_findings(folder, missing=missing)
        if any(f.code == NOT_SCANNED for f in findings):
            scan_status = f"not scanned ({which}: no report was made at create)"
        else:
            scan_status = "findings" if findings else "ok"
            scan_status += f" ({which}: the report made at create, of the whole image)"
    elif scan and not findings and check.manifest is not None:
        findings += _scan(folder, check, jobs, progress)
        scan_status = "findings" if len(findings) else "ok"
    audit_status, audit_line = "not asked (--audit-db DB)", ""
    if audit is not None and manifest is not None and not check.findings:
        audit_status, audit_line, more = _audit(folder, audit, progress)
        findings += more
    elif audit is not None:
        audit_status = "not run: the files did not verify"
    chain_lines: list[str] = []
    if manifest is not None and chain:
        more, chain_lines = chain_findings(manifest, chain)
        findings += more
    rate = check.hashed_bytes / hashing_s if hashing_s > 0 else 0.0
    data = {
        "path": str(given),
        "arch": None if manifest is None else manifest.arch,
        "image": None if manifest is None else manifest.image.id,
        "files": 0 if manifest is None else len(manifest.files),
        "bytes": check.hashed_bytes,
        "hash_seconds": round(hashing_s, 3),
        "hash_bytes_per_second": round(rate),
        "signed": (folder / layout.SIGNATURE).is_file(),
        "signature_checked": check.signature_checked,
        "attested": _attested(manifest),
        "attestations_checked": check.attestations_checked,
        "scan": scan_status,
        "audit": audit_status,
        **_delta_data(manifest),
    }
    rows = (
        ("files", str(data["files"]), f"{human_bytes(check.hashed_bytes)} hashed"),
        ("speed", f"{hashing_s:.1f} s", f"{human_bytes(int(rate))}/s with {jobs} threads"),
        (
            "signature",
            "checked" if data["signature_checked"] else "not checked",
            "signed" if data["signed"] else "unsigned",
        ),
        (
            "attestations",
            "checked" if check.attestations_checked else "not checked",
            ", ".join(data["attested"]) or "none",
        ),
        ("scan", scan_status, ""),
        ("audit", audit_status, audit_line),
    )
    verdict = "bundle verified" if not findings else f"{len(findings)} problem(s) found"
    if manifest is not None and manifest.image.parent is not None:
        needs = manifest.image.from_parent()
        verdict += (
            f"; it is {describe(manifest.image)} and needs {len(needs)} of its layers "
            f"({human_bytes(sum(n.size for n in needs))}): install that bundle first"
        )
        if not chain:
            verdict += "; --with PARENT checks that the chain is complete"
    if manifest is not None and manifest.image.base is not None:
        from sglx.bundle.base_layers import describe as describe_base

        left = manifest.image.from_base()
        verdict += (
            f"; it leaves out the {len(left)} layers ({human_bytes(sum(x.size for x in left))}) "
            f"of {describe_base(manifest.image.base)}: load that base before installing"
        )
    return Result(
        ("bundle", "verify"),
        data=data,
        tables=(Table(("check", "result", "detail"), rows, title=f"verify of {given}"),),
        lines=(*chain_lines, verdict),
        findings=tuple(findings),
    )


def _audit(folder: Path, policy: AuditPolicy, progress: Progress) -> tuple[str, str, list[Finding]]:
    """The audit's status, its summary line and its findings (an advisory at or above the
    policy's level, unsuppressed), for the verify report."""
    from sglx.bundle.audit import audit_bundle

    result = audit_bundle(folder, policy.db, policy.vex_files, policy.fail_on, progress)
    level = f"fail on {policy.fail_on}" if policy.fail_on else "report only"
    status = ("findings" if result.findings else "ok") + f" ({level})"
    found = [Finding(f.code, f"audit: {f.message}", f.path, f.hint) for f in result.findings]
    return status, result.lines[0] if result.lines else "", found


def _attested(manifest: BundleManifest | None) -> list[str]:
    """The attestations bundle.json lists, by path (sglx.bundle.attestations)."""
    if manifest is None:
        return []
    return [e.path for e in manifest.files if e.path in layout.ATTESTATIONS]


def _delta_data(manifest: BundleManifest | None) -> dict[str, Any]:
    """`parent` and `base` (null for a full bundle) and `needs`: the chain ids the bundle takes
    from them."""
    if manifest is None:
        return {"parent": None, "base": None, "needs": []}
    image = manifest.image
    return {
        "parent": None if image.parent is None else image.parent.model_dump(mode="json"),
        "base": None if image.base is None else image.base.model_dump(mode="json"),
        "needs": [layer.chain_id for layer in image.referenced()],
    }


def _scan(folder: Path, check: FileCheck, jobs: int, progress: Progress) -> list[Finding]:
    from sglx.bundle.scan_target import scan_bundle

    result = scan_bundle(folder, jobs=jobs, progress=progress)
    return [Finding(f.code, f"image scan: {f.message}", f.path, f.hint) for f in result.findings]

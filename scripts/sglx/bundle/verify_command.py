"""`sglx bundle verify`: the file check (verify.py), then the dependency scan of the image
archive with the arch's rules, as one report (exit 0 ok, 1 findings, 2 usage or environment).
"""

from __future__ import annotations

import time
from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.source import bundle_folder
from sglx.bundle.verify import FileCheck, SignaturePolicy, check_files
from sglx.progress import Progress
from sglx_core.errors import SglxError
from sglx_core.report import Finding, Result, Table


def verify_bundle(
    path: Path, *, signature: SignaturePolicy, scan: bool, jobs: int, progress: Progress
) -> Result:
    try:
        with bundle_folder(path, progress) as folder:
            return _verify(folder, path, signature, scan, jobs, progress)
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
) -> Result:
    started = time.monotonic()
    check = check_files(folder, threads=jobs, progress=progress, signature=signature)
    hashing_s = time.monotonic() - started
    findings = list(check.findings)
    scan_status = "skipped (--no-scan)" if not scan else "not run: the files did not verify"
    if scan and not findings and check.manifest is not None:
        findings += _scan(folder, check, jobs, progress)
        scan_status = "findings" if len(findings) else "ok"
    manifest = check.manifest
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
        "scan": scan_status,
    }
    rows = (
        ("files", str(data["files"]), f"{layout.human(check.hashed_bytes)} hashed"),
        ("speed", f"{hashing_s:.1f} s", f"{layout.human(int(rate))}/s with {jobs} threads"),
        (
            "signature",
            "checked" if data["signature_checked"] else "not checked",
            "signed" if data["signed"] else "unsigned",
        ),
        ("scan", scan_status, ""),
    )
    verdict = "bundle verified" if not findings else f"{len(findings)} problem(s) found"
    return Result(
        ("bundle", "verify"),
        data=data,
        tables=(Table(("check", "result", "detail"), rows, title=f"verify of {given}"),),
        lines=(verdict,),
        findings=tuple(findings),
    )


def _scan(folder: Path, check: FileCheck, jobs: int, progress: Progress) -> list[Finding]:
    from sglx.bundle.scan_target import scan_bundle

    result = scan_bundle(folder, jobs=jobs, progress=progress)
    return [Finding(f.code, f"image scan: {f.message}", f.path, f.hint) for f in result.findings]

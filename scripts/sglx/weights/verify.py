"""`sglx weights verify`: is a converted model folder exactly what its manifest says?

Every file the manifest lists must be there, a regular file with its size and sha256; no other
file may be there (a stray shard or an edited config would change what the server loads); and
every shard's header must list the tensors, dtypes and shapes the manifest records. Only files
the manifest lists are opened, and only regular ones (a FIFO would hang the reader). Each
difference is a finding (exit 1). Files are hashed on several threads (hashlib releases the GIL).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sglx.weights.safetensors_io import read_header
from sglx.weights.signature import SIGNATURE_NAME
from sglx_core.errors import SglxError
from sglx_core.hashing import sha256_handle
from sglx_core.report import Finding, Result, Table
from sglx_core.untrusted import open_regular
from sglx_core.weights_manifest import (
    MANIFEST_NAME,
    FileRecord,
    Manifest,
    manifest_digest,
    read_manifest,
)

ProgressFn = Callable[[str], None]
PROGRESS_MIN_BYTES = 64 << 20  # one progress line per file at least this large


def _check_file(folder: Path, record: FileRecord) -> tuple[str, Finding | None]:
    path = folder / record.name
    fix = "re-copy the converted model, or convert it again"
    try:
        handle = open_regular(path, what="weights file", hint=fix)
    except SglxError as exc:
        if exc.code == "not_found":
            return "missing", Finding(
                "missing_file",
                f"{record.name} is listed in the manifest but missing",
                path=str(path),
                hint=fix,
            )
        return "not a file", Finding(exc.code, exc.message, path=str(path), hint=exc.hint)
    with handle:
        size = os.fstat(handle.fileno()).st_size
        if size != record.size:
            return "size differs", Finding(
                "size_mismatch",
                f"{record.name} is {size} bytes, the manifest says {record.size} (cut short or "
                "replaced)",
                path=str(path),
                hint=fix,
            )
        digest = sha256_handle(handle)
        if digest != record.sha256:
            return "sha256 differs", Finding(
                "checksum_mismatch",
                f"{record.name}: sha256 differs from the manifest (the file was changed)",
                path=str(path),
                hint=fix,
            )
    return "ok", None


def _check_headers(folder: Path, manifest: Manifest, damaged: set[str]) -> list[Finding]:
    """Shard headers against the manifest's tensor records (files already found damaged skip)."""
    findings: list[Finding] = []
    expected: dict[str, dict[str, tuple[str, tuple[int, ...]]]] = {}
    for tensor in manifest.tensors:
        expected.setdefault(tensor.file, {})[tensor.name] = (tensor.dtype, tensor.shape)
    listed = {f.name for f in manifest.files}
    for name, tensors in sorted(expected.items()):
        if name not in listed:  # not read: only listed files are opened
            findings.append(
                Finding(
                    "tensor_file_unlisted",
                    f"the manifest puts {len(tensors)} tensor(s) in {name}, which its file list "
                    "does not name",
                    path=str(folder / name),
                    hint="the manifest was edited or damaged; re-copy the converted model, or "
                    "convert it again",
                )
            )
            continue
        if name in damaged:
            continue
        try:
            header = read_header(folder / name)
        except SglxError as exc:
            findings.append(Finding(exc.code, exc.message, path=str(folder / name)))
            continue
        found = {t.name: (t.dtype.code, t.shape) for t in header.tensors}
        if found != tensors:
            differing = sorted(set(found.items()) ^ set(tensors.items()))
            names = sorted({n for n, _ in differing})
            findings.append(
                Finding(
                    "tensor_mismatch",
                    f"{name}: the header's tensors differ from the manifest: "
                    f"{', '.join(names[:5])}{' ...' if len(names) > 5 else ''}",
                    path=str(folder / name),
                )
            )
    return findings


def verify_weights(
    folder: Path, *, jobs: int | None = None, progress: ProgressFn | None = None
) -> Result:
    """Check `folder` against its manifest; findings for every difference."""
    progress = progress or (lambda message: None)
    manifest = read_manifest(folder)
    total = sum(f.size for f in manifest.files)
    progress(f"hashing {len(manifest.files)} files ({total / 2**20:.1f} MiB)")

    def check(record: FileRecord) -> tuple[str, Finding | None]:
        outcome = _check_file(folder, record)
        if record.size >= PROGRESS_MIN_BYTES:
            progress(f"{record.name}: {outcome[0]}")
        return outcome

    with ThreadPoolExecutor(jobs or min(4, os.cpu_count() or 1)) as pool:
        outcomes = list(pool.map(check, manifest.files))
    findings = [finding for _, finding in outcomes if finding is not None]
    rows = [
        (record.name, str(record.size), status)
        for record, (status, _) in zip(manifest.files, outcomes, strict=True)
    ]
    # the OMS signature beside the manifest (sglx.weights.signature) is its own file
    listed = {f.name for f in manifest.files} | {MANIFEST_NAME, SIGNATURE_NAME}
    for extra in sorted(p.name for p in folder.iterdir() if p.name not in listed):
        rows.append((extra, "", "not in manifest"))
        findings.append(
            Finding(
                "extra_file",
                f"{extra} is not listed in the manifest (added after the conversion)",
                path=str(folder / extra),
                hint="remove it, or convert again if it belongs to the model",
            )
        )
    damaged = {
        record.name
        for record, (status, _) in zip(manifest.files, outcomes, strict=True)
        if status != "ok"
    }
    findings += _check_headers(folder, manifest, damaged)
    ok = not findings
    data_digest = manifest_digest(folder)
    return Result(
        command=("weights", "verify"),
        data={
            "path": str(folder),
            "ok": ok,
            "arch": manifest.arch,
            "dtype": manifest.dtype,
            "files": len(manifest.files),
            "tensors": len(manifest.tensors),
            "bytes": total,
            "source_digest": manifest.source.digest,
            "weights_digest": data_digest,
        },
        tables=(Table(("file", "size", "status"), tuple(rows)),),
        lines=(
            f"{folder}: {len(manifest.files)} files, {len(manifest.tensors)} tensors "
            f"({manifest.arch}, {manifest.dtype}): "
            + ("all match the manifest" if ok else f"{len(findings)} problem(s)"),
        ),
        findings=tuple(findings),
    )

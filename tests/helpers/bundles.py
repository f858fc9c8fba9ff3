"""Helpers for the bundle tests: tiny images made with `docker import` and one-layer children
of them, malicious tars, and running `sglx` as a separate process (for the kill-and-resume
tests)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglx.bundle.manifest import Kind, WeightsRecord


def import_tiny_image(
    docker: Any, tag: str, blob_bytes: int = 3_000_000, labels: dict[str, str] | None = None
) -> str:
    """A real image, made from a small tar of random bytes (no base, no registry), with
    `labels` set on it (`docker import --change LABEL`)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in (
            ("etc/hello", b"hello from a tiny bundle image\n"),
            ("data/blob", os.urandom(blob_bytes)),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    repository, _, label = tag.rpartition(":")
    docker.api.import_image_from_data(
        buffer.getvalue(), repository=repository, tag=label, changes=_label_changes(labels)
    )
    return str(docker.images.get(tag).id)


def child_image(
    docker: Any, base: str, tag: str, name: str, size: int, labels: dict[str, str] | None = None
) -> str:
    """`base` with one more layer holding /NAME (`size` random bytes) and `labels` set on it,
    committed from a container that is never started (the base's own labels are kept)."""
    container = docker.containers.create(base, command=["/never-started"], network_disabled=True)
    try:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size = size
            tar.addfile(info, io.BytesIO(os.urandom(size)))
        container.put_archive("/", buffer.getvalue())
        repository, _, label = tag.rpartition(":")
        committed = container.commit(
            repository=repository, tag=label, changes=_label_changes(labels)
        )
        return str(committed.id)
    finally:
        container.remove(force=True)


def _label_changes(labels: dict[str, str] | None) -> list[str] | None:
    """Dockerfile `LABEL` instructions setting `labels`, as the engine's `changes` take them."""
    return [f"LABEL {key}={value}" for key, value in labels.items()] if labels else None


def member(name: str, kind: str = "file", target: str = "", data: bytes = b"x") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = {
        "file": tarfile.REGTYPE,
        "dir": tarfile.DIRTYPE,
        "symlink": tarfile.SYMTYPE,
        "hardlink": tarfile.LNKTYPE,
        "chardev": tarfile.CHRTYPE,
        "fifo": tarfile.FIFOTYPE,
    }[kind]
    info.linkname = target
    info.size = len(data) if kind == "file" else 0
    return info


def write_tar(path: Path, members: Sequence[tarfile.TarInfo], data: bytes = b"x") -> Path:
    with tarfile.open(path, "w") as tar:
        for info in members:
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return path


def sglx_process(*args: str, **popen: Any) -> subprocess.Popen[str]:
    """`sglx ARGS` in its own process, stderr piped (progress lines), stdout piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "sglx.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def file_kind(path: str) -> Kind:
    """The manifest kind `sglx bundle create` gives a bundle path."""
    if path == "ansible/control-node.txt" or path == "wheelhouse/requirements.lock":
        return "lock"
    if path.startswith("ansible/"):
        return "ansible"
    if path == "install.sh":
        return "install"
    if path.startswith("weights/"):
        return "weights"
    return "wheel" if path.endswith(".whl") else "meta"


# The report `sglx bundle create` writes of a scan that found nothing (a Result envelope,
# indent 2, keys sorted), for bundles made by hand.
SCAN_OK = (
    json.dumps(
        {
            "command": ["scan"],
            "data": {"target": {"kind": "image", "ref": "fixture-scan:test"}},
            "errors": [],
            "exit_code": 0,
            "findings": [],
            "sglx_result_version": "1",
            "status": "ok",
        },
        indent=2,
        sort_keys=True,
    )
    + "\n"
).encode()


def hand_bundle(
    folder: Path,
    archive: Path,
    files: dict[str, bytes],
    chunk_size: int,
    weights: WeightsRecord | None = None,
    *,
    scanned: bool = True,
) -> Path:
    """A bundle in the real format written without an engine: `archive` (a docker-archive
    made by hand) split by the real ChunkWriter, `files` beside it (kinds as create gives
    them; any ansible/ path fills the Ansible slot), manifest and SHA256SUMS. `scanned`: with
    a scan report that found nothing (SCAN_OK), as create writes one, unless `files` has its
    own."""
    import datetime as dt
    import hashlib

    from sglx.bundle.chunks import ChunkWriter
    from sglx.bundle.layout import SCAN_REPORT
    from sglx.bundle.manifest import (
        BundleManifest,
        FileEntry,
        ImageRecord,
        Slot,
        dump,
        render_sums,
        sha256_bytes,
    )

    if scanned:
        files = {SCAN_REPORT: SCAN_OK, **files}
    folder.mkdir(parents=True)
    written = ChunkWriter(folder, chunk_size).write_all([archive.read_bytes()])
    entries = [
        FileEntry(path=c.path, size=c.size, sha256=c.sha256, kind="image-chunk")
        for c in written.chunks
    ]
    for path, data in files.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(data)
        entries.append(
            FileEntry(
                path=path,
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
                kind=file_kind(path),
            )
        )
    manifest = BundleManifest(
        arch="cpu",
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        sglx_version="test",
        image=ImageRecord(
            ref="fixture-scan:test",
            id="sha256:" + "0" * 64,
            archive="image/image.tar",
            size=written.size,
            chunk_size=chunk_size,
            chunks=tuple(c.path for c in written.chunks),
        ),
        wheelhouse=Slot(included=any(p.endswith(".whl") for p in files), path="wheelhouse"),
        ansible=Slot(included=True, path="ansible")
        if any(p.startswith("ansible/") for p in files)
        else Slot(included=False),
        weights=weights,
        files=tuple(sorted(entries, key=lambda e: e.path)),
    )
    raw = dump(manifest)
    (folder / "bundle.json").write_bytes(raw)
    (folder / "SHA256SUMS").write_text(render_sums(manifest, sha256_bytes(raw), None))
    return folder

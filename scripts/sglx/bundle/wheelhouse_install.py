"""`sglx bundle install --venv`: the bundle's wheelhouse installed into a venv, offline (no
index, no dependency resolution, every hash required), and how the install record tells that
it is already there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.manifest import BundleManifest
from sglx.bundle.record import InstallRecord
from sglx.progress import Progress
from sglx_core.errors import SglxError

PIP_TIMEOUT_S = 3600


def lock_sha(manifest: BundleManifest) -> str:
    return manifest.by_path()[layout.WHEEL_LOCK].sha256


def venv_installed(record: InstallRecord, venv: Path, manifest: BundleManifest) -> bool:
    want = {"path": str(venv.absolute()), "lock": lock_sha(manifest)}
    return bool(record.steps.get("venv") == want and (venv / "bin" / "python").exists())


def install_wheelhouse(bundle: Path, venv: Path, progress: Progress) -> None:
    """Create `venv` (with this Python) if needed and install the bundle's locked wheels into
    it: no index, no dependency resolution, every hash required."""
    if not (venv / "bin" / "python").exists():
        progress(f"creating the venv {venv}")
        _run([sys.executable, "-m", "venv", str(venv)], "creating the venv")
    progress("installing the wheelhouse (no index, hashes required)")
    _run(
        [
            str(venv / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "--no-index",
            "--no-deps",
            "--require-hashes",
            "--find-links",
            str(bundle / layout.WHEELHOUSE),
            "-r",
            str(bundle / layout.WHEEL_LOCK),
        ],
        "pip install of the wheelhouse",
    )


def _run(argv: list[str], what: str) -> None:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise SglxError(f"{what} took longer than {PIP_TIMEOUT_S} s", code="environment") from None
    if proc.returncode != 0:
        raise SglxError(
            f"{what} failed: {(proc.stderr or proc.stdout)[-1500:]}",
            hint="the venv's Python must be the one the lock was made for",
            code="environment",
        )

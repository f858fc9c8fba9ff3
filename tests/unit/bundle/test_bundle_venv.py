"""The venv step of `sglx bundle install`: a real venv and a real pip install of a bundle's
wheelhouse, offline and hash-checked (a tiny hand-built wheel, so it runs in seconds)."""

from __future__ import annotations

import base64
import hashlib
import io
import subprocess
import zipfile
from pathlib import Path

import pytest

from sglx.bundle.wheelhouse_install import install_wheelhouse
from sglx.progress import Progress
from sglx_core.errors import SglxError

NAME, VERSION = "sglx_bundle_probe", "1.0"


def tiny_wheel() -> tuple[str, bytes]:
    filename = f"{NAME}-{VERSION}-py3-none-any.whl"
    files = {
        f"{NAME}/__init__.py": b"VALUE = 42\n",
        f"{NAME}-{VERSION}.dist-info/METADATA": (
            f"Metadata-Version: 2.1\nName: {NAME}\nVersion: {VERSION}\n".encode()
        ),
        f"{NAME}-{VERSION}.dist-info/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append(f"{NAME}-{VERSION}.dist-info/RECORD,,")
    files[f"{NAME}-{VERSION}.dist-info/RECORD"] = ("\n".join(record) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
    return filename, buffer.getvalue()


def bundle_with(tmp_path: Path, lock_hash: str | None = None) -> Path:
    filename, data = tiny_wheel()
    wheelhouse = tmp_path / "bundle" / "wheelhouse"
    wheelhouse.mkdir(parents=True)
    (wheelhouse / filename).write_bytes(data)
    sha = lock_hash or hashlib.sha256(data).hexdigest()
    (wheelhouse / "requirements.lock").write_text(
        f"# {filename}\n{NAME}=={VERSION} \\\n    --hash=sha256:{sha}\n"
    )
    return tmp_path / "bundle"


def test_the_wheelhouse_installs_into_a_new_venv_with_no_index(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    install_wheelhouse(bundle_with(tmp_path), venv, Progress("t", quiet=True))
    out = subprocess.run(
        [str(venv / "bin/python"), "-c", f"import {NAME}; print({NAME}.VALUE)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "42"


def test_a_wheel_that_does_not_match_the_lock_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SglxError, match="pip install of the wheelhouse failed") as caught:
        install_wheelhouse(
            bundle_with(tmp_path, "0" * 64), tmp_path / "v", Progress("t", quiet=True)
        )
    assert "DO NOT MATCH THE HASHES" in caught.value.message

"""Converted weights signed per file in OpenSSF's model-signing format (sglx weights sign), and
checked both by sglx (`weights verify --signer`) and by the model_signing tool's own CLI, with
no network: a changed file, another key and an unsigned folder are each refused."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from weights_helpers import demo_checkpoint, scratch

from sglx.cli import main

TOOL = Path(sys.executable).with_name("model_signing")


def _keys(folder: Path, name: str) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    private, public = folder / f"{name}.key", folder / f"{name}.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                          serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))  # fmt: skip
    public.write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))  # fmt: skip
    return private, public


def _tool_verifies(folder: Path, public: Path) -> bool:
    done = subprocess.run(
        [str(TOOL), "verify", "key", "--signature", str(folder / "sglx-weights.sig"),
         "--public_key", str(public), str(folder)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    return done.returncode == 0


@pytest.fixture(scope="module")
def signed() -> tuple[Path, Path, Path]:
    work = scratch("signed")
    dst = work / "model"
    assert main(["weights", "convert", str(demo_checkpoint("qwen2", "float32")), str(dst),
                 "--arch", "gfx942", "-q"]) == 0  # fmt: skip
    private, public = _keys(work, "site")
    assert main(["weights", "sign", str(dst), "--key", str(private), "-q"]) == 0
    return dst, public, work


def test_sglx_and_the_model_signing_tool_both_verify_it(
    signed: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dst, public, _ = signed
    capsys.readouterr()
    assert main(["weights", "verify", str(dst), "--signer", str(public), "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["data"]["signature"] == "ok"
    assert _tool_verifies(dst, public)
    bundle = json.loads((dst / "sglx-weights.sig").read_text())  # a Sigstore bundle (DSSE)
    assert "dsseEnvelope" in bundle and bundle["mediaType"].startswith(
        "application/vnd.dev.sigstore.bundle")  # fmt: skip


def test_a_changed_file_another_key_and_no_signature_are_refused(
    signed: tuple[Path, Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    dst, public, work = signed
    _, other = _keys(work, "other")
    capsys.readouterr()
    assert main(["weights", "verify", str(dst), "--signer", str(other), "-q"]) == 1
    assert "bad_signature" in capsys.readouterr().out
    assert not _tool_verifies(dst, other)

    copy = work / "changed"
    shutil.copytree(dst, copy)
    config = copy / "generation_config.json"
    config = config if config.exists() else copy / "config.json"
    config.write_text(config.read_text().replace("}", ', "x": 1}', 1))
    assert main(["weights", "verify", str(copy), "--signer", str(public), "-q"]) == 1
    assert not _tool_verifies(copy, public)  # the tool's own check sees the change too

    (copy / "sglx-weights.sig").unlink()
    capsys.readouterr()
    assert main(["weights", "verify", str(copy), "--signer", str(public), "-q"]) == 1
    assert "carries no sglx-weights.sig" in capsys.readouterr().out


def test_signing_refuses_what_is_not_a_converted_model_or_a_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], signed: tuple[Path, Path, Path]
) -> None:
    dst, public, _ = signed
    assert main(["weights", "sign", str(tmp_path), "--key", str(public), "-q"]) == 2
    assert "not a converted model" in capsys.readouterr().err
    assert main(["weights", "sign", str(dst), "--key", str(tmp_path / "none"), "-q"]) == 2
    assert "is not a readable file" in capsys.readouterr().err

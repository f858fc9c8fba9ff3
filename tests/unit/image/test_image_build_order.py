"""`sglx image build` checks cheap local inputs before it contacts the engine; the serving image
builds on the deps image (the venv, made by deps.sh in a container) and copies no wheel.

Engine contact is ruled out for real: DOCKER_HOST points at a socket that does not exist, so
any attempt to reach the engine ends in "no Docker engine answers" instead of the message the
test expects (the last tests show that it does).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from sglx.image.render import render_deps_script, render_dockerfile
from sglx_core.profile import known_arches, load_profile

CliRunner = Callable[..., tuple[int, str, str]]
NO_ENGINE = "unix:///nonexistent/sglx-test-docker.sock"


@pytest.fixture
def no_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)


def checkpoint(folder: Path, *, config: bool = True, weights: bool = True) -> Path:
    """A minimal checkpoint: config.json and one safetensors file with one float32 tensor."""
    folder.mkdir(parents=True)
    if config:
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    if weights:
        header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})
        blob = header.encode()
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", len(blob)) + blob + bytes(8))
    return folder


def assert_local_error(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    for word in words:
        assert word in err, err
    assert "no Docker engine answers" not in err
    assert "Traceback" not in err


def test_missing_model_is_reported_before_the_engine_is_contacted(
    no_engine: None, sglx: CliRunner
) -> None:
    code, out, err = sglx("image", "build", "--arch", "cpu", "--model", "/nonexistent", "-q")
    assert_local_error(code, err, "--model /nonexistent: no such folder", "hint: pass a Hugging")
    assert out == ""


def test_missing_model_also_comes_before_the_wheelhouse(
    no_engine: None, tmp_path: Path, sglx: CliRunner
) -> None:
    code, _, err = sglx(
        "image", "build", "--model", "/nonexistent", "--wheelhouse", str(tmp_path / "none"), "-q"
    )
    assert_local_error(code, err, "--model /nonexistent: no such folder")
    assert "wheelhouse" not in err


def test_model_that_is_a_file_is_no_folder(
    no_engine: None, tmp_path: Path, sglx: CliRunner
) -> None:
    file = tmp_path / "model.safetensors"
    file.write_bytes(b"")
    code, _, err = sglx("image", "build", "--model", str(file), "-q")
    assert_local_error(code, err, f"--model {file}: no such folder")


def test_model_without_config_json_is_not_a_checkpoint(
    no_engine: None, tmp_path: Path, sglx: CliRunner
) -> None:
    model = checkpoint(tmp_path / "weights-only", config=False)
    code, _, err = sglx("image", "build", "--model", str(model), "-q")
    assert_local_error(code, err, "no config.json in the folder", "not a model checkpoint")


def test_model_without_safetensors_weights_is_refused(
    no_engine: None, tmp_path: Path, sglx: CliRunner
) -> None:
    model = checkpoint(tmp_path / "config-only", weights=False)
    (model / "pytorch_model.bin").write_bytes(b"\0")
    code, _, err = sglx("image", "build", "--model", str(model), "-q")
    assert_local_error(code, err, "no *.safetensors weights", "pytorch_model.bin")


def test_model_with_a_broken_safetensors_header_is_refused(
    no_engine: None, tmp_path: Path, sglx: CliRunner
) -> None:
    model = checkpoint(tmp_path / "broken")
    (model / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 40))
    code, _, err = sglx("image", "build", "--model", str(model), "-q")
    assert_local_error(code, err, "model.safetensors")


def test_missing_wheelhouse_is_reported_before_the_engine_is_contacted(
    no_engine: None, tmp_path: Path, sglx_json: Callable[..., tuple[int, dict]]
) -> None:
    model = checkpoint(tmp_path / "model")
    folder = tmp_path / "no-wheelhouse"
    code, envelope = sglx_json(
        "image", "build", "--model", str(model), "--wheelhouse", str(folder), "-q"
    )
    assert code == 2
    [error] = envelope["errors"]
    assert error["code"] == "wheelhouse_missing"
    assert error["message"] == f"no wheelhouse at {folder}"
    assert "sglx wheels fetch --arch cpu" in error["hint"]


def test_the_engine_is_contacted_and_fails_differently(no_engine: None, sglx: CliRunner) -> None:
    """The probe works: a command that needs the engine gets the engine error here."""
    code, out, err = sglx("image", "prune", "--dry-run")
    assert code == 2
    assert "sglx: error: no Docker engine answers" in err
    assert "check DOCKER_HOST" in err
    assert "Traceback" not in err + out


def test_prune_checks_the_arch_before_the_engine(no_engine: None, sglx: CliRunner) -> None:
    code, _, err = sglx("image", "prune", "--arch", "cpux", "--dry-run")
    assert_local_error(code, err, "unknown arch 'cpux'; did you mean 'cpu'?", "known arches")


@pytest.mark.parametrize("arch", known_arches())
def test_the_serving_image_builds_on_the_deps_image_and_copies_no_wheel(arch: str) -> None:
    """The Dockerfile takes the venv from the deps image (deps.sh, run in a container): no stage
    copies the wheelhouse or the venv, so neither is written twice."""
    profile = load_profile(arch)
    lines = render_dockerfile(profile).splitlines()
    froms = [line for line in lines if line.startswith("FROM ")]
    assert froms == ["FROM ${WEIGHTS} AS weights", "FROM ${DEPS}"]
    assert f"ARG DEPS=sglx/deps:{arch}" in lines
    assert not [line for line in lines if "wheelhouse" in line and not line.startswith("#")]
    assert not [line for line in lines if line.startswith("COPY --from=deps")]
    script = render_deps_script(profile)
    assert "--require-hashes" in script and "--no-index" in script
    assert script.rstrip().splitlines()[-2:] == ['rm -rf "$deps"', 'echo "deps: done"']

"""`sglx image build` checks cheap local inputs before it contacts the engine; the deps stage is
labelled and followed through the build output so a build can keep the one its cache needs.

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

from sglx.image.build import DEPS_LABEL_STEP, DepsStage, _build_hint
from sglx.image.render import render_dockerfile
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
def test_the_deps_stage_ends_with_its_label(arch: str) -> None:
    """The label closes the deps stage (after the venv steps, so their cache survived adding
    it), and it is the line the build output is followed by."""
    lines = render_dockerfile(load_profile(arch)).splitlines()
    start = next(i for i, line in enumerate(lines) if line.endswith(" AS deps"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("FROM "))
    stage = [line for line in lines[start:end] if line and not line.startswith("#")]
    label = f"LABEL io.sglx.stage=deps io.sglx.arch={arch}"
    assert stage[-1] == label
    assert (label + " ").startswith(DEPS_LABEL_STEP)
    assert sum(line.startswith("LABEL io.sglx.stage") for line in lines) == 1


# Classic-builder output (Docker 20.10), as `docker build` streams it, trimmed.
FRESH = """\
Step 5/21 : FROM ${BASE} AS deps
 ---> 979ea3eaa0cc
Step 6/21 : COPY --from=wheelhouse /wheelhouse /tmp/wheelhouse
 ---> 267b095725e3
Step 7/21 : RUN /usr/bin/python3.11 -m venv /opt/sglx/venv  && /opt/sglx/venv/bin/python -m pip
 ---> Running in 08d951d31070
Successfully installed torch-2.8.0
Removing intermediate container 08d951d31070
 ---> 783e50bc4301
Step 8/21 : LABEL io.sglx.stage=deps io.sglx.arch=cpu
 ---> Running in 5b1c0d3e9f21
Removing intermediate container 5b1c0d3e9f21
 ---> 0a1b2c3d4e5f
Step 9/21 : FROM ${BASE}
 ---> 979ea3eaa0cc
Step 10/21 : RUN mkdir -p /var/cache/sglx /models
 ---> Running in 6c7d8e9fa0b1
 ---> 4a34dde1d781
Successfully built 9f8e7d6c5b4a
"""
CACHED = """\
Step 8/21 : LABEL io.sglx.stage=deps io.sglx.arch=cpu
 ---> Using cache
 ---> 0a1b2c3d4e5f
Step 9/21 : FROM ${BASE}
 ---> 979ea3eaa0cc
"""


@pytest.mark.parametrize("transcript", [FRESH, CACHED], ids=["fresh", "cached"])
def test_the_deps_stage_image_is_read_from_the_build_output(transcript: str) -> None:
    deps = DepsStage()
    for line in transcript.splitlines():
        deps.feed(line.rstrip())
    assert deps.image_id == "0a1b2c3d4e5f"


def test_no_deps_label_step_means_no_deps_image() -> None:
    """A Dockerfile without the label (an older one): nothing is kept or removed."""
    deps = DepsStage()
    for line in FRESH.replace("LABEL io.sglx.stage=deps", "LABEL other=1").splitlines():
        deps.feed(line.rstrip())
    assert deps.image_id is None


def test_a_full_data_root_gets_a_hint_that_says_so() -> None:
    """The engine's own error ("no space left on device") comes after the build's last lines:
    the hint names the cause and the commands that free the space."""
    hint = _build_hint(["Step 9/44 : LABEL io.sglx.stage=deps", "write /var/lib/docker/overlay2/"
                        "x/diff/a.so: no space left on device"])  # fmt: skip
    assert "data root is full" in hint and "sglx image prune" in hint
    plain = _build_hint(["Step 9/44 : RUN false"])
    assert plain == "the lines above come from the step that failed"

"""Files a model loads at start from outside its weights (issue 40 item 11): gpt-oss's
o200k_base vocabulary, which openai_harmony would download when the server starts. The
profile names it by architecture with tiktoken's published sha256; `sglx weights convert`
refuses a checkpoint without it before writing anything, and sglx-serve refuses to start the
model without it and points TIKTOKEN_ENCODINGS_BASE at the model's folder.

The real vocabulary is not fetched here: a profile whose asset is a file of the test (its own
sha256) stands in for the published one, and the shipped profile is checked for the
published digest.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from helpers.profiles import bake

from sglx_core import model_assets
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile, load_profile_file

GPT_OSS = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"}
O200K = "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"  # tiktoken's
VOCAB = b"aGVsbG8= 0\nd29ybGQ= 1\n"


def with_asset(tmp_path: Path, content: bytes = VOCAB) -> Any:
    """The cpu profile with gpt-oss's asset set to a file of this content."""
    assets = load_profile("cpu").weights.model_dump()["model_assets"]
    digest = hashlib.sha256(content).hexdigest()
    assets["GptOssForCausalLM"]["files"] = {"o200k_base.tiktoken": digest}
    weights = {**load_profile("cpu").weights.model_dump(), "model_assets": assets}
    return load_profile_file(bake("cpu", tmp_path / "arch.yaml", weights=weights))


def test_every_profile_names_the_published_vocabulary() -> None:
    for arch in ("cpu", "gfx942", "gfx950", "gfx1151", "kunlun"):
        assets = load_profile(arch).weights.model_assets["GptOssForCausalLM"]
        assert assets.files == {"o200k_base.tiktoken": O200K}
        assert assets.env == {"TIKTOKEN_ENCODINGS_BASE": "{model}"}
        assert assets.source.endswith("/encodings/o200k_base.tiktoken")


def test_a_gpt_oss_folder_without_its_vocabulary_is_refused_naming_the_file(
    tmp_path: Path,
) -> None:
    with pytest.raises(SglxError) as caught:
        model_assets.require(load_profile("cpu"), GPT_OSS, tmp_path)
    error = caught.value
    assert error.code == "missing_model_asset"
    assert f"GptOssForCausalLM needs o200k_base.tiktoken (sha256 {O200K})" in error.message
    assert "openai/harmony#46" in error.message
    assert "openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken" in (error.hint or "")


def test_the_file_must_be_the_published_one_and_a_regular_file(tmp_path: Path) -> None:
    profile = with_asset(tmp_path)
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "o200k_base.tiktoken").write_bytes(b"another vocabulary\n")
    assert "another file" in model_assets.problems(profile, GPT_OSS, folder)[0]
    (folder / "o200k_base.tiktoken").unlink()
    (tmp_path / "elsewhere").write_bytes(VOCAB)
    (folder / "o200k_base.tiktoken").symlink_to(tmp_path / "elsewhere")
    assert "is not a regular file" in model_assets.problems(profile, GPT_OSS, folder)[0]
    (folder / "o200k_base.tiktoken").unlink()
    (folder / "o200k_base.tiktoken").write_bytes(VOCAB)
    model_assets.require(profile, GPT_OSS, folder)  # the right file passes
    assert model_assets.env_for(profile, GPT_OSS, folder, {}) == {
        "TIKTOKEN_ENCODINGS_BASE": str(folder)
    }
    site = {"TIKTOKEN_ENCODINGS_BASE": "/srv/encodings"}  # docker run -e wins
    assert model_assets.env_for(profile, GPT_OSS, folder, site) == {}


@pytest.mark.parametrize(
    "config",
    [
        {"architectures": ["LlamaForCausalLM"]},
        {"architectures": "GptOssForCausalLM"},
        {"architectures": [1, None]},
        [],
        None,
    ],
)
def test_other_models_and_odd_configs_need_nothing(tmp_path: Path, config: Any) -> None:
    assert model_assets.problems(load_profile("cpu"), config, tmp_path) == []
    assert model_assets.env_for(load_profile("cpu"), config, tmp_path, {}) == {}


def test_sglx_serve_refuses_gpt_oss_without_its_vocabulary_and_points_at_it_with_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sglx_runtime import serve

    profile = bake("cpu", tmp_path / "baked.yaml")
    model = tmp_path / "gpt-oss"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(GPT_OSS))
    monkeypatch.setenv("SGLX_PROFILE", str(profile))
    monkeypatch.setenv("SGLX_MODEL", str(model))
    monkeypatch.setenv("SGLX_SERVING_PROFILE", "off")
    assert serve.main(["--dry-run"]) == 2
    out = capsys.readouterr().out
    assert "refused: GptOssForCausalLM needs o200k_base.tiktoken" in out
    assert "Traceback" not in out

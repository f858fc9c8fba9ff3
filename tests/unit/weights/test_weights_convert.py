"""`sglx weights convert`: every dtype direction on Llama and Qwen2, layouts, kept tensors."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from weights_helpers import demo_checkpoint, header_of, save_tensors, scratch

from sglx.cli import main
from sglx.weights import manifest_digest
from sglx.weights.check import check_weights
from sglx.weights.convert import convert_weights, retarget_config
from sglx.weights.dtypes import PROFILE_TO_CODE
from sglx.weights.verify import verify_weights
from sglx_core.errors import SglxError
from sglx_core.profile import known_arches, load_profile
from sglx_core.weights_manifest import read_manifest, source_digest

DTYPES = ("float32", "bfloat16", "float16")


def arch_storing(dtype: str) -> str:
    """An arch whose profile stores `dtype` (read from the profiles, not assumed)."""
    for arch in known_arches():
        if load_profile(arch).weights.dtype == dtype:
            return arch
    raise AssertionError(f"no profile stores {dtype}")


def tensor_dtypes(folder: Path) -> dict[str, str]:
    out = {}
    for shard in folder.glob("*.safetensors"):
        for name, entry in header_of(shard).items():
            if name != "__metadata__":
                out[name] = entry["dtype"]
    return out


@pytest.mark.parametrize("target", DTYPES)
@pytest.mark.parametrize("source", DTYPES)
@pytest.mark.parametrize(("family", "shards"), [("llama", "40KB"), ("qwen2", None)])
def test_every_dtype_direction_converts_verifies_and_checks_clean(
    family: str, shards: str | None, source: str, target: str
) -> None:
    src = demo_checkpoint(family, source, shards)
    dst = scratch("direction") / "out"
    arch = arch_storing(target)

    result = convert_weights(src, dst, load_profile(arch))

    assert result.exit_code == 0, result.errors
    code = PROFILE_TO_CODE[target]
    assert set(tensor_dtypes(dst).values()) == {code}
    assert sorted(tensor_dtypes(dst)) == sorted(tensor_dtypes(src))
    assert json.loads((dst / "config.json").read_text())["dtype"] == target
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        assert (dst / name).read_bytes() == (src / name).read_bytes()
    manifest = read_manifest(dst)
    assert (manifest.arch, manifest.dtype, manifest.quantization) == (arch, target, None)
    assert {t.source_dtype for t in manifest.tensors} == {PROFILE_TO_CODE[source]}
    assert verify_weights(dst).exit_code == 0

    checked = check_weights(src, dst)
    assert checked.exit_code == 0, [f.message for f in checked.findings]
    assert checked.data["logits"] is not None
    assert all(row["top1_agreement"] > 0.5 for row in checked.data["logits"])


def test_same_dtype_conversion_carries_the_source_shards_byte_for_byte() -> None:
    src = demo_checkpoint("llama", "float32", "40KB")
    dst = scratch("same") / "out"

    convert_weights(src, dst, load_profile(arch_storing("float32")))

    shards = sorted(p.name for p in src.glob("*.safetensors"))
    assert len(shards) > 1
    assert sorted(p.name for p in dst.glob("*.safetensors")) == shards
    for name in shards:
        assert (dst / name).read_bytes() == (src / name).read_bytes()
    manifest = read_manifest(dst)
    source_files = {f.name: f for f in manifest.source.files}
    for record in manifest.files:
        if record.name in shards:
            assert source_files[record.name] == record  # one hash serves source and output


@pytest.mark.parametrize("max_size", ["30KB", "1GB"])
def test_resharding_respects_the_maximum_and_loads_in_transformers(max_size: str) -> None:
    from sglx.weights.plan import parse_shard_size

    src = demo_checkpoint("qwen2", "float32")
    dst = scratch("reshard") / "out"

    convert_weights(
        src, dst, load_profile(arch_storing("bfloat16")), max_shard_size=parse_shard_size(max_size)
    )

    shards = sorted(dst.glob("*.safetensors"))
    if max_size == "1GB":
        assert [p.name for p in shards] == ["model.safetensors"]
        assert not (dst / "model.safetensors.index.json").exists()
    else:
        assert len(shards) > 2
        index = json.loads((dst / "model.safetensors.index.json").read_text())
        assert set(index["weight_map"]) == set(tensor_dtypes(src))
        assert set(index["weight_map"].values()) == {p.name for p in shards}
        for shard in shards:
            header = header_of(shard)
            sizes = [
                e["data_offsets"][1] - e["data_offsets"][0]
                for n, e in header.items()
                if n != "__metadata__"
            ]
            assert sum(sizes) <= parse_shard_size(max_size) or len(sizes) == 1
        total = sum(p.stat().st_size for p in shards)
        assert index["metadata"]["total_size"] <= total
    assert verify_weights(dst).exit_code == 0
    assert check_weights(src, dst).exit_code == 0


def test_integer_bool_and_fp8_tensors_are_kept_and_floats_follow_the_arch() -> None:
    tensors = {
        "ids": torch.arange(-5, 5, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "codes": torch.tensor([-128, 0, 127], dtype=torch.int8),
        "fp8": torch.tensor([0.5, -2.0, 448.0]).to(torch.float8_e4m3fn),
        "wide": torch.tensor([1.0, 2.5, -3.25], dtype=torch.float64),
        "weight": torch.linspace(-1, 1, 7, dtype=torch.float32),
    }
    src = save_tensors(scratch("kinds") / "src", tensors, config={"model_type": "llama"})
    dst = scratch("kinds") / "out"

    convert_weights(src, dst, load_profile(arch_storing("bfloat16")))

    assert tensor_dtypes(dst) == {
        "ids": "I64",
        "mask": "BOOL",
        "codes": "I8",
        "fp8": "F8_E4M3",
        "wide": "BF16",
        "weight": "BF16",
    }
    loaded = load_file(str(dst / "model.safetensors"))
    for name in ("ids", "mask", "codes"):
        assert torch.equal(loaded[name], tensors[name])
    assert torch.equal(loaded["fp8"].view(torch.uint8), tensors["fp8"].view(torch.uint8))
    assert torch.equal(loaded["weight"], tensors["weight"].to(torch.bfloat16))
    assert torch.equal(loaded["wide"], tensors["wide"].to(torch.bfloat16))
    (src / "config.json").unlink()  # not a model transformers can build: tensors only
    assert check_weights(src, dst).exit_code == 0


def _fp8_checkpoint(method: str) -> Path:
    tensors = {
        "layers.0.proj.weight": torch.randn(8, 8).to(torch.float8_e4m3fn),
        "layers.0.proj.weight_scale": torch.tensor([0.01], dtype=torch.float32),
        "layers.0.norm.weight": torch.ones(8, dtype=torch.float32),
    }
    config = {"model_type": "llama", "quantization_config": {"quant_method": method}}
    return save_tensors(scratch("quant") / "src", tensors, config=config)


def test_quantized_checkpoint_keeps_its_parameters_where_the_arch_accepts_the_method() -> None:
    gfx942 = load_profile("gfx942")
    assert gfx942.server.rules["quantization"].permits("fp8")  # the premise, from the profile
    dst = scratch("quant") / "out"

    result = convert_weights(_fp8_checkpoint("fp8"), dst, gfx942)

    assert result.data["quantization"] == "fp8"
    assert tensor_dtypes(dst) == {
        "layers.0.proj.weight": "F8_E4M3",
        "layers.0.proj.weight_scale": "F32",
        "layers.0.norm.weight": PROFILE_TO_CODE[gfx942.weights.dtype],
    }
    assert read_manifest(dst).quantization == "fp8"


def test_quantization_the_arch_refuses_stops_with_the_rule_reason() -> None:
    cpu = load_profile("cpu")
    rule = cpu.server.rules["quantization"]
    assert rule.action == "refuse" and not rule.permits("fp8")
    parent = scratch("quant-refused")

    with pytest.raises(SglxError) as caught:
        convert_weights(_fp8_checkpoint("fp8"), parent / "out", cpu)

    assert caught.value.code == "unsupported_quantization"
    assert rule.reason in caught.value.message
    assert rule.instead is not None and rule.instead in (caught.value.hint or "")
    assert list(parent.iterdir()) == []


def test_a_warn_rule_converts_and_reports_the_warning() -> None:
    profile = next(
        load_profile(a)
        for a in known_arches()
        if (r := load_profile(a).server.rules.get("quantization")) is not None
        and r.action == "warn"
        and not r.permits("fp8")
    )
    dst = scratch("quant-warn") / "out"

    result = convert_weights(_fp8_checkpoint("fp8"), dst, profile)

    assert result.exit_code == 0
    assert result.data["warnings"] and "fp8" in result.data["warnings"][0]
    assert any(line.startswith("warning:") for line in result.lines)


def test_a_method_sglx_does_not_know_is_refused_rather_than_guessed() -> None:
    with pytest.raises(SglxError, match="tensor layout sglx does not know") as caught:
        convert_weights(
            _fp8_checkpoint("brand_new_q"), scratch("q") / "out", load_profile("gfx942")
        )
    assert caught.value.code == "unsupported_quantization"


def test_same_input_gives_the_same_manifest_and_digest() -> None:
    src = demo_checkpoint("llama", "bfloat16", "40KB")
    profile = load_profile(arch_storing("float16"))
    first, second = scratch("repro") / "a", scratch("repro") / "b"

    convert_weights(src, first, profile)
    convert_weights(src, second, profile, jobs=1)

    assert (first / "sglx-weights.json").read_bytes() == (second / "sglx-weights.json").read_bytes()
    assert manifest_digest(first) == manifest_digest(second)
    assert manifest_digest(first).startswith("sha256:")
    manifest = read_manifest(first)
    assert manifest.source.digest == source_digest(manifest.source.files)
    assert {f.name for f in manifest.source.files} >= {"config.json", "tokenizer.json"}


def test_config_dtype_is_retargeted_everywhere_and_added_when_missing() -> None:
    config: dict[str, Any] = {
        "torch_dtype": "float32",
        "text_config": {"dtype": "bfloat16", "name": "x"},
        "transformers_version": "4.40.0",
    }
    assert retarget_config(config, "float16") == {
        "torch_dtype": "float16",
        "text_config": {"dtype": "float16", "name": "x"},
        "transformers_version": "4.40.0",
    }
    assert retarget_config({"transformers_version": "4.40.0"}, "bfloat16")["torch_dtype"] == (
        "bfloat16"
    )
    assert retarget_config({"transformers_version": "5.1.0"}, "bfloat16")["dtype"] == "bfloat16"


def test_cli_convert_and_verify_print_tables_and_json(
    capsys: pytest.CaptureFixture[str],
) -> None:
    src = demo_checkpoint("qwen2", "float32")
    dst = scratch("cli") / "out"

    code = main(["weights", "convert", str(src), str(dst), "--arch", "gfx942", "--json", "-q"])
    envelope = json.loads(capsys.readouterr().out)

    assert code == 0 and envelope["status"] == "ok"
    data = envelope["data"]
    assert data["weights_digest"] == manifest_digest(dst)
    assert data["dtype"] == load_profile("gfx942").weights.dtype
    assert data["directions"] == [
        {
            "from": "F32",
            "to": "BF16",
            "tensors": data["tensors"],
            "bytes": data["directions"][0]["bytes"],
        }
    ]

    assert main(["weights", "verify", str(dst)]) == 0
    out = capsys.readouterr().out
    assert "all match the manifest" in out and "model.safetensors" in out


def test_a_gpt_oss_checkpoint_without_its_vocabulary_is_refused_before_anything_is_written() -> (
    None
):
    """Issue 40 item 11: gpt-oss loads o200k_base.tiktoken at start and would download it
    (sglx_core.model_assets); convert names the file, its sha256 and its source, and writes
    nothing. With the file beside config.json it is carried to the output."""
    tensors = {"model.norm.weight": torch.ones(8, dtype=torch.float32)}
    config = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss"}
    src = save_tensors(scratch("gpt-oss") / "src", tensors, config=config)
    parent = scratch("gpt-oss-out")

    with pytest.raises(SglxError) as caught:
        convert_weights(src, parent / "out", load_profile("cpu"))

    assert caught.value.code == "missing_model_asset"
    assert "GptOssForCausalLM needs o200k_base.tiktoken (sha256 446a9538" in caught.value.message
    assert "encodings/o200k_base.tiktoken" in (caught.value.hint or "")
    assert list(parent.iterdir()) == []

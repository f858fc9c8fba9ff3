"""The AMD profiles refuse what sglang 0.5.23 accepts on ROCm but cannot serve (it fails late
or hangs), each refusal fed through sglang's real ServerArgs and the sglx platform hook.

Every rule is profile data (images/shared/rocm.yaml, images/<arch>/arch.yaml); these tests
name the fact each rule stands for and check the message says why and what to use instead.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.devices import make_kfd_host
from helpers.profiles import bake

from sglx.weights.policy import dtype_policy
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile
from sglx_core.profile.schema import Rule
from sglx_platform.consistency import fingerprint
from sglx_platform.failures import FailureClass, PlatformError
from sglx_platform.model_config import model_facts
from sglx_platform.platforms.base import server_arg_defaults
from sglx_platform.server_args import unknown_fields

HOSTS = {"gfx942": [90402], "gfx950": [90500], "gfx1151": [110501]}
AMD = tuple(HOSTS)
NO_ROCM_KERNELS = ("awq_marlin", "gptq_marlin", "modelopt", "modelopt_fp4", "modelopt_fp8", "gguf")


def write_model(folder: Path, **config: Any) -> Path:
    """A model folder holding only config.json: all the plugin and sglang's parser read."""
    base = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 4,
        "intermediate_size": 512,
        "num_hidden_layers": 1,
        "vocab_size": 384,
        "max_position_embeddings": 512,
        "torch_dtype": "bfloat16",
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps({**base, **config}))
    return folder


@pytest.fixture(scope="module")
def narrow_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("narrow") / "model")  # head_dim 64


@pytest.fixture(scope="module")
def wide_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model(tmp_path_factory.mktemp("wide") / "model", head_dim=512)


def apply(
    arch: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Path
) -> Any:
    """Parse `argv` with sglang's parser and run the sglx platform hook the way sglang's
    resolution does (test_plugin_server_args.py); the resolved view of the fields."""
    from sglang.srt.arg_groups.arg_utils import record_fields
    from sglang.srt.arg_groups.overrides import record_foreign_defaults, resolving_view
    from sglang.srt.platforms import _resolve_platform
    from sglang.srt.server_args import prepare_server_args

    root = tmp_path / f"host-{arch}"
    if not root.exists():
        root.mkdir()
        make_kfd_host(root, HOSTS[arch])
    monkeypatch.setenv("SGLX_PROBE_ROOT", str(root))
    monkeypatch.setenv("SGLX_PROFILE", str(bake(arch, tmp_path / arch / "arch.yaml")))
    monkeypatch.setenv("SGLANG_PLATFORM", "sglx")
    platform = _resolve_platform()
    args = prepare_server_args(["--model-path", str(model), *argv])
    args._raw_input = {f.name: getattr(args, f.name) for f in record_fields(type(args))}
    record_foreign_defaults(args, f"platform:{arch}", platform.apply_server_args_defaults)
    return resolving_view(args)


def refused(
    arch: str, argv: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: Path
) -> str:
    """The refusal's text (what `sglx-preflight` and the server log show)."""
    with pytest.raises(PlatformError) as caught:
        apply(arch, argv, tmp_path, monkeypatch, model)
    assert caught.value.failure is FailureClass.CONFIG_REFUSED
    return caught.value.detail


@pytest.mark.parametrize("arch", AMD)
def test_quantization_without_a_rocm_kernel_is_refused_with_the_rocm_alternative(
    arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, narrow_model: Path
) -> None:
    for method in NO_ROCM_KERNELS:
        detail = refused(arch, ["--quantization", method], tmp_path, monkeypatch, narrow_model)
        assert f"--quantization {method}: no ROCm path" in detail, detail
        assert "use --quantization awq for an AWQ checkpoint" in detail
    # gfx11 has no FP8 units, so its alternative is a BF16 checkpoint rather than FP8 kernels
    fp8_offered = "--quantization fp8 or w8a8_fp8" in detail
    assert fp8_offered is (arch != "gfx1151")
    awq = apply(arch, ["--quantization", "awq"], tmp_path, monkeypatch, narrow_model)
    assert awq.quantization == "awq"


def test_eagle_on_gfx942_needs_graph_capture_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, narrow_model: Path
) -> None:
    for algorithm in ("EAGLE", "eagle3", "NEXTN"):
        detail = refused(
            "gfx942", ["--speculative-algorithm", algorithm], tmp_path, monkeypatch, narrow_model
        )
        assert f"--speculative-algorithm {algorithm}: EAGLE speculative decoding" in detail
        assert "sglang#29347" in detail and "use --disable-cuda-graph" in detail
    eager = ["--speculative-algorithm", "EAGLE", "--disable-cuda-graph"]
    assert apply("gfx942", eager, tmp_path, monkeypatch, narrow_model).disable_cuda_graph
    # other algorithms, and other arches, are not what sglang#29347 reports
    ngram = ["--speculative-algorithm", "NGRAM"]
    assert apply("gfx942", ngram, tmp_path, monkeypatch, narrow_model).speculative_algorithm
    eagle = ["--speculative-algorithm", "EAGLE"]
    assert apply("gfx950", eagle, tmp_path, monkeypatch, narrow_model).speculative_algorithm


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_heads_wider_than_256_take_triton_or_refuse_a_forced_aiter(
    arch: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    narrow_model: Path,
    wide_model: Path,
) -> None:
    assert apply(arch, [], tmp_path, monkeypatch, wide_model).attention_backend == "triton"
    # a narrow model keeps sglang's own choice (aiter on HIP, made later)
    assert apply(arch, [], tmp_path, monkeypatch, narrow_model).attention_backend is None
    detail = refused(arch, ["--attention-backend", "aiter"], tmp_path, monkeypatch, wide_model)
    assert "--attention-backend aiter: aiter's CK batch-prefill kernel" in detail
    assert "(this model: head_dim 512)" in detail and "use --attention-backend triton" in detail
    forced = ["--attention-backend", "aiter"]
    assert apply(arch, forced, tmp_path, monkeypatch, narrow_model).attention_backend == "aiter"


def test_head_width_comes_from_hidden_size_without_head_dim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = write_model(tmp_path / "model", hidden_size=1024, num_attention_heads=2)
    assert apply("gfx942", [], tmp_path, monkeypatch, model).attention_backend == "triton"


def test_fp8_kv_cache_is_refused_with_the_wave_backend_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, narrow_model: Path
) -> None:
    for backend in ("--attention-backend", "--decode-attention-backend"):
        argv = [backend, "wave", "--kv-cache-dtype", "fp8_e4m3"]
        detail = refused("gfx942", argv, tmp_path, monkeypatch, narrow_model)
        assert "--kv-cache-dtype fp8_e4m3: the wave attention backend" in detail
        assert "no k/v scales" in detail
    for argv, kv in (
        (["--attention-backend", "triton", "--kv-cache-dtype", "fp8_e4m3"], "fp8_e4m3"),
        (["--attention-backend", "wave"], "auto"),
    ):
        assert apply("gfx950", argv, tmp_path, monkeypatch, narrow_model).kv_cache_dtype == kv
    # gfx1151 takes no FP8 KV cache at all, whatever the backend
    fp8 = ["--kv-cache-dtype", "fp8_e4m3"]
    gfx11 = refused("gfx1151", fp8, tmp_path, monkeypatch, narrow_model)
    assert "gfx11 has no FP8 hardware" in gfx11


@pytest.mark.parametrize("arch", AMD)
def test_moe_all_to_all_is_mori_and_nvidia_moe_runners_are_refused(
    arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, narrow_model: Path
) -> None:
    for flag, value, why, fix in (
        ("--moe-a2a-backend", "deepep", "DeepEP is NVIDIA's all-to-all", "--moe-a2a-backend mori"),
        ("--moe-runner-backend", "deep_gemm", "DeepGEMM and CUTLASS", "--moe-runner-backend"),
        ("--moe-runner-backend", "cutlass", "DeepGEMM and CUTLASS", "--moe-runner-backend"),
    ):
        detail = refused(arch, [flag, value], tmp_path, monkeypatch, narrow_model)
        assert f"{flag} {value}: {why}" in detail and f"use {fix}" in detail
    mori = apply(arch, ["--moe-a2a-backend", "mori"], tmp_path, monkeypatch, narrow_model)
    assert mori.moe_a2a_backend == "mori"


def test_preflight_reports_the_refusal_before_the_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wide_model: Path
) -> None:
    from sglx_platform.preflight.server_args_check import check_server_args

    monkeypatch.setenv("SGLX_PROFILE", str(bake("gfx942", tmp_path / "arch.yaml")))
    argv = ["--model-path", str(wide_model), "--speculative-algorithm", "EAGLE3"]
    checks = check_server_args([*argv, "--attention-backend", "aiter"])
    failed = sorted((c.detail, c.fix) for c in checks if c.status == "fail")
    assert len(failed) == 2, failed
    assert failed[0][0].startswith("attention_backend='aiter': aiter's CK batch-prefill")
    assert failed[0][1] == "use --attention-backend triton"
    assert failed[1][0].startswith("speculative_algorithm='EAGLE3': EAGLE speculative")
    accepted = check_server_args([*argv, "--disable-cuda-graph"])
    assert [c.status for c in accepted] == ["pass"]
    assert "attention_backend=triton" in accepted[0].detail


def test_ranks_compare_mori_variables() -> None:
    profile = load_profile("gfx942")
    environ = {"MORI_DEVICE_NIC": "ionic", "MORI_SHMEM_MODE": "VMM_HEAP", "HOME": "/root"}
    prints = fingerprint(profile, environ=environ)
    assert prints["env:MORI_DEVICE_NIC"] == "ionic"
    assert prints["env:MORI_SHMEM_MODE"] == "VMM_HEAP"
    assert "env:HOME" not in prints


def test_weights_convert_refuses_the_same_methods(narrow_model: Path) -> None:
    """`sglx weights convert` holds a checkpoint to the same unconditional rules."""
    for arch in AMD:
        profile = load_profile(arch)
        for method in NO_ROCM_KERNELS:
            config = {"quantization_config": {"quant_method": method}}
            with pytest.raises(SglxError, match="no ROCm path") as caught:
                dtype_policy(profile, config)
            assert caught.value.code == "unsupported_quantization"


def test_every_rule_names_real_server_args_fields() -> None:
    known = set(server_arg_defaults())
    for arch in AMD:
        assert unknown_fields(load_profile(arch), known) == [], arch
    rule = Rule(field="quantization", deny=("x",), when={"no_such_field": ("y",)}, reason="r")
    profile = load_profile("gfx942")
    stray = profile.model_copy(
        update={"server": profile.server.model_copy(update={"rules": {"r": rule}})}
    )
    assert unknown_fields(stray, known) == ["no_such_field"]


def test_rule_conditions_and_globs() -> None:
    rule = Rule.model_validate(
        {
            "deny": ["EAGLE*"],
            "match": "glob",
            "unless": {"disable_cuda_graph": True},
            "reason": "r",
        }
    )
    assert not rule.permits("eagle3") and rule.permits("NGRAM") and rule.permits(None)
    assert rule.applies({"disable_cuda_graph": False}, {})
    assert not rule.applies({"disable_cuda_graph": True}, {})
    exact = Rule.model_validate({"deny": ["EAGLE*"], "reason": "r"})
    assert exact.permits("EAGLE3") and not exact.permits("EAGLE*")
    wide = Rule.model_validate({"deny": ["aiter"], "model": {"head_dim_above": 256}, "reason": "r"})
    assert wide.applies({}, {"head_dim": 257}) and not wide.applies({}, {"head_dim": 256})
    assert not wide.applies({}, {})  # no facts: no model-conditioned rule
    with pytest.raises(ValueError, match="default 'aiter' is one the rule itself refuses"):
        Rule.model_validate({"deny": ["aiter"], "default": "aiter", "reason": "r"})


def test_model_facts_never_fail_and_read_only_local_regular_files(tmp_path: Path) -> None:
    assert model_facts(None) == {}
    assert model_facts("meta-llama/Llama-3.1-8B-Instruct") == {}  # a hub id is not read
    assert model_facts(str(tmp_path)) == {}  # no config.json
    assert model_facts("bad\0path") == {}
    (tmp_path / "config.json").write_text("[1, 2]")
    assert model_facts(str(tmp_path)) == {}
    (tmp_path / "config.json").write_text('{"head_dim": 8, "head_dim": 512}')
    assert model_facts(str(tmp_path)) == {}  # a repeated key is refused, not guessed at
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    os.mkfifo(fifo / "config.json")
    assert model_facts(str(fifo)) == {}  # opened without blocking, refused as not a file
    vlm = write_model(tmp_path / "vlm", text_config={"head_dim": 320}, head_dim=64)
    assert model_facts(str(vlm)) == {"head_dim": 320}
    odd = write_model(tmp_path / "odd", head_dim=True, hidden_size="big")
    assert model_facts(str(odd)) == {}

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
from helpers.platforms import KFD_VERSIONS, apply
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

AMD = tuple(KFD_VERSIONS)
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
        assert f"--speculative-algorithm {algorithm}: EAGLE-style speculative decoding" in detail
        assert "sglang#29347" in detail and "use --disable-decode-cuda-graph" in detail
    # Issue 40 item 7: STANDALONE shares the EAGLE V2 worker's verify path (spec_info.py).
    detail = refused(
        "gfx942", ["--speculative-algorithm", "STANDALONE"], tmp_path, monkeypatch, narrow_model
    )
    assert "--speculative-algorithm STANDALONE: EAGLE-style speculative decoding" in detail
    # Decode graphs off, in each of sglang 0.5.23's three spellings, lets every one through.
    for off in (
        ["--disable-cuda-graph"],
        ["--disable-decode-cuda-graph"],
        ["--cuda-graph-backend-decode", "disabled"],
    ):
        for algorithm in ("EAGLE", "STANDALONE"):
            eager = ["--speculative-algorithm", algorithm, *off]
            served = apply("gfx942", eager, tmp_path, monkeypatch, narrow_model)
            assert served.speculative_algorithm == algorithm, off
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
    assert "SGLANG_USE_AITER_UNIFIED_ATTN=1" in detail
    forced = ["--attention-backend", "aiter"]
    assert apply(arch, forced, tmp_path, monkeypatch, narrow_model).attention_backend == "aiter"


def test_head_width_comes_from_hidden_size_without_head_dim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = write_model(tmp_path / "model", hidden_size=1024, num_attention_heads=2)
    assert apply("gfx942", [], tmp_path, monkeypatch, model).attention_backend == "triton"


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_wide_heads_take_aiter_where_its_prefill_is_triton_unified_attention(
    arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wide_model: Path
) -> None:
    """Issue 40 item 7: aiter routes prefill through Triton's unified attention, which has no
    head cap, for a model with a sliding-window KV pool and under
    SGLANG_USE_AITER_UNIFIED_ATTN (wheel:srt/layers/attention/aiter_backend.py): the rule
    refuses neither, and refuses a sliding-window model whose pool
    --disable-hybrid-swa-memory drops."""
    aiter = ["--attention-backend", "aiter"]
    for word in ("1", "true", "Yes"):
        monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", word)
        assert apply(arch, aiter, tmp_path, monkeypatch, wide_model).attention_backend == "aiter"
    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", "0")
    assert "CK batch-prefill" in refused(arch, aiter, tmp_path, monkeypatch, wide_model)
    monkeypatch.delenv("SGLANG_USE_AITER_UNIFIED_ATTN")
    swa = write_model(tmp_path / "swa", architectures=["GptOssForCausalLM"], head_dim=512)
    assert model_facts(str(swa))["hybrid_swa"] is True
    assert model_facts(str(wide_model))["hybrid_swa"] is False
    assert apply(arch, aiter, tmp_path, monkeypatch, swa).attention_backend == "aiter"
    assert apply(arch, [], tmp_path, monkeypatch, swa).attention_backend is None  # sglang's own
    dropped = [*aiter, "--disable-hybrid-swa-memory"]
    assert "CK batch-prefill" in refused(arch, dropped, tmp_path, monkeypatch, swa)


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
        ("--moe-a2a-backend", "deepep", "DeepEP, pplx (NVSHMEM)", "--moe-a2a-backend mori"),
        ("--moe-a2a-backend", "pplx", "DeepEP, pplx (NVSHMEM)", "--moe-a2a-backend mori"),
        ("--moe-a2a-backend", "flashinfer", "DeepEP, pplx (NVSHMEM)", "--moe-a2a-backend mori"),
        ("--moe-runner-backend", "deep_gemm", "DeepGEMM, CUTLASS", "--moe-runner-backend"),
        ("--moe-runner-backend", "cutlass", "DeepGEMM, CUTLASS", "--moe-runner-backend"),
        ("--moe-runner-backend", "flashinfer_trtllm", "DeepGEMM, CUTLASS", "--moe-runner-backend"),
        ("--moe-runner-backend", "hpc_ops", "DeepGEMM, CUTLASS", "--moe-runner-backend"),
    ):
        detail = refused(arch, [flag, value], tmp_path, monkeypatch, narrow_model)
        assert f"{flag} {value}: {why}" in detail and f"use {fix}" in detail
    # Issue 40 item 7: each allowed one has a ROCm build or an AMD path (rocm.yaml's sources).
    for backend in ("mori", "mooncake", "nixl", "megamoe"):
        served = apply(arch, ["--moe-a2a-backend", backend], tmp_path, monkeypatch, narrow_model)
        assert served.moe_a2a_backend == backend


def test_preflight_reports_the_refusal_before_the_server_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wide_model: Path
) -> None:
    from sglx_runtime.preflight.server_args_check import check_server_args

    monkeypatch.setenv("SGLX_PROFILE", str(bake("gfx942", tmp_path / "arch.yaml")))
    argv = ["--model-path", str(wide_model), "--speculative-algorithm", "EAGLE3"]
    checks = check_server_args([*argv, "--attention-backend", "aiter"])
    failed = sorted((c.detail, c.fix) for c in checks if c.status == "fail")
    assert len(failed) == 2, failed
    assert failed[0][0].startswith("attention_backend='aiter': aiter's CK batch-prefill")
    assert failed[0][1].startswith("use --attention-backend triton, or aiter with SGLANG_USE_AITER")
    assert failed[1][0].startswith("speculative_algorithm='EAGLE3': EAGLE-style speculative")
    accepted = check_server_args([*argv, "--disable-decode-cuda-graph"])
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
    """`sglx weights convert` holds a checkpoint to the same unconditional rules, as the method
    sglang serves it as: a `modelopt` checkpoint is Petit's on HIP (the next test)."""
    for arch in AMD:
        profile = load_profile(arch)
        for method in set(NO_ROCM_KERNELS) - {"modelopt"}:
            config = {"quantization_config": {"quant_method": method}}
            with pytest.raises(SglxError, match="no ROCm path") as caught:
                dtype_policy(profile, config)
            assert caught.value.code == "unsupported_quantization"


def modelopt(algo: str) -> dict[str, Any]:
    """config.json of a ModelOpt checkpoint, as ModelOpt exports it."""
    return {"quantization_config": {"quant_method": "modelopt", "quant_algo": algo,
                                    "group_size": 16}}  # fmt: skip


def test_a_modelopt_nvfp4_checkpoint_is_served_through_petit_where_petit_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, narrow_model: Path
) -> None:
    """Issue 40 item 2: sglang 0.5.23 serves a ModelOpt checkpoint on HIP through Petit
    (wheel:srt/layers/quantization/petit.py), NVFP4 only, on CDNA2/CDNA3 in the image's
    petit_kernel 0.0.2. So gfx942 converts it and accepts `--quantization petit_nvfp4`;
    gfx950 and gfx1151 refuse both, naming Petit; an FP8 ModelOpt checkpoint is refused on
    gfx942, naming what Petit takes. `--quantization modelopt*` stays refused everywhere."""
    policy, warnings = dtype_policy(load_profile("gfx942"), modelopt("NVFP4"))
    assert policy.quant_method == "modelopt" and warnings == ()
    petit = apply("gfx942", ["--quantization", "petit_nvfp4"], tmp_path, monkeypatch, narrow_model)
    assert petit.quantization == "petit_nvfp4"
    with pytest.raises(SglxError) as caught:
        dtype_policy(load_profile("gfx942"), modelopt("FP8"))
    assert "quant_algo FP8" in str(caught.value) and "takes quant_algo NVFP4 only" in str(
        caught.value
    )
    for arch in ("gfx950", "gfx1151"):
        with pytest.raises(SglxError) as caught:
            dtype_policy(load_profile(arch), modelopt("NVFP4"))
        assert "'modelopt' (served as 'petit_nvfp4')" in str(caught.value), caught.value
        assert "CDNA" in str(caught.value)
        detail = refused(arch, ["--quantization", "petit_nvfp4"], tmp_path, monkeypatch,
                         narrow_model)  # fmt: skip
        assert "--quantization petit_nvfp4:" in detail and "CDNA" in detail


@pytest.mark.parametrize("arch", ["gfx942", "gfx950"])
def test_mxfp8_is_served_on_cdna3_and_cdna4(
    arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, narrow_model: Path
) -> None:
    """Issue 40 item 1: sglang 0.5.23 serves MXFP8 natively on gfx950 and converts it to
    block-FP8 at load on gfx942 (wheel:srt/layers/quantization/fp8.py get_min_capability,
    srt/utils/common.py mxfp8_block_convert_required): the flag and the checkpoint pass."""
    served = apply(arch, ["--quantization", "mxfp8"], tmp_path, monkeypatch, narrow_model)
    assert served.quantization == "mxfp8"
    policy, warnings = dtype_policy(
        load_profile(arch), {"quantization_config": {"quant_method": "mxfp8"}}
    )
    assert policy.quant_method == "mxfp8" and warnings == ()


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
    assert model_facts(str(vlm)) == {"head_dim": 320, "hybrid_swa": False}
    odd = write_model(tmp_path / "odd", head_dim=True, hidden_size="big")
    assert model_facts(str(odd)) == {"hybrid_swa": False}
    # What sglang's is_hybrid_swa_model reads, hostile: never an error, never a guess.
    for architectures, extra in (
        ("GptOssForCausalLM", {}),  # not a list
        ([1, None], {}),
        (["BeamForCausalLM"], {}),  # Beam reads layer_types, which this config lacks
        (["BeamForCausalLM"], {"layer_types": 5}),
        (["LlamaForCausalLM"], {"not an identifier": 1, "is_hybrid_swa": True}),
    ):
        hostile = write_model(tmp_path / "hostile", architectures=architectures, **extra)
        expected = "is_hybrid_swa" in extra  # sglang's own opt-in, read as sglang reads it
        assert model_facts(str(hostile))["hybrid_swa"] is expected, (architectures, extra)


def sglang_choices() -> dict[str, list[str]]:
    """sglang 0.5.23's own choices for each server argument that has them (its argparse)."""
    import argparse

    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    return {
        action.dest: [str(choice) for choice in action.choices]
        for action in parser._actions
        if action.choices and action.option_strings
    }


def refuses(profile: Any, field: str, value: str) -> bool:
    """Whether an unconditional `refuse` rule of the profile names `value` for `field`."""
    return any(
        rule.action == "refuse" and not rule.permits(value)
        for rule in profile.server.rules_on(field)
        if not rule.conditional
    )


@pytest.mark.parametrize("arch", AMD)
def test_a_rule_refuses_exactly_what_it_names(
    arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, narrow_model: Path
) -> None:
    """Issue 40's counter-tests, for every choice sglang offers of every field the profile has
    an unconditional rule on: each value a rule names is refused through sglang's real
    ServerArgs and the platform hook, naming the flag; every other value passes the hook
    (sglang's own checks may still say no to it, never sglx's)."""
    profile = load_profile(arch)
    choices = sglang_choices()
    fields = {
        field for field in choices if any(not r.conditional for r in profile.server.rules_on(field))
    }
    assert {"quantization", "attention_backend", "moe_runner_backend"} <= fields, fields
    for field in sorted(fields):
        flag = "--" + field.replace("_", "-")
        for value in choices[field]:
            try:
                apply(arch, [flag, value], tmp_path, monkeypatch, narrow_model)
            except PlatformError as error:
                assert error.failure is FailureClass.CONFIG_REFUSED, (flag, value, error)
                assert refuses(profile, field, value), f"{arch}: {flag} {value}: {error.detail}"
                assert f"{flag} {value}:" in error.detail, error.detail
                continue
            except Exception:  # sglang's own refusal of the value, not sglx's
                assert not refuses(profile, field, value), f"{arch}: {flag} {value} got past sglx"
                continue
            assert not refuses(profile, field, value), f"{arch}: {flag} {value} was not refused"


@pytest.mark.parametrize("arch", AMD)
def test_every_serving_profile_passes_the_hook_through_sglangs_server_args(
    arch: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, narrow_model: Path
) -> None:
    """The counter-test of every rule, from the other side: each serving profile's flags (the
    PD roles' disaggregation flags included) pass sglang's real parser and the platform hook,
    and reach the resolved fields."""
    for name, serving in load_profile(arch).serving.profiles.items():
        argv = [
            word
            for flag, value in serving.args.items()
            if value is not False
            for word in ([f"--{flag}"] if value is True else [f"--{flag}", str(value)])
        ]
        view = apply(arch, argv, tmp_path, monkeypatch, narrow_model)
        for flag, value in serving.args.items():
            if flag.startswith("disaggregation-"):
                assert getattr(view, flag.replace("-", "_")) == value, (name, flag)

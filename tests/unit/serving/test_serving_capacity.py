"""The capacity check on the real model configs: KV bytes per token as sglang sizes its pools,
the fit against the device memory, and refusals whose fixes are ordered and carry numbers that
hold when applied."""

from __future__ import annotations

import pytest
from helpers.model_configs import MODELS, config

from sglx_core.errors import SglxError
from sglx_core.serving.capacity import (
    Capacity,
    check,
    kv_bytes_per_token,
    reserve,
    stage_layers,
)
from sglx_core.serving.model import ModelShape, model_from_config

GIB = 1 << 30
MI300X_BYTES = (
    192 * GIB
)  # 192 GB HBM3 per MI300X: https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html


def shape(name: str, **changes: object) -> ModelShape:
    return model_from_config(config(name, **changes))


def run(model: ModelShape, **overrides: object) -> Capacity:
    args: dict[str, object] = {
        "memory_bytes": MI300X_BYTES,
        "tp": 1,
        "mem_fraction": 0.88,
        "kv_dtype": "auto",
        "page_size": 1,
        "context_length": 131072,
        "concurrency": 1,
        "devices_available": 8,
        "fp8_kv_allowed": True,
    }
    args.update(overrides)
    return check(model, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "tp", "kv_dtype", "expected"),
    [
        ("llama-3.1-8b", 1, "bfloat16", 2 * 32 * 8 * 128 * 2),  # 128 KiB
        ("llama-3.1-8b", 8, "bfloat16", 2 * 32 * 1 * 128 * 2),
        ("llama-3.1-70b", 8, "bfloat16", 2 * 80 * 1 * 128 * 2),  # 40 KiB
        ("llama-3.1-70b", 1, "fp8_e4m3", 2 * 80 * 8 * 128 * 1),
        # 2 KV heads at TP 4: each rank keeps one (replicated), as get_num_kv_heads does.
        ("qwen2.5-0.5b", 4, "bfloat16", 2 * 24 * 1 * 64 * 2),
        # MLA: one latent of kv_lora_rank + qk_rope_head_dim per layer, on every TP rank.
        ("deepseek-v2", 1, "bfloat16", 60 * (512 + 64) * 2),  # 69,120 B
        ("deepseek-v2", 8, "bfloat16", 60 * (512 + 64) * 2),
    ],
)
def test_kv_bytes_per_token(name: str, tp: int, kv_dtype: str, expected: int) -> None:
    assert kv_bytes_per_token(model_from_config(MODELS[name]), tp, kv_dtype) == expected


def test_70b_bf16_on_one_mi300x_at_128k_is_refused_with_ordered_fixes() -> None:
    result = run(shape("llama-3.1-70b"))
    assert not result.fits
    assert result.weights_bytes_per_device == pytest.approx(131.4 * GIB, rel=0.001)
    assert result.kv_bytes_per_token == 320 * 1024
    assert result.tokens_needed == 131072
    assert result.tokens_fit < 131072
    tp, context, fp8_kv, quantize = result.fixes
    assert tp.startswith("Use --tp 2 (this host has 8 devices)")
    assert context.startswith("Use --context-length ")
    assert fp8_kv.startswith("Use --kv-cache-dtype fp8_e4m3: the KV cache takes 160 KiB")
    assert quantize.startswith("Serve an FP8-quantized checkpoint")
    assert "65.7 GiB of weights per device instead of 131.4 GiB" in quantize
    # The suggested context really fits, in whole 1024-token steps.
    suggested = int(context.split()[2].rstrip(":"))
    assert suggested % 1024 == 0
    assert run(shape("llama-3.1-70b"), context_length=suggested).fits
    assert not run(shape("llama-3.1-70b"), context_length=suggested + 1024).fits
    # ... and so does the suggested TP.
    assert run(shape("llama-3.1-70b"), tp=2).fits


def test_summary_gives_the_numbers_in_gib() -> None:
    text = run(shape("llama-3.1-70b")).summary()
    assert "At --tp 1, each device has 192.0 GiB x mem-fraction 0.88 = 169.0 GiB" in text
    assert "131.4 GiB of weights and 3.8 GiB of reserve" in text
    assert "320 KiB per token (bfloat16)" in text
    assert "131,072 tokens of context x 1 request need 131,072 tokens (40.0 GiB): does not fit" in (
        text
    )


def test_qwen_0_5b_on_a_24_gib_cpu_host_fits() -> None:
    result = run(
        shape("qwen2.5-0.5b"),
        memory_bytes=24 * GIB,
        mem_fraction=0.8,
        context_length=32768,
        devices_available=1,
        fp8_kv_allowed=False,
    )
    assert result.fits
    assert result.fixes == ()
    assert result.reserve_bytes == GIB
    assert result.kv_bytes_per_token == 12 * 1024


def test_a_larger_tp_on_another_host_is_named_when_this_one_is_too_small() -> None:
    result = run(shape("llama-3.1-70b"), devices_available=1)
    assert result.fixes[0].startswith(
        "Use --tp 2 (this needs a host with 2 devices; this one has 1)"
    )


def test_tp_must_divide_the_attention_heads() -> None:
    # 14 heads: TP 2 divides them, TP 4 and 8 do not; a fit needing more than TP 2 names none.
    small = run(shape("qwen2.5-0.5b"), memory_bytes=2 * GIB, context_length=1 << 20)
    assert not small.fits
    assert not small.fixes[0].startswith("Use --tp")


def test_deepseek_v2_mla_cache_is_not_split_by_tp() -> None:
    model = shape("deepseek-v2")
    at_8 = run(model, tp=8, concurrency=4)
    assert at_8.fits
    assert at_8.kv_bytes_per_token == 69120
    one = run(model, tp=1)
    assert not one.fits  # 471 GB of weights on one 192 GiB device
    assert one.tokens_fit == 0
    assert one.fixes[0].startswith("Use --tp 4 (this host has 8 devices)")
    # No shorter context fits at TP 1 either: that is no fix, so it is not listed.
    assert not any("--context-length" in fix for fix in one.fixes)
    # No FP8 KV fix when not even the weights fit: it would free nothing that matters.
    assert not any("--kv-cache-dtype" in fix for fix in one.fixes)


def test_fp8_kv_fix_only_where_the_arch_allows_it_and_not_twice() -> None:
    model = shape("llama-3.1-70b")
    assert not any("--kv-cache-dtype" in f for f in run(model, fp8_kv_allowed=False).fixes)
    assert not any("--kv-cache-dtype" in f for f in run(model, kv_dtype="fp8_e5m2").fixes)


def test_a_quantized_model_gets_no_quantization_fix() -> None:
    model = shape("llama-3.1-70b", quantization_config={"quant_method": "fp8"})
    result = run(model, context_length=1 << 20)
    assert not result.fits
    assert not any("FP8-quantized" in fix for fix in result.fixes)


def test_context_is_rounded_up_to_whole_pages() -> None:
    result = run(shape("llama-3.1-8b"), page_size=128, context_length=1000, concurrency=3)
    assert result.tokens_needed == 1024 * 3


def test_auto_kv_dtype_of_a_float32_model_is_float16() -> None:
    result = run(shape("llama-3.1-8b", torch_dtype="float32"), context_length=1024)
    assert result.kv_dtype == "float16"
    assert result.kv_bytes_per_token == 128 * 1024


def test_memory_needed_is_where_it_starts_to_fit() -> None:
    first = run(shape("llama-3.1-70b"))
    needed = first.memory_needed_bytes
    assert run(shape("llama-3.1-70b"), memory_bytes=needed).fits
    assert not run(shape("llama-3.1-70b"), memory_bytes=needed - 64 * 1024 * 1024).fits
    assert 190 * GIB < needed < 210 * GIB


def test_reserve_is_a_gib_or_two_percent() -> None:
    assert reserve(24 * GIB) == GIB
    assert reserve(192 * GIB) == int(192 * GIB * 0.02)


def test_the_kunlun_seed_example_32k_tokens_on_a_7b_model() -> None:
    """The issue quotes the Kunlun seed: "32K tokens on a 7B model needing about 40 GB".

    A Qwen2-7B-like model without GQA (28 layers, hidden 3584, 28 heads of 128, all 28 of them
    KV heads; Qwen2-7B itself has 4 KV heads) takes 2 x 28 x 28 x 128 x 2 = 392 KiB of bf16 KV
    cache per token: 12.25 GiB for 32K tokens. Its ~8.2B parameters take 15.3 GiB, so one 32K
    request needs 27.6 GiB and two need 39.8 GiB, the seed's "about 40 GB". With GQA (4 KV
    heads, which also shrink the k and v projections) the same two requests need 17.7 GiB.
    """
    mha = {
        "architectures": ["Qwen2ForCausalLM"],
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_attention_heads": 28,
        "num_hidden_layers": 28,
        "num_key_value_heads": 28,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 152064,
    }
    model = model_from_config(mha)
    assert model.kv_heads == 28
    one = run(model, context_length=32768, concurrency=1)
    two = run(model, context_length=32768, concurrency=2)
    assert one.kv_bytes_per_token == 392 * 1024

    def resident(c: Capacity) -> float:
        return (c.weights_bytes_per_device + c.kv_bytes_per_token * c.tokens_needed) / GIB

    assert resident(one) == pytest.approx(27.6, abs=0.1)
    assert resident(two) == pytest.approx(39.8, abs=0.1)
    gqa = run(
        model_from_config({**mha, "num_key_value_heads": 4}), context_length=32768, concurrency=2
    )
    assert resident(gqa) == pytest.approx(17.7, abs=0.1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"tp": 0}, "--tp is 0"),
        ({"mem_fraction": 1.5}, "--mem-fraction-static is 1.5"),
        ({"mem_fraction": 0}, "--mem-fraction-static is 0"),
        ({"context_length": 0}, "--context-length is 0"),
        ({"page_size": 0}, "--page-size is 0"),
        ({"concurrency": 0}, "the concurrency is 0"),
        ({"memory_bytes": 0}, "the device memory is 0"),
        ({"kv_dtype": "int4"}, "--kv-cache-dtype 'int4' is not one sglx can size"),
    ],
)
def test_bad_arguments_are_refused_naming_the_flag(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(SglxError, match=message) as caught:
        run(shape("llama-3.1-8b"), **overrides)
    assert caught.value.hint


def test_decode_context_parallelism_splits_a_replicated_kv_cache_where_the_arch_serves_it() -> None:
    """Seed 000's sequence-parallel advice (S0-47) as sglang 0.5.23 has it: --dcp-size D makes
    the D ranks of a TP group split the KV cache's tokens. MLA's latent is on every rank, so
    DeepSeek-V2 at TP 8 gets D times the tokens; the smallest D that fits is named, and its
    numbers hold when evaluated again."""
    model = shape("deepseek-v2")
    off = run(model, tp=8, concurrency=32)
    assert not off.fits and not any("--dcp-size" in fix for fix in off.fixes)
    on = run(model, tp=8, concurrency=32, dcp_allowed=True)
    (fix,) = [fix for fix in on.fixes if "--dcp-size" in fix]
    assert fix.startswith("Use --dcp-size 4 with --tp 8 (decode context parallelism")
    assert f"room for {4 * off.tokens_fit:,} tokens, enough for the 4,194,304 needed" in fix
    order = [fix.split(" ", 2)[1] for fix in on.fixes]
    assert order.index("--dcp-size") == order.index("--context-length") + 1  # before FP8 KV
    # Beyond what any D holds, the largest D is named with what it still lacks.
    short = run(model, tp=8, concurrency=256, dcp_allowed=True)
    (fix,) = [fix for fix in short.fixes if "--dcp-size" in fix]
    assert fix.startswith("Use --dcp-size 8 ") and "still short of" in fix


def test_decode_context_parallelism_is_no_fix_where_tp_already_splits_the_kv_heads() -> None:
    """Llama-3.1-70B has 8 KV heads: at TP 8 each rank holds its own, nothing is replicated, so
    a DCP group would hold more heads per rank for fewer tokens: no gain, no fix."""
    result = run(shape("llama-3.1-70b"), tp=8, concurrency=64, dcp_allowed=True)
    assert not result.fits
    assert not any("--dcp-size" in fix for fix in result.fixes), result.fixes
    # Two KV heads at TP 4 are replicated twice: DCP 2 halves a rank's share.
    qwen = run(shape("qwen2.5-0.5b"), tp=4, memory_bytes=2 * GIB, concurrency=8,
               dcp_allowed=True)  # fmt: skip
    assert any(fix.startswith("Use --dcp-size 2 with --tp 4") for fix in qwen.fixes), qwen.fixes


# --- pipeline parallelism: a device holds its stage's layers -------------------------------


@pytest.mark.parametrize(
    ("layers", "pp", "partition", "largest"),
    [
        (80, 1, None, 80),
        (80, 2, None, 40),
        (61, 4, None, 16),  # 15, 15, 15, 16: the last stages take the one left over
        (32, 3, None, 11),  # 10, 11, 11
        (2, 2, None, 1),  # the demo model, one layer a stage
        (61, 3, "20,20,21", 21),
        (61, 3, "30,16,15", 30),
        (80, 1, "garbage", 80),  # one stage: sglang ignores the partition
    ],
)
def test_the_largest_stage_is_sglangs_split(
    layers: int, pp: int, partition: str | None, largest: int
) -> None:
    """sglang 0.5.23's get_pp_indices (srt/distributed/utils.py): even, the remainder on the
    last stages, or SGLANG_PP_LAYER_PARTITION's counts."""
    assert stage_layers(layers, pp, partition) == largest


@pytest.mark.parametrize(
    ("layers", "pp", "partition", "named"),
    [
        (80, 0, None, "--pp-size is 0; it must be at least 1"),
        (2, 4, None, "--pp-size is 4; it must be at most the model's 2 layers"),
        (61, 3, "20,20", "does not split the model's 61 layers into 3 stages"),
        (61, 3, "20,20,20", "does not split"),
        (61, 3, "30,31,0", "does not split"),
        (61, 3, "a,b,c", "does not split"),
    ],
)
def test_a_split_sglang_refuses_is_refused_naming_it(
    layers: int, pp: int, partition: str | None, named: str
) -> None:
    with pytest.raises(SglxError) as refused:
        stage_layers(layers, pp, partition)
    assert named in str(refused.value), str(refused.value)
    if partition:
        assert "20,20,21" in (refused.value.hint or "")


def test_70b_at_128k_fits_one_mi300x_per_stage_with_two_pipeline_stages() -> None:
    """Seed S0-25's fix where GPUs share no xGMI: --pp-size at the PCIe (or host) boundary.
    Each of the two stages holds 40 of the 80 layers: half the weights and half the KV bytes
    per token on each device, so what --tp 1 refuses fits."""
    model = shape("llama-3.1-70b")
    one = run(model)
    two = run(model, pp=2)
    assert not one.fits and two.fits
    assert two.weights_bytes_per_device == -(-model.weight_bytes * 40 // 80)
    assert two.kv_bytes_per_token == 2 * 40 * 8 * 128 * 2 == one.kv_bytes_per_token // 2
    assert two.summary().startswith(
        "At --tp 1 --pp-size 2 (the largest stage holds 40 of 80 layers), each device has"
    )
    assert one.summary().startswith("At --tp 1, each device has")
    # With TP inside each stage, both divide: 4 x 2 ranks hold a 16th of the KV heads' bytes.
    both = run(model, tp=4, pp=2)
    assert both.kv_bytes_per_token == 2 * 40 * 2 * 128 * 2
    assert both.weights_bytes_per_device == -(-model.weight_bytes * 40 // (80 * 4))
    # A shorter context's fix names the stages it was measured at.
    tight = run(model, pp=2, concurrency=64)
    assert not tight.fits
    assert any(f.endswith("left at --tp 1 --pp-size 2.") for f in tight.fixes), tight.fixes


def test_an_uneven_split_is_sized_by_its_largest_stage() -> None:
    model = shape("llama-3.1-8b")  # 32 layers at --pp-size 3: 10, 11, 11
    assert run(model, pp=3).kv_bytes_per_token == 2 * 11 * 8 * 128 * 2
    partitioned = run(model, pp=3, pp_partition="16,8,8")
    assert partitioned.kv_bytes_per_token == 2 * 16 * 8 * 128 * 2
    assert partitioned.stage_layers == 16


def test_where_no_tp_on_the_host_holds_it_stages_over_hosts_are_offered() -> None:
    """A 96 GiB APU (gfx1151, one device) cannot hold 70B in bf16, and no TP on it can: the
    fixes name a bigger host's TP, then two stages over two such hosts (a serving group of
    one stage each), which holds it; a host where a larger TP fits is offered no stages."""
    model = shape("llama-3.1-70b")
    apu = {"memory_bytes": 96 * GIB, "devices_available": 1, "context_length": 8192}
    result = run(model, **apu)
    assert not result.fits
    tp, stages = result.fixes[:2]
    assert tp.startswith("Use --tp 2 (this needs a host with 2 devices; this one has 1)")
    assert stages.startswith(
        "Use --pp-size 2 with --tp 1 (over 2 hosts of 1 device, --nnodes 2): the largest stage "
        "holds 40 of 80 layers, each device 65.7 GiB of weights and room for "
    ), stages
    assert stages.endswith("enough for the 8,192 needed."), stages
    assert run(model, pp=2, **apu).fits
    # On a host of eight MI300X a larger TP fits there: no stages are offered.
    assert not any("--pp-size" in fix for fix in run(model).fixes)

"""The model shape read from real config.json files: the published parameter counts come out of
the estimate, the weight bytes come from the safetensors files when present, and every hostile
or odd config stops with an SglxError that names the key, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.model_configs import MODELS, config, write_model

from sglx_core.errors import SglxError
from sglx_core.serving.model import MAX_CONFIG_BYTES, model_from_config, read_model, served_dtype

GIB = 1 << 30

# Published sizes: Qwen2.5 model card "0.49B"; Llama 3.1 "8.03B" and "70.6B" (model card table,
# 8,030,261,248 and 70,553,706,496 counted from the checkpoints); DeepSeek-V2 paper "236B total".
PUBLISHED = {
    "qwen2.5-0.5b": 0.494e9,
    "llama-3.1-8b": 8.03e9,
    "llama-3.1-70b": 70.55e9,
    "deepseek-v2": 236e9,
}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_estimate_is_within_one_percent_of_the_published_size(name: str) -> None:
    shape = model_from_config(MODELS[name])
    assert shape.parameters == pytest.approx(PUBLISHED[name], rel=0.01)
    assert shape.weight_bytes == pytest.approx(2 * shape.parameters, rel=0.001)  # bf16
    assert shape.weight_bytes_source == "estimated from config.json"


def test_llama_counts_are_exact() -> None:
    assert model_from_config(MODELS["llama-3.1-8b"]).parameters == 8_030_261_248
    assert model_from_config(MODELS["llama-3.1-70b"]).parameters == 70_553_706_496


def test_shapes_of_the_four_models() -> None:
    qwen = model_from_config(MODELS["qwen2.5-0.5b"])
    assert (qwen.architecture, qwen.layers, qwen.attention_heads, qwen.kv_heads) == (
        "Qwen2ForCausalLM",
        24,
        14,
        2,
    )
    assert (qwen.head_dim, qwen.vocab_size, qwen.dtype, qwen.quantization) == (
        64,
        151936,
        "bfloat16",
        None,
    )
    assert (qwen.experts, qwen.kv_lora_rank, qwen.max_position_embeddings) == (0, 0, 32768)

    llama = model_from_config(MODELS["llama-3.1-70b"])
    assert (llama.layers, llama.hidden_size, llama.kv_heads, llama.head_dim) == (80, 8192, 8, 128)
    assert llama.intermediate_size == 28672

    deepseek = model_from_config(MODELS["deepseek-v2"])
    assert deepseek.architecture == "DeepseekV2ForCausalLM"
    assert (deepseek.experts, deepseek.experts_per_token, deepseek.moe_intermediate_size) == (
        160,
        6,
        1536,
    )
    assert (deepseek.kv_lora_rank, deepseek.qk_rope_head_dim, deepseek.head_dim) == (512, 64, 192)
    assert deepseek.max_position_embeddings == 163840


def test_mixtral_and_qwen_moe_experts_are_counted() -> None:
    # https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json (46.7B total)
    mixtral = {
        "architectures": ["MixtralForCausalLM"],
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "max_position_embeddings": 32768,
        "num_attention_heads": 32,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "num_local_experts": 8,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 32000,
    }
    shape = model_from_config(mixtral)
    assert (shape.experts, shape.experts_per_token, shape.moe_intermediate_size) == (8, 2, 14336)
    assert shape.parameters == pytest.approx(46.7e9, rel=0.01)
    # https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B/blob/main/config.json (14.3B total)
    qwen_moe = {
        "architectures": ["Qwen2MoeForCausalLM"],
        "decoder_sparse_step": 1,
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "moe_intermediate_size": 1408,
        "num_attention_heads": 16,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "num_hidden_layers": 24,
        "num_key_value_heads": 16,
        "shared_expert_intermediate_size": 5632,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 151936,
    }
    assert model_from_config(qwen_moe).parameters == pytest.approx(14.3e9, rel=0.01)


def test_multimodal_text_config_is_read() -> None:
    text = config("llama-3.1-8b")
    wrapped = {
        "architectures": ["LlavaForConditionalGeneration"],
        "text_config": text,
        "vision_config": {"hidden_size": 1024},
    }
    shape = model_from_config(wrapped)
    assert shape.architecture == "LlavaForConditionalGeneration"
    assert (shape.layers, shape.kv_heads, shape.head_dim) == (32, 8, 128)
    assert shape.parameters == 8_030_261_248


def test_declared_head_dim_wins_over_hidden_over_heads() -> None:
    # Qwen3-style: 32 heads x 128 != hidden 2560, and head_dim says so.
    shape = model_from_config(config("llama-3.1-8b", hidden_size=2560, head_dim=128))
    assert shape.head_dim == 128


def test_dtype_key_order_and_default() -> None:
    assert model_from_config(config("llama-3.1-8b", dtype="float16")).dtype == "float16"
    assert model_from_config(config("llama-3.1-8b", torch_dtype=None)).dtype == "float32"
    # float32 checkpoints are served as float16: the estimate counts 2 bytes a weight.
    shape = model_from_config(config("llama-3.1-8b", torch_dtype="float32"))
    assert shape.weight_bytes == pytest.approx(2 * shape.parameters, rel=0.001)


def test_fp8_and_awq_quantization_shrink_the_estimate() -> None:
    bf16 = model_from_config(MODELS["llama-3.1-70b"])
    fp8 = model_from_config(
        config("llama-3.1-70b", quantization_config={"quant_method": "fp8", "fmt": "e4m3"})
    )
    awq = model_from_config(
        config("llama-3.1-70b", quantization_config={"quant_method": "AWQ", "bits": 4})
    )
    assert fp8.quantization == "fp8"
    assert awq.quantization == "awq"
    # Linear layers at 1 byte (fp8) or 0.5 byte (4 bit); embeddings stay 16-bit.
    assert fp8.weight_bytes == pytest.approx(bf16.weight_bytes * 0.515, rel=0.01)
    assert awq.weight_bytes == pytest.approx(bf16.weight_bytes * 0.273, rel=0.01)


def test_weight_bytes_come_from_the_safetensors_files(tmp_path: Path) -> None:
    folder = write_model(
        tmp_path / "m",
        "qwen2.5-0.5b",
        weights={"model.safetensors": 988_097_824, "notes.txt": 5},
    )
    shape = read_model(folder)
    assert shape.weight_bytes == 988_097_824
    assert shape.weight_bytes_source == "safetensors files"


def test_the_index_decides_which_files_count(tmp_path: Path) -> None:
    folder = write_model(
        tmp_path / "m",
        "llama-3.1-8b",
        weights={
            "model-00001-of-00002.safetensors": 3 * GIB,
            "model-00002-of-00002.safetensors": 2 * GIB,
            "consolidated.safetensors": 5 * GIB,  # a second copy sglang does not load
        },
    )
    index = {
        "metadata": {"total_size": 5 * GIB},
        "weight_map": {
            "lm_head.weight": "model-00002-of-00002.safetensors",
            "model.embed_tokens.weight": "model-00001-of-00002.safetensors",
            "model.norm.weight": "model-00002-of-00002.safetensors",
        },
    }
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    assert read_model(folder).weight_bytes == 5 * GIB


def test_hugging_face_cache_links_are_followed(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    blobs.mkdir()
    with (blobs / "abc123").open("wb") as handle:
        handle.truncate(4096)
    folder = write_model(tmp_path / "snapshots" / "rev", "qwen2.5-0.5b")
    (folder / "model.safetensors").symlink_to(blobs / "abc123")
    assert read_model(folder).weight_bytes == 4096


def test_no_weights_means_an_estimate(tmp_path: Path) -> None:
    shape = read_model(write_model(tmp_path / "m", "deepseek-v2"))
    assert shape.weight_bytes_source == "estimated from config.json"
    assert shape.weight_bytes == pytest.approx(471.5e9, rel=0.01)


# --- hostile and odd configs -------------------------------------------------------------------

HOSTILE: list[tuple[str, dict[str, Any], str]] = [
    ("missing layers", {"num_hidden_layers": None}, "num_hidden_layers is missing"),
    ("missing vocab", {"vocab_size": None}, "vocab_size is missing"),
    ("zero kv heads", {"num_key_value_heads": 0}, "num_key_value_heads is 0"),
    ("negative heads", {"num_attention_heads": -32}, "num_attention_heads is -32"),
    ("bool hidden", {"hidden_size": True}, "hidden_size is true, not a whole number"),
    ("string layers", {"num_hidden_layers": "32"}, "num_hidden_layers is '32'"),
    ("float hidden", {"hidden_size": 4096.0}, "hidden_size is 4096.0, not a whole number"),
    ("absurd layers", {"num_hidden_layers": 10**9}, "num_hidden_layers is 1000000000, larger"),
    ("absurd hidden", {"hidden_size": 1 << 40}, "hidden_size is 1099511627776, larger"),
    ("absurd vocab", {"vocab_size": 1 << 30}, "vocab_size is 1073741824, larger"),
    ("absurd head_dim", {"head_dim": 1 << 20}, "head_dim is 1048576, larger"),
    (
        "head_dim does not divide",
        {"hidden_size": 4100},
        "num_attention_heads (32) does not divide hidden_size (4100)",
    ),
    (
        "kv heads do not divide",
        {"num_key_value_heads": 5},
        "num_key_value_heads is 5, which does not divide num_attention_heads (32)",
    ),
    ("more kv than q heads", {"num_key_value_heads": 64}, "num_key_value_heads is 64"),
    ("unknown dtype", {"torch_dtype": "int3"}, "torch_dtype is 'int3', not a dtype"),
    ("dtype not a string", {"torch_dtype": 16}, "torch_dtype is 16"),
    ("tie flag not a bool", {"tie_word_embeddings": "yes"}, "tie_word_embeddings is 'yes'"),
    ("text_config not an object", {"text_config": [1]}, "text_config is [1], not an object"),
    ("quant config a string", {"quantization_config": "fp8"}, "quantization_config is 'fp8'"),
    (
        "quant method missing",
        {"quantization_config": {"bits": 4}},
        "quantization_config.quant_method is null",
    ),
    ("quant bits absurd", {"quantization_config": {"quant_method": "gptq", "bits": 1000}}, "bits"),
    (
        "more experts per token than experts",
        {"num_local_experts": 8, "num_experts_per_tok": 9},
        "num_experts_per_tok is 9, more than the 8 experts",
    ),
    ("experts without top-k", {"num_local_experts": 8}, "num_experts_per_tok is missing"),
    ("mla without rope dim", {"kv_lora_rank": 512}, "qk_rope_head_dim is missing"),
    ("architecture not a name", {"architectures": [{"a": 1}]}, "architectures names"),
    ("context not an int", {"max_position_embeddings": "131072"}, "max_position_embeddings"),
]


@pytest.mark.parametrize(("case", "changes", "message"), HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_config_is_refused_naming_the_key(
    tmp_path: Path, case: str, changes: dict[str, Any], message: str
) -> None:
    folder = write_model(tmp_path / "m", config("llama-3.1-8b", **changes))
    with pytest.raises(SglxError) as caught:
        read_model(folder)
    assert message in caught.value.message
    assert str(folder / "config.json") in caught.value.message
    assert caught.value.hint


def test_text_config_keys_are_named_with_their_section() -> None:
    wrapped = {"architectures": ["X"], "text_config": config("llama-3.1-8b", num_key_value_heads=0)}
    with pytest.raises(SglxError, match=r"text_config\.num_key_value_heads is 0"):
        model_from_config(wrapped)


def _nested(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (_nested(100), "nested more than 64 levels"),
        ("[1, 2, 3]", "is a JSON list, not an object"),
        ('"a string"', "is a JSON string, not an object"),
        ('{"hidden_size": 1, "hidden_size": 2}', "repeats the key 'hidden_size'"),
        ("{not json", "not valid JSON"),
        ("{}", "num_hidden_layers is missing"),
    ],
    ids=["deep nesting", "list", "string", "repeated key", "not json", "empty object"],
)
def test_odd_config_files_are_refused(tmp_path: Path, content: str, message: str) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(content)
    with pytest.raises(SglxError, match=message):
        read_model(folder)


def test_oversized_config_is_refused_without_reading_it_whole(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    with (folder / "config.json").open("wb") as handle:
        handle.truncate(MAX_CONFIG_BYTES + 1)
    with pytest.raises(SglxError, match="larger than 4 MiB"):
        read_model(folder)


def test_a_fifo_config_or_weights_file_does_not_hang(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    with pytest.raises(SglxError, match="is a FIFO, not a regular file"):
        read_model(folder)
    other = write_model(tmp_path / "n", "qwen2.5-0.5b")
    os.mkfifo(other / "model.safetensors")
    with pytest.raises(SglxError, match=r"model\.safetensors: the weights file is a FIFO"):
        read_model(other)


def test_missing_config_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(SglxError, match=r"config\.json: cannot read the model config") as caught:
        read_model(tmp_path)
    assert caught.value.code == "not_found"


@pytest.mark.parametrize(
    "weight_map",
    [
        {"x": "../../etc/passwd.safetensors"},
        {"x": "sub/model.safetensors"},
        {"x": "model.bin"},
        {"x": 7},
        [],
        {"x": "model\u0000.safetensors"},
        {"x": "model\n.safetensors"},
    ],
    ids=["parent", "subfolder", "not safetensors", "not a name", "not an object", "NUL", "newline"],
)
def test_an_index_naming_files_elsewhere_is_refused(tmp_path: Path, weight_map: object) -> None:
    folder = write_model(tmp_path / "m", "qwen2.5-0.5b")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(SglxError, match="weight_map"):
        read_model(folder)


def test_an_index_naming_a_missing_file_says_which(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "m", "qwen2.5-0.5b")
    index = {"weight_map": {"w": "model-00001-of-00001.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(SglxError, match=r"model-00001-of-00001\.safetensors: cannot read"):
        read_model(folder)


@pytest.mark.parametrize(
    ("checkpoint", "dtype_arg", "served"),
    [
        ("float32", "auto", "float16"),  # sglang's auto downcasts a float32 checkpoint
        ("bfloat16", "auto", "bfloat16"),
        ("float16", "auto", "float16"),
        ("bfloat16", "float32", "float32"),
        ("float32", "half", "float16"),
        ("float32", "bfloat16", "bfloat16"),
    ],
)
def test_the_served_dtype_is_the_flag_or_sglangs_auto_rule(
    checkpoint: str, dtype_arg: str, served: str
) -> None:
    assert served_dtype(checkpoint, dtype_arg) == served


def test_an_unknown_dtype_flag_is_a_usage_error() -> None:
    with pytest.raises(SglxError, match="--dtype 'fp8' is not a dtype sglx knows"):
        served_dtype("bfloat16", "fp8")

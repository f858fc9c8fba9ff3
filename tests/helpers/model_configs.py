"""Real Hugging Face `config.json` contents of four models that span what sglx serves: a small
dense GQA model (Qwen2.5-0.5B-Instruct), the 8B and 70B Llama-3.1 (GQA, 8 KV heads) and the
236B DeepSeek-V2 (MoE with MLA), plus `write_model` to lay one out as a model folder.

The values are the published files, key for key; each names where it was checked (the public
mirrors found with the code search, which agree with the Hugging Face page named first).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

# https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json
# checked against the copies in DongfuJiang's README (a duplicate of Qwen/Qwen2.5-0.5B-Instruct),
# verl's training log ("Model config after override: Qwen2Config") and the Qwen2.5 model card
# (0.49B parameters, 24 layers, 14 Q / 2 KV heads, tied embeddings).
QWEN2_5_0_5B_INSTRUCT: dict[str, Any] = {
    "architectures": ["Qwen2ForCausalLM"],
    "attention_dropout": 0.0,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
    "hidden_act": "silu",
    "hidden_size": 896,
    "initializer_range": 0.02,
    "intermediate_size": 4864,
    "max_position_embeddings": 32768,
    "max_window_layers": 21,
    "model_type": "qwen2",
    "num_attention_heads": 14,
    "num_hidden_layers": 24,
    "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06,
    "rope_theta": 1000000.0,
    "sliding_window": 32768,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.43.1",
    "use_cache": True,
    "use_sliding_window": False,
    "vocab_size": 151936,
}

# https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json
# checked against mlmf-hf-layout's byte-for-byte copy of NousResearch/Meta-Llama-3.1-8B
# (same file but for the Instruct model's three-id eos_token_id, which that test also quotes)
# and oumi's Llama 3.1 recipe table (8.03B: 32 layers, 32 heads, 8 KV heads, untied).
LLAMA_3_1_8B_INSTRUCT: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": [128001, 128008, 128009],
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.42.3",
    "use_cache": True,
    "vocab_size": 128256,
}

# https://huggingface.co/meta-llama/Llama-3.1-70B-Instruct/blob/main/config.json
# the 8B file with the 70B geometry, checked against oumi's Llama 3.1 recipe table (hidden 8192,
# MLP 28,672, 80 layers, 64 heads, 8 KV heads, untied) and the Go loader test quoting the
# 70B config (TestLlama31_70BConfigShardsAcrossMultiGPU).
LLAMA_3_1_70B_INSTRUCT: dict[str, Any] = {
    **LLAMA_3_1_8B_INSTRUCT,
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_attention_heads": 64,
    "num_hidden_layers": 80,
    "num_key_value_heads": 8,
}

# https://huggingface.co/deepseek-ai/DeepSeek-V2/blob/main/config.json
# checked against the full copy in a parameter-calculator script (sample_config for
# "DeepseekV2ForCausalLM") and Megatron's deepseek_v2 recipe (60 layers, hidden 5120, 128 heads,
# q_lora_rank 1536, kv_lora_rank 512, 160 experts, moe_ffn_hidden_size 1536, 2 shared experts,
# first layer dense: "236B total params, 21B active").
DEEPSEEK_V2: dict[str, Any] = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "auto_map": {
        "AutoConfig": "configuration_deepseek.DeepseekV2Config",
        "AutoModel": "modeling_deepseek.DeepseekV2Model",
        "AutoModelForCausalLM": "modeling_deepseek.DeepseekV2ForCausalLM",
    },
    "aux_loss_alpha": 0.001,
    "bos_token_id": 100000,
    "eos_token_id": 100001,
    "ep_size": 1,
    "first_k_dense_replace": 1,
    "hidden_act": "silu",
    "hidden_size": 5120,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v2",
    "moe_intermediate_size": 1536,
    "moe_layer_freq": 1,
    "n_group": 8,
    "n_routed_experts": 160,
    "n_shared_experts": 2,
    "norm_topk_prob": False,
    "num_attention_heads": 128,
    "num_experts_per_tok": 6,
    "num_hidden_layers": 60,
    "num_key_value_heads": 128,
    "pretraining_tp": 1,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-06,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "routed_scaling_factor": 16.0,
    "scoring_func": "softmax",
    "seq_aux": True,
    "tie_word_embeddings": False,
    "topk_group": 3,
    "topk_method": "group_limited_greedy",
    "torch_dtype": "bfloat16",
    "transformers_version": "4.39.3",
    "use_cache": True,
    "v_head_dim": 128,
    "vocab_size": 102400,
}

MODELS: dict[str, dict[str, Any]] = {
    "qwen2.5-0.5b": QWEN2_5_0_5B_INSTRUCT,
    "llama-3.1-8b": LLAMA_3_1_8B_INSTRUCT,
    "llama-3.1-70b": LLAMA_3_1_70B_INSTRUCT,
    "deepseek-v2": DEEPSEEK_V2,
}
"""The four configs by a short name, for parametrized tests (0.5B, 8B, 70B, 236B MoE)."""


def config(name: str, **changes: Any) -> dict[str, Any]:
    """A deep copy of MODELS[name] with `changes` applied (a value of None removes the key)."""
    result = copy.deepcopy(MODELS[name])
    for key, value in changes.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = value
    return result


def write_model(
    folder: Path, model: str | dict[str, Any], *, weights: dict[str, int] | None = None
) -> Path:
    """`folder` laid out as a model: config.json (a name from MODELS, or a config dict) and,
    when given, sparse `*.safetensors` files of the given sizes (no disk is used for them).
    Returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    content = MODELS[model] if isinstance(model, str) else model
    (folder / "config.json").write_text(json.dumps(content, indent=2) + "\n")
    for name, size in (weights or {}).items():
        with (folder / name).open("wb") as handle:
            handle.truncate(size)
    return folder

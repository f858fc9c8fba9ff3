"""Tiny Hugging Face models made locally: no hub, no download.

`make_demo_model` trains a byte-level BPE tokenizer on a built-in corpus, builds a Llama or Qwen2
config, initialises random weights from a seed and saves everything with `save_pretrained`
(safetensors). The output is gibberish by design; it exists so images, tests and benchmarks can
serve and compare a real model anywhere. A `sglx-demo.json` marker says it is a demo model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from sglx_core.errors import SglxError

Family = Literal["llama", "qwen2"]
DEMO_MARKER = "sglx-demo.json"

_CORPUS = """\
sglx carries SGLang into sites with no internet. An operator copies one bundle onto the hosts,
verifies its checksums, loads the image and rolls the server out one host at a time.
The quick brown fox jumps over the lazy dog. Pack my box with five dozen liquor jugs.
Kernels, weights and wheels travel together; nothing is fetched at run time.
0 1 2 3 4 5 6 7 8 9 10 100 1000. Hello, world! How are you today? Fine, thank you.
"""
SPECIAL_TOKENS = ("<s>", "</s>", "<pad>")
CHAT_TEMPLATE = (
    "{% for message in messages %}<s>{{ message['role'] }}: {{ message['content'] }}</s>\n"
    "{% endfor %}{% if add_generation_prompt %}<s>assistant: {% endif %}"
)


@dataclass(frozen=True)
class ModelShape:
    """Size of the generated model; the default is about 300 KB."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 512
    vocab_size: int = 384  # at least the trained tokenizer's size


def make_tokenizer(vocab_size: int = 384) -> Any:
    """A byte-level BPE tokenizer trained on the built-in corpus, as a transformers tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(_CORPUS.splitlines(), trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def make_demo_model(
    dst: Path,
    *,
    family: Family = "llama",
    dtype: str = "float32",
    seed: int = 0,
    shape: ModelShape | None = None,
    max_shard_size: str | None = None,
) -> Path:
    """Write a tiny random model of `family` to `dst` (which must not exist yet)."""
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    if dst.exists():
        raise SglxError(f"{dst} already exists", hint="pick a new folder", code="usage")
    shape = shape or ModelShape()
    torch_dtype = getattr(torch, dtype, None)
    if not isinstance(torch_dtype, torch.dtype) or not torch_dtype.is_floating_point:
        raise SglxError(
            f"dtype '{dtype}' is not a torch floating-point dtype",
            code="usage",
            hint="use float32, float16 or bfloat16",
        )
    tokenizer = make_tokenizer()
    vocab = max(shape.vocab_size, len(tokenizer))
    common: dict[str, Any] = {
        "vocab_size": vocab,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "max_position_embeddings": shape.max_position_embeddings,
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
        "tie_word_embeddings": False,
        "initializer_range": 0.05,
    }
    config: Any
    if family == "llama":
        config = LlamaConfig(**common)
        model_cls: Any = LlamaForCausalLM
    elif family == "qwen2":
        from transformers import Qwen2Config, Qwen2ForCausalLM

        config = Qwen2Config(**common)
        model_cls = Qwen2ForCausalLM
    else:
        raise SglxError(f"unknown model family '{family}'", hint="use llama or qwen2", code="usage")
    torch.manual_seed(seed)
    model = model_cls(config).to(torch_dtype).eval()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    dst.mkdir(parents=True)
    save_kwargs: dict[str, Any] = {"safe_serialization": True}
    if max_shard_size is not None:
        save_kwargs["max_shard_size"] = max_shard_size
    model.save_pretrained(dst, **save_kwargs)
    tokenizer.save_pretrained(dst)
    marker = {
        "demo": True,
        "family": family,
        "dtype": dtype,
        "seed": seed,
        **asdict(shape),
        "note": "random weights generated by sglx; output is gibberish by design",
    }
    (dst / DEMO_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
    return dst

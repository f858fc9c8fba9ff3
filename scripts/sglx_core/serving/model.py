"""The served model's shape, read from its `config.json` before any weight is loaded.

The capacity check (`capacity.py`) and the profile selection (`select.py`) need the numbers that
decide memory: layers, hidden size, attention and KV heads, head width, vocabulary, the MLP or
MoE sizes, DeepSeek's MLA latent ranks, the dtype and the quantization. sglang reads the same
keys (`sglang/srt/configs/model_config.py`), but only after importing torch; this reader is
stdlib only so that `sglx-serve --dry-run` answers in a fraction of a second.

The folder comes from outside, so `config.json` is read bounded and as a regular file only
(`sglx_core.untrusted`: size limit, nesting depth, repeated keys), and every number is checked
before it is multiplied: a missing key, a zero or negative head count, `true` where a count is
expected, a size larger than any real model, a head width that does not divide, or query heads
that KV heads do not divide each stop with an SglxError that names the key and the fix.

Weight bytes come from the `*.safetensors` files when the folder has them (what will really be
loaded), else from an estimate of the parameters: embeddings, attention (standard or MLA), the
gated MLP or the experts, the norms, and `lm_head` unless the embeddings are tied. The estimate
leaves out biases and vision towers, so it is a slight lower bound; it is within 1% of the
published sizes of the models in `tests/helpers/model_configs.py`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.untrusted import is_plain_name, open_regular, read_json

CONFIG_FILE = "config.json"
INDEX_FILE = "model.safetensors.index.json"
MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""Largest config.json read (real ones are a few KiB; multimodal ones tens of KiB)."""
MAX_INDEX_BYTES = 64 * 1024 * 1024
"""Largest safetensors index read (DeepSeek-V3's, one line per tensor, is about 9 MiB)."""
MAX_WEIGHT_FILES = 4096
"""Most `*.safetensors` files counted in one folder (the largest real checkpoints have ~200)."""
MAX_NAME_CHARS = 256

SERVED_BYTES = {"bfloat16": 2, "float16": 2, "float32": 2}
"""Bytes per weight and per KV element as served. A float32 checkpoint is served as float16:
sglang's `--dtype auto` downcasts it (`_get_and_verify_dtype` in
sglang/srt/configs/model_config.py, sglang 0.5.23)."""

_DTYPE_NAMES = {
    "bfloat16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "float32": "float32",
    "float": "float32",
}
"""The dtype spellings sglang accepts in a config (`_STR_DTYPE_TO_TORCH_DTYPE`), canonical."""


def served_dtype(checkpoint_dtype: str, dtype_arg: str = "auto") -> str:
    """The dtype sglang serves in: `--dtype` when set, else its auto rule over the checkpoint's
    dtype (float32 downcast to float16, see SERVED_BYTES). Spellings are canonicalised."""
    if dtype_arg == "auto":
        checkpoint = _DTYPE_NAMES.get(checkpoint_dtype, checkpoint_dtype)
        return "float16" if checkpoint == "float32" else checkpoint
    name = _DTYPE_NAMES.get(dtype_arg)
    if name is None:
        raise SglxError(
            f"--dtype {dtype_arg!r} is not a dtype sglx knows",
            hint="serve with --dtype auto, bfloat16, float16 or float32",
            code="usage",
        )
    return name


_EIGHT_BIT_METHODS = frozenset({"fp8", "fbgemm_fp8", "w8a8_fp8", "w8a8_int8", "modelopt", "mxfp8"})
"""quant_method values whose linear weights take one byte each."""

_LIMITS: dict[str, int] = {
    "num_hidden_layers": 1024,
    "hidden_size": 1 << 20,
    "num_attention_heads": 1 << 16,
    "num_key_value_heads": 1 << 16,
    "head_dim": 1 << 16,
    "vocab_size": 1 << 24,
    "intermediate_size": 1 << 24,
    "moe_intermediate_size": 1 << 24,
    "shared_expert_intermediate_size": 1 << 24,
    "n_routed_experts": 1 << 16,
    "num_local_experts": 1 << 16,
    "num_experts": 1 << 16,
    "num_experts_per_tok": 1 << 16,
    "n_shared_experts": 1 << 10,
    "first_k_dense_replace": 1024,
    "moe_layer_freq": 1024,
    "decoder_sparse_step": 1024,
    "kv_lora_rank": 1 << 16,
    "q_lora_rank": 1 << 16,
    "qk_rope_head_dim": 1 << 16,
    "qk_nope_head_dim": 1 << 16,
    "v_head_dim": 1 << 16,
    "max_position_embeddings": 1 << 30,
    "bits": 32,
}
"""Largest value accepted per key: far above any released model (DeepSeek-V3: 61 layers, hidden
7168, 256 experts; Llama-4: vocab 202,048), so only a damaged or hostile config reaches them."""

_FIX_SHAPE = (
    "config.json must describe a decoder model with the Hugging Face keys num_hidden_layers, "
    "hidden_size, num_attention_heads and vocab_size; copy it again from the model's source"
)


@dataclass(frozen=True)
class ModelShape:
    """What the capacity check and the profile selection need to know about the model."""

    architecture: str  # config["architectures"][0] or model_type
    layers: int
    hidden_size: int
    attention_heads: int
    kv_heads: int
    head_dim: int  # MLA: qk_nope_head_dim + qk_rope_head_dim (the query/key head width)
    vocab_size: int
    intermediate_size: int  # dense MLP width; 0 when every layer is MoE and the config omits it
    experts: int  # 0 for dense
    experts_per_token: int  # 0 for dense
    moe_intermediate_size: int  # 0 for dense
    kv_lora_rank: int  # 0 unless MLA (DeepSeek-V2/V3)
    qk_rope_head_dim: int  # 0 unless MLA
    dtype: str  # "bfloat16" | "float16" | "float32" (config dtype / torch_dtype; absent = float32)
    quantization: str | None  # quantization_config.quant_method ("fp8", "awq", ...)
    max_position_embeddings: int | None
    parameters: int  # estimated from the shape
    weight_bytes: int  # the folder's *.safetensors sizes when present, else estimated
    weight_bytes_source: str  # "safetensors files" | "estimated from config.json"


def read_model(folder: Path) -> ModelShape:
    """The shape of the model in `folder`, from its config.json and its safetensors files."""
    path = folder / CONFIG_FILE
    config = read_json(
        path,
        what="model config",
        max_bytes=MAX_CONFIG_BYTES,
        hint=f"point the model path at a folder holding the model's {CONFIG_FILE}",
    )
    if not isinstance(config, Mapping):
        raise SglxError(
            f"{path}: the model config is a JSON {_json_kind(config)}, not an object",
            hint=_FIX_SHAPE,
            code="model_config",
            path=str(path),
        )
    return _shape(config, folder=folder, where=str(path))


def model_from_config(config: Mapping[str, Any], folder: Path | None = None) -> ModelShape:
    """The shape described by an already parsed config; weight bytes from `folder`'s
    safetensors files when it is given and has them."""
    if not isinstance(config, Mapping):
        raise SglxError(
            f"the model config is a {_json_kind(config)}, not an object",
            hint=_FIX_SHAPE,
            code="model_config",
        )
    where = str(folder / CONFIG_FILE) if folder is not None else "the model config"
    return _shape(config, folder=folder, where=where)


# ---------------------------------------------------------------------------------------------
# Reading the keys
# ---------------------------------------------------------------------------------------------


class _Keys:
    """One section of the config (the top level, or a multimodal model's `text_config`) whose
    reads name the key, with its section, in every refusal."""

    def __init__(self, section: Mapping[str, Any], prefix: str, where: str) -> None:
        self.section = section
        self.prefix = prefix
        self.where = where

    def error(self, key: str, problem: str, hint: str) -> SglxError:
        return SglxError(
            f"{self.where}: {self.prefix}{key} {problem}",
            hint=hint,
            code="model_config",
            path=None if self.where == "the model config" else self.where,
        )

    def count(self, key: str, *, default: int | None = None, minimum: int = 1) -> int:
        """A whole number within [minimum, _LIMITS[key]]; `default` when absent or null
        (required when `default` is None)."""
        value = self.section.get(key)
        if value is None:
            if default is None:
                raise self.error(key, "is missing", _FIX_SHAPE)
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.error(
                key,
                f"is {_show(value)}, not a whole number",
                f"set {key} to the model's integer value; copy config.json again from its source",
            )
        if value < minimum:
            raise self.error(
                key,
                f"is {value}; it must be at least {minimum}",
                f"set {key} to the model's real value; copy config.json again from its source",
            )
        limit = _LIMITS[key]
        if value > limit:
            raise self.error(
                key,
                f"is {value}, larger than any real model (at most {limit})",
                "the config is damaged or not a model's config.json; copy it again from its source",
            )
        return value

    def flag(self, key: str, default: bool) -> bool:
        value = self.section.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(
                key,
                f"is {_show(value)}, not true or false",
                f"set {key} to true or false; copy config.json again from its source",
            )
        return value

    def has(self, key: str) -> bool:
        return self.section.get(key) is not None


def _shape(config: Mapping[str, Any], *, folder: Path | None, where: str) -> ModelShape:
    top = _Keys(config, "", where)
    text_section = config.get("text_config")
    if text_section is not None and not isinstance(text_section, Mapping):
        raise top.error(
            "text_config",
            f"is {_show(text_section)}, not an object",
            "copy config.json again from the model's source",
        )
    keys = _Keys(text_section, "text_config.", where) if text_section is not None else top

    layers = keys.count("num_hidden_layers")
    hidden = keys.count("hidden_size")
    heads = keys.count("num_attention_heads")
    kv_heads = keys.count("num_key_value_heads", default=heads)
    vocab = keys.count("vocab_size")
    if heads % kv_heads:
        raise keys.error(
            "num_key_value_heads",
            f"is {kv_heads}, which does not divide num_attention_heads ({heads})",
            "grouped-query attention needs a whole number of query heads per KV head; copy "
            "config.json again from the model's source",
        )

    mla = keys.count("kv_lora_rank", default=0, minimum=0) > 0
    if mla:
        kv_lora_rank = keys.count("kv_lora_rank")
        rope = keys.count("qk_rope_head_dim")
        nope = keys.count("qk_nope_head_dim")
        v_head = keys.count("v_head_dim")
        q_lora_rank = keys.count("q_lora_rank", default=0, minimum=0)
        head_dim = nope + rope
    else:
        kv_lora_rank = rope = nope = v_head = q_lora_rank = 0
        head_dim = _head_dim(keys, hidden, heads)

    experts = _experts(keys)
    experts_per_token = moe_size = shared_size = 0
    moe_layers = 0
    if experts:
        experts_per_token = keys.count("num_experts_per_tok")
        if experts_per_token > experts:
            raise keys.error(
                "num_experts_per_tok",
                f"is {experts_per_token}, more than the {experts} experts the model has",
                "copy config.json again from the model's source",
            )
        moe_layers = _moe_layer_count(keys, layers)
    dense_layers = layers - moe_layers
    if experts:
        if keys.has("moe_intermediate_size"):
            moe_size = keys.count("moe_intermediate_size")
        else:  # Mixtral: intermediate_size is the width of each expert
            moe_size = keys.count("intermediate_size")
        shared_size = keys.count("n_shared_experts", default=0, minimum=0) * moe_size
        shared_size += keys.count("shared_expert_intermediate_size", default=0, minimum=0)
    intermediate = (
        keys.count("intermediate_size")
        if dense_layers or not experts or keys.has("intermediate_size")
        else 0
    )

    # Parameters: linear layers (quantizable) apart from embeddings and norms (kept in 16 bit).
    if mla:
        q_proj = (
            hidden * q_lora_rank + q_lora_rank * heads * head_dim
            if q_lora_rank
            else hidden * heads * head_dim
        )
        attention = (
            q_proj
            + hidden * (kv_lora_rank + rope)  # kv_a_proj_with_mqa
            + kv_lora_rank * heads * (nope + v_head)  # kv_b_proj
            + heads * v_head * hidden  # o_proj
        )
        attention_norms = q_lora_rank + kv_lora_rank
    else:
        attention = hidden * head_dim * (2 * heads + 2 * kv_heads)  # q, k, v, o
        attention_norms = 0
    dense_mlp = 3 * hidden * intermediate  # gate, up, down
    moe_mlp = 3 * hidden * moe_size * experts + 3 * hidden * shared_size + hidden * experts
    linear = layers * attention + dense_layers * dense_mlp + moe_layers * moe_mlp
    tied = keys.flag("tie_word_embeddings", default=False) or top.flag(
        "tie_word_embeddings", default=False
    )
    embeddings = vocab * hidden * (1 if tied else 2)
    norms = layers * (2 * hidden + attention_norms) + hidden
    parameters = linear + embeddings + norms

    dtype = _dtype(keys, top)
    quantization, bits = _quantization(top, keys)
    linear_bytes = _linear_bytes(quantization, bits)
    estimated = linear * linear_bytes + (embeddings + norms) * SERVED_BYTES[dtype]
    estimated = round(estimated)
    on_disk = _safetensors_bytes(folder) if folder is not None else None
    if on_disk is not None and dtype == "float32" and quantization is None:
        on_disk //= 2  # served as float16 (see SERVED_BYTES)

    return ModelShape(
        architecture=_architecture(top, keys),
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=vocab,
        intermediate_size=intermediate,
        experts=experts,
        experts_per_token=experts_per_token,
        moe_intermediate_size=moe_size,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=rope,
        dtype=dtype,
        quantization=quantization,
        max_position_embeddings=(
            keys.count("max_position_embeddings")
            if keys.has("max_position_embeddings")
            else (
                top.count("max_position_embeddings") if top.has("max_position_embeddings") else None
            )
        ),
        parameters=parameters,
        weight_bytes=on_disk if on_disk is not None else estimated,
        weight_bytes_source=(
            "safetensors files" if on_disk is not None else "estimated from config.json"
        ),
    )


def _head_dim(keys: _Keys, hidden: int, heads: int) -> int:
    """`head_dim` when declared (Gemma, Qwen3: heads x head_dim need not equal hidden_size),
    else hidden_size / num_attention_heads, which must then divide."""
    if keys.has("head_dim"):
        return keys.count("head_dim")
    if hidden % heads:
        raise keys.error(
            "num_attention_heads",
            f"({heads}) does not divide hidden_size ({hidden}) and head_dim is not given",
            "set head_dim in config.json, or copy it again from the model's source",
        )
    return hidden // heads


def _experts(keys: _Keys) -> int:
    """Routed experts: DeepSeek `n_routed_experts`, Mixtral `num_local_experts`, Qwen-MoE
    `num_experts`; 0 for a dense model."""
    for key in ("n_routed_experts", "num_local_experts", "num_experts"):
        if keys.has(key):
            return keys.count(key, minimum=0)
    return 0


def _moe_layer_count(keys: _Keys, layers: int) -> int:
    """How many layers hold experts. DeepSeek: layer i when i >= first_k_dense_replace and
    i % moe_layer_freq == 0; Qwen-MoE: when (i + 1) % decoder_sparse_step == 0 and i is not in
    mlp_only_layers; Mixtral: every layer."""
    first_dense = keys.count("first_k_dense_replace", default=0, minimum=0)
    freq = keys.count("moe_layer_freq", default=1)
    step = keys.count("decoder_sparse_step", default=1)
    mlp_only = keys.section.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in mlp_only
    ):
        raise keys.error(
            "mlp_only_layers",
            f"is {_show(mlp_only)}, not a list of layer numbers",
            "copy config.json again from the model's source",
        )
    dense = set(mlp_only)
    return sum(
        1
        for i in range(layers)
        if i >= first_dense and i % freq == 0 and (i + 1) % step == 0 and i not in dense
    )


def _dtype(keys: _Keys, top: _Keys) -> str:
    """The checkpoint dtype: `dtype` before `torch_dtype` (the order sglang reads them), in
    text_config first; absent means float32, as in Hugging Face and sglang."""
    for section in (keys, top) if keys is not top else (top,):
        for key in ("dtype", "torch_dtype"):
            value = section.section.get(key)
            if value is None:
                continue
            name = _DTYPE_NAMES.get(value) if isinstance(value, str) else None
            if name is None:
                raise section.error(
                    key,
                    f"is {_show(value)}, not a dtype sglang serves",
                    "set it to bfloat16, float16 or float32 (the checkpoint's dtype)",
                )
            return name
    return "float32"


def _quantization(top: _Keys, keys: _Keys) -> tuple[str | None, int | None]:
    """quantization_config.quant_method (lowercase) and its `bits` when given."""
    for section in (top, keys) if keys is not top else (top,):
        qc = section.section.get("quantization_config")
        if qc is None:
            continue
        if not isinstance(qc, Mapping):
            raise section.error(
                "quantization_config",
                f"is {_show(qc)}, not an object",
                "copy config.json again from the model's source",
            )
        method = qc.get("quant_method")
        if not isinstance(method, str) or not method or len(method) > 64:
            raise section.error(
                "quantization_config.quant_method",
                f"is {_show(method)}, not a quantization method name",
                "set it to the checkpoint's method (fp8, awq, gptq, ...)",
            )
        sub = _Keys(qc, f"{section.prefix}quantization_config.", section.where)
        bits = sub.count("bits", default=0, minimum=0) or None
        return method.lower(), bits
    return None, None


def _linear_bytes(quantization: str | None, bits: int | None) -> float:
    """Bytes per linear-layer weight: 1 for the FP8/INT8 methods, bits/8 where the config gives
    `bits` (AWQ, GPTQ), else 2 (16-bit, an upper bound for a method this table does not know).
    Scales and zero points are left out: they add about 1-3% to a quantized checkpoint."""
    if quantization is None:
        return 2
    if quantization in _EIGHT_BIT_METHODS:
        return 1
    if bits is not None:
        return bits / 8
    return 2


def _architecture(top: _Keys, keys: _Keys) -> str:
    archs = top.section.get("architectures")
    name: object = None
    if isinstance(archs, list) and archs:
        name = archs[0]
    if name is None:
        name = top.section.get("model_type") or keys.section.get("model_type")
    if name is None:
        return "unknown"
    if not isinstance(name, str) or not name.isprintable() or len(name) > MAX_NAME_CHARS:
        raise top.error(
            "architectures",
            f"names {_show(name)}, not an architecture",
            "copy config.json again from the model's source",
        )
    return name


# ---------------------------------------------------------------------------------------------
# Weight files
# ---------------------------------------------------------------------------------------------


def _safetensors_bytes(folder: Path) -> int | None:
    """Total size of the checkpoint's safetensors files: those the index names when there is
    one (a folder may also hold a `consolidated.safetensors` copy that sglang does not load),
    else every `*.safetensors`; None when there are none. Each is opened as a regular file
    (links are followed, so a Hugging Face cache snapshot works; a FIFO or device is refused)."""
    index = folder / INDEX_FILE
    names = _index_names(index) if os.path.lexists(index) else _listed_names(folder)
    if not names:
        return None
    total = 0
    for name in names:
        with open_regular(
            folder / name,
            what="weights file",
            hint=f"copy the checkpoint's {name} into {folder} again",
        ) as handle:
            total += os.fstat(handle.fileno()).st_size
    return total


def _index_names(index: Path) -> list[str]:
    doc = read_json(index, what="safetensors index", max_bytes=MAX_INDEX_BYTES)
    weight_map = doc.get("weight_map") if isinstance(doc, Mapping) else None
    if not isinstance(weight_map, Mapping):
        raise SglxError(
            f"{index}: weight_map is missing or not an object",
            hint=f"copy {index.name} again from the model's source",
            code="model_config",
            path=str(index),
        )
    names = set()
    for value in weight_map.values():
        if (
            not isinstance(value, str)
            or not value.endswith(".safetensors")
            or not is_plain_name(value)
            or value.startswith(".")
            or len(value) > MAX_NAME_CHARS
        ):
            raise SglxError(
                f"{index}: weight_map names {_show(value)}, not a safetensors file of this folder",
                hint=f"copy {index.name} again from the model's source",
                code="model_config",
                path=str(index),
            )
        names.add(value)
        if len(names) > MAX_WEIGHT_FILES:
            raise _too_many(index.parent)
    return sorted(names)


def _listed_names(folder: Path) -> list[str]:
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.endswith(".safetensors"):
                    names.append(entry.name)
                    if len(names) > MAX_WEIGHT_FILES:
                        raise _too_many(folder)
    except OSError as exc:
        raise SglxError(
            f"{folder}: cannot list the model folder: {exc.strerror}",
            hint="check that the model path is a readable folder",
            code="environment",
            path=str(folder),
        ) from None
    return sorted(names)


def _too_many(folder: Path) -> SglxError:
    return SglxError(
        f"{folder}: more than {MAX_WEIGHT_FILES} safetensors files; no real checkpoint has that "
        "many",
        hint="point the model path at the checkpoint's own folder",
        code="model_config",
        path=str(folder),
    )


def _show(value: object) -> str:
    """A short rendering of a config value for a message (JSON spelling for true/false/null)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "list"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "null" if value is None else type(value).__name__

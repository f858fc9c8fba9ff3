"""Facts about the served model that profile rules may look at, read from its config.json.

Some arch limits depend on the model, not on a flag: the CK batch-prefill kernel behind the
aiter attention backend asserts a head width of at most 256, so a wider model must take
another backend, unless sglang routes its prefill through Triton's unified attention, as it
does for a model with a sliding-window KV pool (`hybrid_swa`). Rules state such limits as
data (`server.rules.<name>.model`); this module only reads the facts they compare against.

The read never stops the server: model_path may be a hub id (not read; sglang downloads it
later), and a config.json that is missing, a link to a device, oversized or not a JSON object
gives no facts, so no model-conditioned rule applies. The read is bounded and opens a regular
file only (sglx_core.untrusted), because the folder comes from outside.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeGuard

from sglx_core.errors import SglxError
from sglx_core.untrusted import read_json

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
MAX_CONFIG_BYTES = 4 * 1024 * 1024
"""Largest config.json read (real ones are a few KiB; multimodal ones tens of KiB)."""


def read_config(model_path: str | None) -> Mapping[str, Any] | None:
    """The model folder's config.json as a JSON object, or None: no local folder (a hub id,
    which sglang resolves later and sglx does not guess at), or a config.json that is missing
    or not sane (sglang names that itself when it loads the model)."""
    if not model_path:
        return None
    folder = Path(model_path)
    try:
        local = folder.is_dir()
    except (OSError, ValueError):  # a NUL byte or an over-long name: not a folder either
        local = False
    if not local:
        return None
    try:
        config = read_json(folder / CONFIG_FILE, what="model config", max_bytes=MAX_CONFIG_BYTES)
    except SglxError as exc:
        logger.info("sglx: no model config from %s: %s", folder, exc)
        return None
    return config if isinstance(config, Mapping) else None


def model_facts(model_path: str | None) -> dict[str, Any]:
    """The facts rules compare (`head_dim`, `hybrid_swa`), or {} when the model's config
    cannot be read."""
    config = read_config(model_path)
    if config is None:
        return {}
    head_dim = attention_head_dim(config)
    facts: dict[str, Any] = {"hybrid_swa": hybrid_swa(config)}
    if head_dim is not None:
        facts["head_dim"] = head_dim
    return facts


def hybrid_swa(config: Mapping[str, Any]) -> bool:
    """Whether sglang serves the model with a sliding-window KV pool beside the full one: its
    own is_hybrid_swa_model (wheel:srt/configs/model_config.py), on config.json's architectures
    and text config, read here as attributes the way sglang reads its config objects."""
    from types import SimpleNamespace

    from sglang.srt.configs.model_config import is_hybrid_swa_model

    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not all(isinstance(a, str) for a in architectures):
        return False
    text = config.get("text_config")
    section = text if isinstance(text, Mapping) else config
    names = {k: v for k, v in section.items() if isinstance(k, str) and k.isidentifier()}
    try:
        return bool(is_hybrid_swa_model(architectures, SimpleNamespace(**names)))
    except (AttributeError, TypeError, ValueError):  # a field sglang reads is missing or odd
        return False


def attention_head_dim(config: Mapping[str, Any]) -> int | None:
    """The widest attention head of the model: `head_dim`, else `hidden_size /
    num_attention_heads`, at the top level and in a multimodal model's `text_config`."""
    sections = [config]
    text = config.get("text_config")
    if isinstance(text, Mapping):
        sections.append(text)
    found = [width for section in sections if (width := _head_dim(section)) is not None]
    return max(found, default=None)


def _head_dim(section: Mapping[str, Any]) -> int | None:
    declared = section.get("head_dim")
    if _positive_int(declared):
        return declared
    hidden, heads = section.get("hidden_size"), section.get("num_attention_heads")
    if _positive_int(hidden) and _positive_int(heads):
        return hidden // heads
    return None


def _positive_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0

"""Facts about the served model that profile rules may look at, read from its config.json.

Some arch limits depend on the model, not on a flag: the CK batch-prefill kernel behind the
aiter attention backend asserts a head width of at most 256, so a wider model must take
another backend. Rules state such limits as data (`server.rules.<name>.model`); this module
only reads the facts they compare against.

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


def model_facts(model_path: str | None) -> dict[str, Any]:
    """The facts rules compare (`head_dim`), or {} when the model's config cannot be read."""
    if not model_path:
        return {}
    folder = Path(model_path)
    try:
        local = folder.is_dir()
    except (OSError, ValueError):  # a NUL byte or an over-long name: not a folder either
        local = False
    if not local:
        return {}  # a hub id: sglang resolves it later, sglx does not guess
    try:
        config = read_json(folder / CONFIG_FILE, what="model config", max_bytes=MAX_CONFIG_BYTES)
    except SglxError as exc:
        logger.info("sglx: no model facts from %s: %s", folder, exc)
        return {}
    if not isinstance(config, Mapping):
        return {}
    head_dim = attention_head_dim(config)
    return {} if head_dim is None else {"head_dim": head_dim}


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

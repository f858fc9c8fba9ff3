"""Finding and checking the weights of a Hugging Face checkpoint folder.

A checkpoint holds its weights either in one ``*.safetensors`` file or in shards listed by a
``*.safetensors.index.json`` (``weight_map``: tensor name -> shard file). Everything is checked
before a byte is written: every shard the index names exists and has a sound header, every tensor
the index names is in the shard it names, and no shard holds a tensor the index does not list
(a stale index). Other top-level files (config, tokenizer, generation config, chat template) are
carried over; other weight formats and sub-folders are not, and are listed as skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx.errors import SglxError
from sglx.weights.bounded_json import MAX_CONFIG_BYTES, MAX_INDEX_BYTES, read_json_file
from sglx.weights.manifest import MANIFEST_NAME
from sglx.weights.safetensors_io import SafetensorsFile, TensorEntry, read_header

WEIGHTS_SUFFIX = ".safetensors"
INDEX_SUFFIX = ".safetensors.index.json"
CONFIG_NAME = "config.json"
# A numbered shard (model-00002-of-00004.safetensors): one the index does not name is an error,
# not a duplicate in another layout (such as Mistral's consolidated.safetensors).
_SHARD_NAME = re.compile(r".+-\d+-of-\d+\.safetensors")
# Weights in formats sglx does not convert: not carried (they would keep the source dtype).
OTHER_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".gguf", ".onnx")


@dataclass(frozen=True)
class Checkpoint:
    """A checked checkpoint: its shards (in order), tensors and the files carried with them."""

    root: Path
    index_name: str | None
    index_metadata: Mapping[str, Any]
    shards: tuple[SafetensorsFile, ...]
    carried: tuple[str, ...]  # top-level files copied next to the weights
    skipped: tuple[tuple[str, str], ...]  # (entry, why it is not carried)
    config: Mapping[str, Any] | None

    @property
    def tensors(self) -> tuple[TensorEntry, ...]:
        return tuple(t for shard in self.shards for t in shard.tensors)

    @property
    def weight_bytes(self) -> int:
        return sum(shard.size for shard in self.shards)


def _shard_path(root: Path, index: Path, name: str) -> Path:
    if "/" in name or "\\" in name or name in ("", ".", ".."):
        raise SglxError(
            f"{index}: weight_map names '{name}', which is not a file in the checkpoint folder",
            hint="shards must sit next to the index",
            code="corrupt",
            path=str(index),
        )
    path = root / name
    if not path.is_file():
        raise SglxError(
            f"{index}: shard '{name}' named by the index is missing from {root}",
            hint="copy every shard the index lists (an interrupted download leaves some out)",
            code="missing_shard",
            path=str(path),
        )
    return path


def _read_indexed(root: Path, index: Path) -> tuple[Mapping[str, Any], tuple[SafetensorsFile, ...]]:
    document = read_json_file(index, what="safetensors index", max_bytes=MAX_INDEX_BYTES)
    weight_map = document.get("weight_map") if isinstance(document, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise SglxError(
            f"{index}: no 'weight_map' object (tensor name -> shard file)",
            hint="the index is damaged; re-copy it from the original checkpoint",
            code="corrupt",
            path=str(index),
        )
    if not weight_map:
        raise SglxError(
            f"{index}: the index names no shards (its weight_map is empty)",
            hint="the index is damaged or from an unfinished export; re-copy it from the "
            "original checkpoint, or remove it if the folder's one *.safetensors file holds "
            "all the weights",
            code="corrupt",
            path=str(index),
        )
    names = sorted(set(weight_map.values()))
    shards = tuple(read_header(_shard_path(root, index, name)) for name in names)
    held = {shard.path.name: {t.name for t in shard.tensors} for shard in shards}
    for tensor, shard_name in weight_map.items():
        if tensor not in held[shard_name]:
            raise SglxError(
                f"{index}: the index puts tensor '{tensor}' in '{shard_name}', which does not "
                "hold it",
                hint="the index and the shards come from different versions of the checkpoint; "
                "re-copy both",
                code="missing_tensor",
                path=str(index),
            )
    for shard_name, tensors in held.items():
        stale = sorted(t for t in tensors if weight_map.get(t) != shard_name)
        if stale:
            raise SglxError(
                f"{index}: shard '{shard_name}' holds tensor(s) the index does not list there: "
                f"{', '.join(stale[:5])}{' ...' if len(stale) > 5 else ''}",
                hint="the index is stale; re-copy it with the shards",
                code="index_mismatch",
                path=str(index),
            )
    metadata = document.get("metadata") or {}
    return (metadata if isinstance(metadata, dict) else {}), shards


def read_checkpoint(root: Path) -> Checkpoint:
    """Locate and check the weights in `root`; raise a clear `SglxError` on any problem."""
    if not root.is_dir():
        raise SglxError(
            f"{root}: no such checkpoint folder",
            hint="give the folder holding config.json and the *.safetensors files",
            code="usage",
            path=str(root),
        )
    entries = sorted(root.iterdir(), key=lambda p: p.name)
    indexes = [p for p in entries if p.name.endswith(INDEX_SUFFIX) and p.is_file()]
    singles = [p for p in entries if p.name.endswith(WEIGHTS_SUFFIX) and p.is_file()]
    if len(indexes) > 1:
        raise SglxError(
            f"{root}: several safetensors indexes ({', '.join(p.name for p in indexes)})",
            hint="keep the one index of the weights to convert",
            code="usage",
            path=str(root),
        )
    index_metadata: Mapping[str, Any] = {}
    if indexes:
        index_metadata, shards = _read_indexed(root, indexes[0])
    elif len(singles) == 1:
        shards = (read_header(singles[0]),)
    elif not singles:
        others = [p.name for p in entries if p.name.endswith(OTHER_WEIGHT_SUFFIXES)]
        raise SglxError(
            f"{root}: no *.safetensors weights"
            + (f" (found {', '.join(others)})" if others else ""),
            hint="sglx converts safetensors checkpoints; re-save the model with "
            "save_pretrained(..., safe_serialization=True)",
            code="usage",
            path=str(root),
        )
    else:
        raise SglxError(
            f"{root}: {len(singles)} *.safetensors files and no *{INDEX_SUFFIX} to say "
            "which tensor lives where",
            hint="copy the checkpoint's model.safetensors.index.json too",
            code="missing_index",
            path=str(root),
        )
    if not any(shard.tensors for shard in shards):
        raise SglxError(
            f"{root}: the weights hold no tensors ({', '.join(s.path.name for s in shards)})",
            hint="the checkpoint is empty or its export was cut short; re-copy it",
            code="corrupt",
            path=str(root),
        )
    used = {shard.path.name for shard in shards} | {p.name for p in indexes}
    carried: list[str] = []
    skipped: list[tuple[str, str]] = []
    for path in entries:
        name = path.name
        if name in used:
            continue
        if name.startswith("."):
            skipped.append((name, "hidden"))
        elif not path.is_file():
            skipped.append((name, "not a regular file (sub-folders are not carried)"))
        elif name.endswith(WEIGHTS_SUFFIX) and _SHARD_NAME.fullmatch(name):
            raise SglxError(
                f"{root}: shard '{name}' is not named by {indexes[0].name}",
                hint="the index is stale or from another revision; re-copy it with the shards "
                "(its tensors would be dropped)",
                code="index_mismatch",
                path=str(path),
            )
        elif name.endswith(WEIGHTS_SUFFIX):
            skipped.append((name, "safetensors file the index does not use"))
        elif name.endswith(OTHER_WEIGHT_SUFFIXES):
            skipped.append((name, "weights in a format sglx does not convert"))
        elif name == MANIFEST_NAME:
            skipped.append((name, "manifest of an earlier conversion (a new one is written)"))
        else:
            carried.append(name)
    config_path = root / CONFIG_NAME
    config = (
        read_json_file(config_path, what="model config", max_bytes=MAX_CONFIG_BYTES)
        if config_path.is_file()
        else None
    )
    if config is not None and not isinstance(config, dict):
        raise SglxError(f"{config_path}: not a JSON object", code="corrupt", path=str(config_path))
    return Checkpoint(
        root=root,
        index_name=indexes[0].name if indexes else None,
        index_metadata=index_metadata,
        shards=shards,
        carried=tuple(carried),
        skipped=tuple(skipped),
        config=config,
    )

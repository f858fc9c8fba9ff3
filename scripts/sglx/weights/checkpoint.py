"""Finding and checking the weights of a Hugging Face checkpoint folder.

A checkpoint holds its weights either in one ``*.safetensors`` file or in shards listed by a
``*.safetensors.index.json`` (``weight_map``: tensor name -> shard file). Everything is checked
before a byte is written: every shard the index names exists and has a sound header, every tensor
the index names is in the shard it names, and no shard holds a tensor the index does not list
(a stale index). Other top-level files (config, tokenizer, generation config, chat template) are
carried over; other weight formats and sub-folders are not, and are listed as skipped.

A checkpoint comes from outside, so every file sglx reads from it must be a regular file of the
checkpoint itself: a symlink is followed only when it resolves inside the folder (or, for a
Hugging Face cache snapshot, `models--ORG--NAME/snapshots/REV/`, inside that repository's
`blobs/` folder, where the cache keeps the files its snapshot links point to). A link to
anything else (`tokenizer_config.json -> /etc/shadow`) would copy a host file into the
converted model and from there into an image; it is refused, naming the file, and so are
FIFOs, devices and sockets, which would hang the reader or feed it forever.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Literal

from sglx.weights.bounded_json import MAX_CONFIG_BYTES, MAX_INDEX_BYTES, read_json_file
from sglx.weights.safetensors_io import SafetensorsFile, TensorEntry, read_header
from sglx_core.errors import SglxError
from sglx_core.untrusted import file_kind, is_plain_name, open_regular
from sglx_core.weights_manifest import MANIFEST_NAME

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

    def open(self, name: str) -> BinaryIO:
        """The checkpoint's file `name`, opened for reading (never blocking on a FIFO); the
        rules of `read_checkpoint` are applied again to what was opened, so a file swapped
        since for a link that leaves the checkpoint is refused."""
        path = self.root / name
        handle = open_regular(path, what="checkpoint file", hint=_FIX)
        try:
            source_kind(path, trusted_roots(self.root))
            same = os.path.samestat(os.fstat(handle.fileno()), path.stat())
        except OSError:
            same = False
        except BaseException:
            handle.close()
            raise
        if not same:
            handle.close()
            raise SglxError(
                f"{path}: the file changed while it was being read",
                hint="leave the checkpoint alone while it converts, then convert again",
                code="environment",
                path=str(path),
            )
        return handle


SourceKind = Literal["file", "folder", "missing"]
_FIX = "put the file itself in the checkpoint folder if it belongs to the model, or remove it"


def trusted_roots(root: Path) -> tuple[Path, ...]:
    """The folders (resolved) that the files of the checkpoint `root` may resolve into."""
    real = Path(os.path.realpath(root))
    if real.parent.name == "snapshots":  # a Hugging Face cache snapshot: links to ../../blobs
        return real, real.parent.parent / "blobs"
    return (real,)


def source_kind(path: Path, roots: tuple[Path, ...]) -> SourceKind:
    """What the checkpoint entry `path` is, following links: a regular file or a folder, or
    missing (a dangling link). A file that resolves outside `roots`, a FIFO, a device or a
    socket is refused with an error naming `path`; folders are never read, so not judged."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "missing"
    except OSError as exc:  # ELOOP, EACCES, ...
        raise SglxError(
            f"{path}: cannot read the checkpoint file: {exc.strerror}",
            hint=_FIX,
            code="not_regular",
            path=str(path),
        ) from None
    if stat.S_ISDIR(mode):
        return "folder"
    real = Path(os.path.realpath(path))
    if not any(real.is_relative_to(root) for root in roots):
        raise SglxError(
            f"{path}: a link to {real}, outside the checkpoint folder; sglx carries only the "
            "checkpoint's own files",
            hint=_FIX,
            code="link_outside",
            path=str(path),
        )
    if not stat.S_ISREG(mode):
        raise SglxError(
            f"{path}: the checkpoint file is {file_kind(mode)}, not a regular file",
            hint=_FIX,
            code="not_regular",
            path=str(path),
        )
    return "file"


def _shard_path(root: Path, index: Path, name: str, roots: tuple[Path, ...]) -> Path:
    if not is_plain_name(name):
        raise SglxError(
            f"{index}: weight_map names {name!r}, which is not a file in the checkpoint folder",
            hint="shards must sit next to the index",
            code="corrupt",
            path=str(index),
        )
    path = root / name
    if source_kind(path, roots) != "file":
        raise SglxError(
            f"{index}: shard '{name}' named by the index is missing from {root}",
            hint="copy every shard the index lists (an interrupted download leaves some out)",
            code="missing_shard",
            path=str(path),
        )
    return path


def _read_indexed(
    root: Path, index: Path, roots: tuple[Path, ...]
) -> tuple[Mapping[str, Any], tuple[SafetensorsFile, ...]]:
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
    shards = tuple(read_header(_shard_path(root, index, name, roots)) for name in names)
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
    roots = trusted_roots(root)
    entries = sorted(root.iterdir(), key=lambda p: p.name)
    # Every entry sglx may read is judged first (hidden ones are never read).
    kinds = {p.name: source_kind(p, roots) for p in entries if not p.name.startswith(".")}
    files = [p for p in entries if kinds.get(p.name) == "file"]
    indexes = [p for p in files if p.name.endswith(INDEX_SUFFIX)]
    singles = [p for p in files if p.name.endswith(WEIGHTS_SUFFIX)]
    if len(indexes) > 1:
        raise SglxError(
            f"{root}: several safetensors indexes ({', '.join(p.name for p in indexes)})",
            hint="keep the one index of the weights to convert",
            code="usage",
            path=str(root),
        )
    index_metadata: Mapping[str, Any] = {}
    if indexes:
        index_metadata, shards = _read_indexed(root, indexes[0], roots)
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
        elif kinds[name] == "missing":
            skipped.append((name, "a link to nothing (dangling)"))
        elif kinds[name] == "folder":
            skipped.append((name, "a folder (sub-folders are not carried)"))
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
        if kinds.get(CONFIG_NAME) == "file"
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

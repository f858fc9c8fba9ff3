"""The layout of the converted weights: which tensor goes to which output shard, in what dtype.

Without a maximum shard size the source layout is kept: same shard names, same tensors in each,
same index name. With one, tensors are packed greedily in source order into
``model-0000i-of-0000n.safetensors`` files no larger than the maximum (a tensor larger than the
maximum gets a shard of its own), the rule `save_pretrained` follows; one shard is written as
``model.safetensors`` without an index. Inside a shard, tensors are ordered by element width,
widest first, so every tensor's data starts aligned to its element size (the safetensors
writer does the same).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from sglx.weights.checkpoint import Checkpoint
from sglx.weights.dtypes import Dtype
from sglx.weights.policy import DtypePolicy
from sglx.weights.safetensors_io import SafetensorsFile, TensorEntry, encode_header
from sglx_core.errors import SglxError
from sglx_core.sizes import EXAMPLES, parse_size
from sglx_core.untrusted import open_regular

DEFAULT_INDEX_NAME = "model.safetensors.index.json"
SINGLE_NAME = "model.safetensors"


@dataclass(frozen=True)
class TensorPlan:
    """One tensor: where it comes from and the dtype it is stored in."""

    source: TensorEntry
    dtype: Dtype

    @property
    def nbytes(self) -> int:
        size = self.dtype.nbytes(self.source.numel)
        return self.source.nbytes if size is None else size


@dataclass(frozen=True)
class ShardPlan:
    """One output safetensors file.

    `verbatim` is the source file when the shard is that file unchanged (same tensors, same
    dtypes): its header is then kept byte for byte, so the output equals the source file and
    one sha256 serves both (no second pass over the source to hash it).
    """

    name: str
    metadata: Mapping[str, str]
    tensors: tuple[TensorPlan, ...]
    verbatim: SafetensorsFile | None = None

    @cached_property
    def header(self) -> bytes:
        if self.verbatim is not None:
            with open_regular(self.verbatim.path, what="safetensors file") as handle:
                return handle.read(self.verbatim.data_start)
        return encode_header(
            [(t.source.name, t.dtype.code, t.source.shape, t.nbytes) for t in self.tensors],
            self.metadata,
        )

    @property
    def size(self) -> int:
        return len(self.header) + sum(t.nbytes for t in self.tensors)


@dataclass(frozen=True)
class OutputPlan:
    shards: tuple[ShardPlan, ...]
    index_name: str | None  # None: a single file, no index
    index_metadata: Mapping[str, Any]

    @property
    def tensors(self) -> tuple[TensorPlan, ...]:
        return tuple(t for shard in self.shards for t in shard.tensors)

    def index(self) -> dict[str, Any]:
        """The ``*.safetensors.index.json`` document of this layout."""
        metadata = dict(self.index_metadata)
        metadata["total_size"] = sum(t.nbytes for t in self.tensors)
        weight_map = {t.source.name: s.name for s in self.shards for t in s.tensors}
        return {"metadata": metadata, "weight_map": dict(sorted(weight_map.items()))}


def parse_shard_size(text: str) -> int:
    """'2GB' -> 2_000_000_000, '500MiB' -> 524_288_000 (sglx_core.sizes); more than 0."""
    size = parse_size(text)
    if not size:
        raise SglxError(
            f"shard size '{text}' is not a size",
            hint=f"use {EXAMPLES}, more than 0 (5GB, as Hugging Face shards)",
            code="usage",
        )
    return size


def _aligned(tensors: Sequence[TensorPlan]) -> tuple[TensorPlan, ...]:
    return tuple(sorted(tensors, key=lambda t: -t.dtype.bits))  # stable: keeps source order


def _merged_metadata(checkpoint: Checkpoint) -> dict[str, str]:
    merged: dict[str, str] = {}
    for shard in checkpoint.shards:
        for key, value in shard.metadata.items():
            merged.setdefault(key, value)
    return merged


def plan_output(
    checkpoint: Checkpoint, policy: DtypePolicy, max_shard_size: int | None
) -> OutputPlan:
    """The output layout for `checkpoint` under `policy`."""

    def planned(entry: TensorEntry) -> TensorPlan:
        return TensorPlan(entry, policy.output_dtype(entry.name, entry.dtype))

    index_metadata = {k: v for k, v in checkpoint.index_metadata.items() if k != "total_size"}
    if max_shard_size is None:
        kept = []
        for source in checkpoint.shards:
            tensors = [planned(t) for t in source.tensors]
            if all(t.dtype == t.source.dtype for t in tensors):
                kept.append(ShardPlan(source.path.name, source.metadata, tuple(tensors), source))
            else:
                kept.append(ShardPlan(source.path.name, source.metadata, _aligned(tensors)))
        return OutputPlan(tuple(kept), checkpoint.index_name, index_metadata)

    groups: list[list[TensorPlan]] = [[]]
    filled = 0
    for entry in checkpoint.tensors:
        plan = planned(entry)
        if groups[-1] and filled + plan.nbytes > max_shard_size:
            groups.append([])
            filled = 0
        groups[-1].append(plan)
        filled += plan.nbytes
    metadata = _merged_metadata(checkpoint)
    if len(groups) == 1:
        return OutputPlan((ShardPlan(SINGLE_NAME, metadata, _aligned(groups[0])),), None, {})
    count = len(groups)
    shards = tuple(
        ShardPlan(f"model-{i:05d}-of-{count:05d}.safetensors", metadata, _aligned(group))
        for i, group in enumerate(groups, start=1)
    )
    return OutputPlan(shards, checkpoint.index_name or DEFAULT_INDEX_NAME, index_metadata)

"""Helpers for the `sglx weights` tests: tiny real checkpoints, made once per test process.

`demo_checkpoint(family, dtype)` saves a random tiny Llama or Qwen2 with transformers
(`sglx.demo_model`), cached for the whole session because each takes a few seconds; tests copy
it before changing anything. `save_tensors` writes a hand-made checkpoint with the safetensors
library itself (integer, FP8 and odd tensors a demo model does not have). Everything lives under
one temporary root that is removed when the process exits.
"""

from __future__ import annotations

import atexit
import json
import shutil
import struct
import tempfile
from pathlib import Path
from typing import Any

from sglx.demo_model import ModelShape, make_demo_model

_ROOT = Path(tempfile.mkdtemp(prefix="sglx-test-weights-"))
atexit.register(shutil.rmtree, _ROOT, True)
_CACHE: dict[tuple[str, str, str | None], Path] = {}
# Small enough to convert and run in well under a second, wide enough to exercise every layer.
SHAPE = ModelShape(hidden_size=32, intermediate_size=64, num_attention_heads=4, vocab_size=384)


def scratch(name: str) -> Path:
    """A new empty folder under the session root."""
    return Path(tempfile.mkdtemp(prefix=f"{name}-", dir=_ROOT))


def demo_checkpoint(family: str, dtype: str, max_shard_size: str | None = None) -> Path:
    """A cached tiny random model (treat as read-only: copy it before changing anything)."""
    key = (family, dtype, max_shard_size)
    if key not in _CACHE:
        path = _ROOT / "models" / f"{family}-{dtype}-{max_shard_size or 'single'}"
        path.parent.mkdir(exist_ok=True)
        make_demo_model(
            path,
            family=family,  # type: ignore[arg-type]
            dtype=dtype,
            seed=7,
            shape=SHAPE,
            max_shard_size=max_shard_size,
        )
        _CACHE[key] = path
    return _CACHE[key]


def copy_checkpoint(src: Path, name: str) -> Path:
    dst = scratch(name) / "model"
    shutil.copytree(src, dst)
    return dst


def save_tensors(
    folder: Path,
    tensors: dict[str, Any],
    *,
    config: dict[str, Any] | None = None,
    name: str = "model.safetensors",
) -> Path:
    """Write torch tensors with safetensors' own writer (and a config.json when given)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / name), metadata={"format": "pt"})
    if config is not None:
        (folder / "config.json").write_text(json.dumps(config))
    return folder


def rewrite_header(path: Path, edit: Any) -> None:
    """Apply `edit(header_dict)` to a safetensors file's JSON header, keeping the data."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + length])
    edit(header)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + raw[8 + length :])


def header_of(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header: dict[str, Any] = json.loads(raw[8 : 8 + length])
    return header


def listing(folder: Path) -> list[str]:
    """Names in `folder`, hidden ones included (a left-over staging folder shows up here)."""
    return sorted(p.name for p in folder.iterdir())

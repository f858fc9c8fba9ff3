"""Reading the JSON of an untrusted checkpoint: bounded in size and in nesting depth.

A checkpoint comes from outside (a download, a USB disk), and three of its files are JSON that
sglx parses: `config.json`, the `*.safetensors.index.json` and each shard's header. A real
config is a few levels deep and a few KiB; an index a few MiB; a header is capped at 100 MB by
the safetensors format itself. Anything past these bounds is refused with the file's name
before it is used (sglx_core.untrusted holds the rules; this module the checkpoint's bounds and
the fix it names).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglx_core import untrusted

MAX_DEPTH = untrusted.MAX_JSON_DEPTH
MAX_CONFIG_BYTES = 4 << 20
"""Largest config.json read (real ones are a few KiB; multimodal ones some tens of KiB)."""
MAX_INDEX_BYTES = 64 << 20
"""Largest safetensors index read (about 100 bytes per tensor: a 100k-tensor model is 10 MiB)."""


def _fix(path: Path) -> str:
    return (
        "the file is damaged or was not written by a model exporter; re-copy "
        f"{path.name} from the original checkpoint"
    )


def parse_json(raw: bytes | str, *, path: Path, what: str) -> Any:
    """Parse `raw` (the contents of `path`), refusing invalid JSON and deep nesting."""
    return untrusted.parse_json(raw, path=path, what=what, hint=_fix(path))


def read_json_file(path: Path, *, what: str, max_bytes: int) -> Any:
    """Read and parse the JSON file `path` (a regular file), at most `max_bytes` of it."""
    return untrusted.read_json(path, what=what, max_bytes=max_bytes, hint=_fix(path))

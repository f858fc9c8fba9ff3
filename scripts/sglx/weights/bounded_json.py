"""Reading the JSON of an untrusted checkpoint: bounded in size and in nesting depth.

A checkpoint comes from outside (a download, a USB disk), and three of its files are JSON that
sglx parses: `config.json`, the `*.safetensors.index.json` and each shard's header. `json.loads`
recurses once per nesting level, so ten thousand `[` end in a RecursionError instead of a
message, and what reads the document afterwards (the dtype rewrite of config.json, the JSON
writer) recurses too. A real config is a few levels deep and a few KiB; an index a few MiB;
a header is capped at 100 MB by the safetensors format itself. Anything past these bounds is
refused with the file's name before it is used.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglx.errors import SglxError

MAX_DEPTH = 64
"""Deepest nesting of objects and arrays accepted (configs use about 4, headers 3)."""
MAX_CONFIG_BYTES = 4 << 20
"""Largest config.json read (real ones are a few KiB; multimodal ones some tens of KiB)."""
MAX_INDEX_BYTES = 64 << 20
"""Largest safetensors index read (about 100 bytes per tensor: a 100k-tensor model is 10 MiB)."""


def _depth(document: Any) -> int:
    """Nesting depth of a parsed document, walked with an explicit stack (no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if depth > MAX_DEPTH:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def _too_deep(path: Path, what: str) -> SglxError:
    return SglxError(
        f"{path}: the {what} is nested more than {MAX_DEPTH} levels deep; no real checkpoint "
        "file is",
        hint=f"the file is damaged or was not written by a model exporter; re-copy {path.name} "
        "from the original checkpoint",
        code="corrupt",
        path=str(path),
    )


def parse_json(raw: bytes | str, *, path: Path, what: str) -> Any:
    """Parse `raw` (the contents of `path`), refusing invalid JSON and deep nesting."""
    try:
        document = json.loads(raw)
    except RecursionError:
        raise _too_deep(path, what) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SglxError(
            f"{path}: the {what} is not valid JSON ({exc})",
            hint=f"re-copy {path.name} from the original checkpoint",
            code="corrupt",
            path=str(path),
        ) from None
    if _depth(document) > MAX_DEPTH:
        raise _too_deep(path, what)
    return document


def read_json_file(path: Path, *, what: str, max_bytes: int) -> Any:
    """Read and parse the JSON file `path`, at most `max_bytes` of it."""
    try:
        with path.open("rb") as handle:
            raw = handle.read(max_bytes + 1)
    except OSError as exc:
        raise SglxError(
            f"{path}: cannot read the {what}: {exc.strerror}",
            hint=f"check that {path.name} is a readable file",
            code="environment",
            path=str(path),
        ) from None
    if len(raw) > max_bytes:
        raise SglxError(
            f"{path}: the {what} is larger than {max_bytes >> 20} MiB; no real checkpoint's is",
            hint=f"the file is damaged or not a {what}; re-copy {path.name} from the original "
            "checkpoint",
            code="corrupt",
            path=str(path),
        )
    return parse_json(raw, path=path, what=what)

"""Image layers by identity: chain ids, the legacy layer folder names of a `docker save`
archive, and which of a delta's layers an engine holds.

A layer's diff id is the sha256 of its uncompressed tar; its chain id names it together with
every layer under it (`chain(n) = sha256(chain(n-1) + " " + diff(n))`, `chain(0) = diff(0)`),
which is how the engine keys its layer store and what `docker load` asks it for before it opens
a layer's file (moby image/tarexport/load.go: a held chain is not read).

Docker 20.10's `docker save` names each layer's folder by a legacy v1 id (moby
image/v1.CreateID): the sha256 of the folder's own `json` with `id` dropped, `parent` as a
digest, `layer_id` set to the chain id, keys sorted. `legacy_layer_id` recomputes it from the
`json` member, which comes before `layer.tar` in the stream, so a stream filter knows which
layer a `layer.tar` is before its bytes arrive. A folder it cannot name is carried whole.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence

_DECODER = json.JSONDecoder()


def chain_ids(diff_ids: Sequence[str]) -> list[str]:
    """The chain id of every layer, bottom first."""
    chains: list[str] = []
    for diff in diff_ids:
        if not chains:
            chains.append(diff)
        else:
            chains.append("sha256:" + hashlib.sha256(f"{chains[-1]} {diff}".encode()).hexdigest())
    return chains


def legacy_layer_id(json_text: str, chain_id: str, *, with_os: bool) -> str | None:
    """The folder name `docker save` gives the layer whose `json` member is `json_text`, were its
    chain id `chain_id`; None when the text is not a flat JSON object. Go marshals the v1 image
    with `os` only for the top layer (`with_os`); both are tried by the caller."""
    items = _raw_members(json_text)
    if items is None:
        return None
    items.pop("id", None)
    parent = items.pop("parent", None)
    if not with_os:
        items.pop("os", None)
    items["layer_id"] = json.dumps(chain_id)
    if parent is not None:
        try:
            hexdigest = json.loads(parent)
        except json.JSONDecodeError:
            return None
        if not isinstance(hexdigest, str):
            return None
        items["parent"] = json.dumps("sha256:" + hexdigest)
    body = "{" + ",".join(f"{json.dumps(key)}:{items[key]}" for key in sorted(items)) + "}"
    return hashlib.sha256(body.encode()).hexdigest()


def identify(json_text: str, folder: str, chains: Sequence[str]) -> int | None:
    """Which layer (index into `chains`) the save folder `folder` with this `json` holds, or
    None when no chain id reproduces its name."""
    for index, chain in enumerate(chains):
        for with_os in (False, True):
            if legacy_layer_id(json_text, chain, with_os=with_os) == folder:
                return index
    return None


def held_chains(layer_lists: Iterable[Sequence[str]]) -> set[str]:
    """Every chain id an engine holds, from the diff id lists (`RootFS.Layers`) of its images:
    an image holds each layer under its top one."""
    held: set[str] = set()
    for layers in layer_lists:
        held.update(chain_ids(layers))
    return held


def link_target(name: str, linkname: str) -> str:
    """A link member's target as a member name (`a/layer.tar` -> `../b/layer.tar` is
    `b/layer.tar`): `docker save` links a layer whose bytes another folder already holds."""
    parts = name.split("/")[:-1]
    for part in linkname.split("/"):
        if part == "..":
            if parts:
                parts.pop()
        elif part not in ("", "."):
            parts.append(part)
    return "/".join(parts)


def _raw_members(text: str) -> dict[str, str] | None:
    """The top-level members of a JSON object, each value as its raw text (Go re-marshals
    them as they are), or None when `text` is not one object."""
    text = text.strip()
    if not text.startswith("{"):
        return None
    items: dict[str, str] = {}
    index = _skip(text, 1)
    try:
        while text[index] != "}":
            key, index = _DECODER.raw_decode(text, index)
            index = _skip(text, index)
            if not isinstance(key, str) or text[index] != ":":
                return None
            start = _skip(text, index + 1)
            _, end = _DECODER.raw_decode(text, start)
            items[key] = text[start:end]
            index = _skip(text, end)
            if text[index] == ",":
                index = _skip(text, index + 1)
    except (IndexError, json.JSONDecodeError):
        return None
    return items if _skip(text, index + 1) == len(text) else None


def _skip(text: str, index: int) -> int:
    while index < len(text) and text[index] in " \t\r\n":
        index += 1
    return index

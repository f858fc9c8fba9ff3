"""The converted weights of an image build, brought into the engine as an image of their own.

The weights are packed into a tar and imported (`docker import`, no registry, no build context
upload). The Dockerfile copies from it, so a rebuild that changes only sglx's code sends a
context of a few hundred kB, and the engine's layer cache keeps the weights. The tag is
content-addressed: the same weights manifest is imported once. (The frozen wheels come in
through the deps image: deps.py.)
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx.progress import Progress
from sglx_core.scratch import scratch_dir


@dataclass(frozen=True)
class Payload:
    """An imported payload image; `imported` is False when an identical one was reused."""

    tag: str
    imported: bool


def normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mode = 0o755 if info.isdir() else 0o644
    return info


def _import(
    client: Any,
    tag: str,
    members: Iterable[tuple[Path, str]],
    progress: Progress,
    what: str,
    reuse: bool,
) -> Payload:
    from docker.errors import ImageNotFound

    try:
        client.images.get(tag)
        if reuse:
            progress(f"{what}: reusing {tag}")
            return Payload(tag, imported=False)
    except ImageNotFound:
        pass
    repository, _, version = tag.partition(":")
    with scratch_dir("sglx-payload-") as scratch:
        archive = scratch / "payload.tar"
        total = 0
        with tarfile.open(archive, "w") as tar:
            for source, name in members:
                tar.add(source, arcname=name, recursive=False, filter=normalise)
                total += source.stat().st_size if source.is_file() else 0
        progress(f"{what}: importing {total / 1e9:.2f} GB as {tag}")
        client.api.import_image_from_file(str(archive), repository=repository, tag=version)
    return Payload(tag, imported=True)


def weights_image(
    client: Any, model: Path, digest: str, progress: Progress, *, reuse: bool, outside: bool = False
) -> Payload:
    """An image holding /models/model: the converted weights and their manifest; for weights
    kept outside the image (sglx.image.weights_outside), all but the `.safetensors` shards (the
    manifest, config and tokenizer: what the build's own steps read of the model)."""
    tag = weights_tag(digest, outside)
    members = [(model, "models"), (model, "models/model")]
    for path in sorted(model.rglob("*")):
        if not outside or not path.name.endswith(".safetensors"):
            members.append((path, f"models/model/{path.relative_to(model)}"))
    return _import(client, tag, members, progress, "weights", reuse)


def weights_tag(digest: str, outside: bool = False) -> str:
    """The weights payload's tag: by digest; `-outside` for the one without the shards."""
    return f"sglx/weights:{digest.split(':')[1][:16]}" + ("-outside" if outside else "")

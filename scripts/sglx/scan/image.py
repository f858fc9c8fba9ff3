"""Get an image's filesystem and environment out of the Docker engine without starting it.

We create a container from the image (never started, no network) and stream
`container.export()` into a scratch root, then remove the container. Export was chosen over
`image.save()`: the engine hands over the final filesystem in one tar, so there are no layers to
apply, no whiteouts to honour and no files that later layers deleted; a save stream carries every
layer, often much more data. The container exists only for the export. The environment comes
from the image config (`Config.Env`), which is what a container of the image would get.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglx.engine import docker_client
from sglx.progress import Progress
from sglx.scan.inventory import names_only
from sglx.scan.layers import IterStream, RootWriter
from sglx_core.errors import SglxError

_EXPORT_CHUNK = 1 << 20


@dataclass(frozen=True)
class ImageFacts:
    ref: str
    image_id: str
    env: dict[str, str]
    # Files unpacked as names only (layers.RootWriter), by canonical virtual dir.
    placeholders: Mapping[str, frozenset[str]] = field(default_factory=dict, hash=False)


def export_image(ref: str, dest: Path, progress: Progress) -> ImageFacts:
    """Unpack image `ref` into `dest` and return its id and environment."""
    from docker.errors import APIError, ImageNotFound

    client = docker_client()
    try:
        image = client.images.get(ref)
    except ImageNotFound:
        raise SglxError(
            f"no image '{ref}' in the local Docker engine",
            hint="list images with `docker images`; scan a saved archive without loading it "
            "with --archive FILE, or a bundle's with --bundle DIR",
            code="usage",
        ) from None
    name = f"sglx-scan-{uuid.uuid4().hex[:12]}"
    progress(f"exporting {ref} ({image.short_id}) through a container that is never started")
    try:
        container = client.containers.create(
            image.id,
            command=["/sglx-scan-never-started"],
            name=name,
            network_disabled=True,
            labels={"sglx.purpose": "scan-export"},
        )
    except APIError as exc:
        raise SglxError(
            f"cannot create a container from '{ref}' to export its files: {exc.explanation}",
            hint="check the engine with `docker info`",
            code="environment",
        ) from None
    try:
        stream = io.BufferedReader(IterStream(iter(container.export(chunk_size=_EXPORT_CHUNK))))
        writer = RootWriter(dest, progress, names_only=names_only)
        writer.apply(stream, whiteouts=False)
        progress(f"unpacked {writer.stats.bytes >> 20} MiB in {writer.stats.members} entries")
    finally:
        container.remove(force=True)
    env = parse_env(image.attrs)
    return ImageFacts(ref=ref, image_id=image.id, env=env, placeholders=writer.placeholders)


def parse_env(attrs: dict[str, Any]) -> dict[str, str]:
    """`KEY=VALUE` strings of an image config (engine attrs or an archive's config JSON);
    ValueError, naming the field, when the config does not have that shape."""
    config = attrs.get("Config") or attrs.get("config") or {}
    if not isinstance(config, dict):
        raise ValueError("'config' is not an object")
    items = config.get("Env") or []
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise ValueError("'config.Env' is not a list of KEY=VALUE strings")
    env: dict[str, str] = {}
    for item in items:
        key, _, value = item.partition("=")
        env[key] = value
    return env

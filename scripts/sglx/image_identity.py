"""Which image an engine holds, judged the same way on every image store.

A bundle names its image by two digests (`bundle.json` `image.id` and `image.manifest_digest`):

- the **config digest**, the sha256 of the image config: the image id of Docker's classic
  store (every Docker before 29, and 29 upgraded in place) and of podman;
- the **manifest digest**, the sha256 of the image manifest: the image id of Docker's
  containerd image store (the default of a fresh Docker 29, `features.containerd-snapshotter`
  in daemon.json before it), which cannot find an image by its config digest.

An engine reports one of the two as its image id, so an image is found, and judged loaded, by
either; never by a value only one store reports. The manifest digest is the one in the save
stream's OCI `index.json` (Docker 25 and later write one), or, for Docker 20.10's archive
(no manifest in it), the one the containerd store writes when it loads that archive:
`imported_manifest` (containerd's `images/archive` importer: a Docker schema 2 manifest of the
config and the uncompressed `layer.tar` blobs, checked against Docker 28.5.2 with containerd
2.1.9).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from typing import Any

from sglx_core.engines import Engine, engine_from

DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar"
INDEX_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)
MAX_INDEX_DEPTH = 2  # index.json, then an image index, then the manifest; deeper is not followed
MAX_INDEX_ENTRIES = 64  # manifests of one image index that are followed

# A manifest or image index as the archive holds it: its parsed JSON, checked against the
# digest its descriptor names, or, where the reader did not read it, whether it counts as
# leading to the config (held but too large to keep: True; a platform the save left out: False).
BlobReader = Callable[[Any, str], Any]


def digest_of(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def imported_manifest(config: tuple[str, int], layers: Sequence[tuple[str, int]]) -> bytes:
    """The manifest the containerd store writes on loading a Docker 20.10 archive: the config's
    and each uncompressed layer tar's `(digest, size)`, bottom first, as Go's encoder writes
    that struct (fields in this order, no spaces)."""
    document = {
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": DOCKER_CONFIG, "digest": config[0], "size": config[1]},
        "layers": [
            {"mediaType": DOCKER_LAYER, "digest": digest, "size": size} for digest, size in layers
        ],
    }
    return json.dumps(document, separators=(",", ":")).encode()


def leads_to_config(
    descriptor: Any, config_digest: str, read: BlobReader, where: str, depth: int = MAX_INDEX_DEPTH
) -> bool:
    """Whether the manifest a descriptor (of `index.json`, say) names, or the image index it
    names, leads to the image config `config_digest`: through at most `depth` indexes and
    MAX_INDEX_ENTRIES manifests of each. `read(descriptor, where)` checks the descriptor and
    gives its blob (BlobReader), raising its own error for a malformed one."""
    document = read(descriptor, where)
    if isinstance(document, bool):
        return document
    if not isinstance(document, dict):
        return False
    if document.get("mediaType") in INDEX_TYPES or "manifests" in document:
        children = document.get("manifests")
        if depth == 0 or not isinstance(children, list):
            return False
        return any(
            leads_to_config(child, config_digest, read, f"{where} manifests[{i}]", depth - 1)
            for i, child in enumerate(children[:MAX_INDEX_ENTRIES])
        )
    config = document.get("config")
    return isinstance(config, dict) and config.get("digest") == config_digest


def engine_of(client: Any) -> Engine:
    """The engine behind `client` (a docker.DockerClient): product, version and image store."""
    return engine_from(client.version(), client.info().get("DriverStatus"))


def held_id(client: Any, config_digest: str, manifest_digest: str | None) -> str | None:
    """The id under which the engine holds the image of these digests (the config digest on
    the classic store and podman, the manifest digest on the containerd store), None if it
    holds neither."""
    from docker.errors import ImageNotFound, NotFound

    for digest in (config_digest, manifest_digest):
        if digest is None:
            continue
        try:
            image = client.images.get(digest)
        except (ImageNotFound, NotFound):
            continue
        if image.id in (config_digest, manifest_digest):
            return str(image.id)
    return None

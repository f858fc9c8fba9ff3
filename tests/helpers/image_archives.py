"""Small image archives made by hand with tarfile: a valid docker-archive or OCI layout of a
one-file image, and the pieces to break them in the ways `sglx base load` must refuse; and
layers of a file tree (whiteouts, links, devices) in the docker-archive the scan and the
bundle tests read (`tree_layer`, `docker_archive`)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

Member = tuple[tarfile.TarInfo, bytes | None]
TreeMember = tuple[str, str, bytes | str | None]  # (name, kind, data or link target)


def layer_tar(content: bytes = b"hello from sglx\n", name: str = "hello.txt") -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(content)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


def config_json(layers: Iterable[bytes]) -> bytes:
    diff_ids = [f"sha256:{hashlib.sha256(layer).hexdigest()}" for layer in layers]
    document = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/hello.txt"]},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
    }
    return json.dumps(document, sort_keys=True).encode()


def file_member(name: str, data: bytes) -> Member:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    return info, data


def special_member(name: str, kind: bytes, linkname: str = "") -> Member:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info, None


def write_tar(path: Path, members: Iterable[Member]) -> Path:
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return path


def docker_members(
    tags: list[str] | None = None, layer: bytes | None = None, **manifest: Any
) -> list[Member]:
    """The members of a docker-archive of a one-layer image; `manifest` overrides its keys."""
    layer = layer_tar() if layer is None else layer
    config = config_json([layer])
    config_name = f"{hashlib.sha256(config).hexdigest()}.json"
    entry: dict[str, Any] = {
        "Config": config_name,
        "RepoTags": tags or [],
        "Layers": ["layer0/layer.tar"],
    }
    entry.update(manifest)
    return [
        file_member(config_name, config),
        file_member("layer0/layer.tar", layer),
        file_member("manifest.json", json.dumps([entry]).encode()),
    ]


def image_id(members: list[Member]) -> str:
    """The id an engine gives the image: the sha256 of its config."""
    for info, data in members:
        if info.name.endswith(".json") and info.name != "manifest.json" and data is not None:
            return f"sha256:{hashlib.sha256(data).hexdigest()}"
        if info.name.startswith("blobs/") and data is not None and b'"rootfs"' in data:
            return f"sha256:{hashlib.sha256(data).hexdigest()}"
    raise AssertionError("no config in these members")


def _descriptor(media: str, data: bytes) -> dict[str, Any]:
    return {
        "mediaType": media,
        "digest": f"sha256:{hashlib.sha256(data).hexdigest()}",
        "size": len(data),
    }


def oci_members(
    ref: str | None = None, edit_index: Callable[[dict[str, Any]], None] | None = None
) -> list[Member]:
    """The members of an OCI layout of a one-layer image; `edit_index` may change index.json."""
    layer = layer_tar()
    config = config_json([layer])
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": _descriptor("application/vnd.oci.image.config.v1+json", config),
            "layers": [_descriptor("application/vnd.oci.image.layer.v1.tar", layer)],
        }
    ).encode()
    descriptor = _descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
    if ref:
        descriptor["annotations"] = {"io.containerd.image.name": ref}
    index: dict[str, Any] = {"schemaVersion": 2, "manifests": [descriptor]}
    if edit_index is not None:
        edit_index(index)
    blobs = [
        file_member(f"blobs/sha256/{hashlib.sha256(b).hexdigest()}", b)
        for b in (config, layer, manifest)
    ]
    return [
        file_member("oci-layout", b'{"imageLayoutVersion": "1.0.0"}'),
        *blobs,
        file_member("index.json", json.dumps(index).encode()),
    ]


def blob_digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def docker_25_members(edit: Callable[[list[Member]], None] | None = None) -> list[Member]:
    """Docker 25+'s `docker save`: the OCI layout of a one-layer image, and a manifest.json
    naming its blobs; `edit` may change the members."""
    members = oci_members()
    index = json.loads(next(d for i, d in members if i.name == "index.json") or b"")
    (manifest,) = [
        json.loads(d or b"")
        for i, d in members
        if i.name == f"blobs/sha256/{index['manifests'][0]['digest'][7:]}"
    ]
    entry = {
        "Config": f"blobs/sha256/{manifest['config']['digest'][7:]}",
        "RepoTags": [],
        "Layers": [f"blobs/sha256/{layer['digest'][7:]}" for layer in manifest["layers"]],
    }
    members.append(file_member("manifest.json", json.dumps([entry]).encode()))
    if edit is not None:
        edit(members)
    return members


def with_sidecar(path: Path) -> Path:
    """Write PATH.sha256 in sha256sum format next to `path`."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    path.with_name(path.name + ".sha256").write_text(f"{digest}  {path.name}\n")
    return path


def tree_layer(members: Sequence[TreeMember]) -> bytes:
    """One layer tar of a file tree: kinds are file, dir, symlink, hardlink, chardev."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            payload = None
            if kind == "file":
                payload = data if isinstance(data, bytes) else str(data or "").encode()
                info.size = len(payload)
                info.mode = 0o755
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(data)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(data)
            elif kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(info, None if payload is None else io.BytesIO(payload))
    return out.getvalue()


def docker_archive(path: Path, layers: Sequence[bytes], env: Sequence[str] = ()) -> Path:
    """A `docker save`-format archive of one image tagged fixture-scan:test (manifest.json,
    config JSON, one tar per layer), written to `path`."""
    config = {"architecture": "amd64", "os": "linux", "config": {"Env": list(env)}}
    files = {"config.json": json.dumps(config).encode()}
    names = []
    for i, data in enumerate(layers):
        names.append(f"layer{i}/layer.tar")
        files[names[-1]] = data
    manifest = [{"Config": "config.json", "RepoTags": ["fixture-scan:test"], "Layers": names}]
    files["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path

#!/usr/bin/python
"""Ansible module: a bundle's image as a skopeo `dir:` layout, for the push to the site registry.

The bundle's `docker save` archive (`image/image.tar.NNN`) is read once, as one stream of its
chunks, through tarfile: nothing is reassembled on disk. Each `layer.tar` the registry lacks is
written to DEST/<hex> while it is hashed and kept only when its sha256 is the diff id the image
config names for it; the config is the archive's member that hashes to the image id. The
manifest is a Docker v2 schema 2 manifest whose layers are uncompressed (media type
`...rootfs.diff.tar`, digest = diff id), so a pull gives back the very image id, and it is
rendered from the config and the layer sizes alone: one image has one manifest digest, whether
it came from a full bundle or a delta.

Layers the registry holds (`present`, from its HEAD answers) are not written: skopeo asks the
registry for each blob before it opens its file and skips those it has (checked with skopeo
1.9.3), which is how a delta bundle, whose archive leaves its parent's layers out, is pushed
after its parent, and how a re-seed sends nothing. A layer neither in the archive nor in the
registry is an error naming the bundle to seed first.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglx_registry_layout
short_description: Write an sglx bundle's image as a skopeo dir layout with uncompressed layers
description:
  - Streams the bundle's chunked docker save archive once and writes to dest the image config,
    the layers the registry lacks (each checked against its diff id), a Docker v2 schema 2
    manifest whose layer digests are the diff ids, and the dir transport's version file.
  - Layers in present are not written; skopeo finds them in the registry and skips them.
  - Fails, removing dest, when a layer is neither in the archive nor present, when a layer or
    the config does not hash to what the image names, or when dest's filesystem lacks the space.
options:
  bundle:
    description: The bundle folder (bundle.json and the image chunks).
    type: path
    required: true
  dest:
    description: A folder that does not exist yet; the layout is written there.
    type: path
    required: true
  present:
    description: Digests (sha256:<hex>) of the layers the registry holds already.
    type: list
    elements: str
    default: []
author: sglx
"""

RETURN = r"""
manifest_digest:
  description: sha256 of the manifest written (skopeo --preserve-digests pushes these bytes).
  type: str
written_layers:
  description: How many layers were written (those the registry lacks).
  type: int
written_bytes:
  description: Their bytes.
  type: int
layers:
  description: The image's layers, bottom first, each {digest, size, written}.
  type: list
"""

import hashlib
import io
import json
import os
import posixpath
import re
import shutil
import stat
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ansible.module_utils.basic import AnsibleModule

MAX_MANIFEST = 16 << 20  # sglx.bundle.layout.MAX_MANIFEST_BYTES
MAX_JSON = 16 << 20  # manifest.json and the image config of the archive
BLOCK = 4 << 20
DIGEST = re.compile(r"sha256:[0-9a-f]{64}")
CHUNK = re.compile(r"image/image\.tar\.[0-9]{3,}")
LAYER = re.compile(r"[0-9a-f]{64}/layer\.tar")
CONFIG = re.compile(r"[0-9a-f]{64}\.json")
MANIFEST_TYPE = "application/vnd.docker.distribution.manifest.v2+json"
CONFIG_TYPE = "application/vnd.docker.container.image.v1+json"
LAYER_TYPE = "application/vnd.docker.image.rootfs.diff.tar"
DIR_VERSION = "Directory Transport Version: 1.1\n"
RECOPY = "re-copy the bundle from its source (sglx bundle verify names a damaged chunk)"


class LayoutError(Exception):
    """What is wrong, and what to do, in words for the task's failure."""


def open_regular(path: Path) -> int:
    """A descriptor of `path`, a regular file: a link, FIFO or device is refused unopened."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise LayoutError(f"{path} cannot be opened as a file ({exc.strerror}): {RECOPY}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LayoutError(f"{path} is not a regular file: {RECOPY}")
    return fd


class Chunks(io.RawIOBase):
    """The chunks' bytes in order, as one stream."""

    def __init__(self, paths: Iterable[Path]) -> None:
        super().__init__()
        self._paths = list(paths)
        self._fd: int | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            if self._fd is None:
                if not self._paths:
                    return 0
                self._fd = open_regular(self._paths.pop(0))
            count = os.readv(self._fd, [buffer])
            if count:
                return count
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        super().close()


def read_manifest(bundle: Path) -> dict[str, Any]:
    """bundle.json's image record, with the fields this module relies on checked."""
    fd = open_regular(bundle / "bundle.json")
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read(MAX_MANIFEST + 1)
    where = f"{bundle}/bundle.json"
    try:
        image = json.loads(raw)["image"] if len(raw) <= MAX_MANIFEST else None
    except (ValueError, TypeError, KeyError):
        image = None
    if not isinstance(image, dict):
        raise LayoutError(f"{where} is not an sglx bundle manifest: {RECOPY}")
    chunks, layers = image.get("chunks"), image.get("layers")
    problems = [
        not isinstance(image.get("id"), str) or not DIGEST.fullmatch(image["id"]),
        not isinstance(chunks, list) or not chunks,
        not all(isinstance(c, str) and CHUNK.fullmatch(c) for c in chunks or []),
        not isinstance(image.get("size"), int),
        layers is not None and not isinstance(layers, list),
        not all(_layer_ok(layer) for layer in layers or []),
    ]
    if any(problems):
        raise LayoutError(f"{where}: its image record is not one sglx writes: {RECOPY}")
    return image


def _layer_ok(layer: Any) -> bool:
    return (
        isinstance(layer, dict)
        and isinstance(layer.get("diff_id"), str)
        and DIGEST.fullmatch(layer["diff_id"]) is not None
        and isinstance(layer.get("size"), int)
        and layer["size"] >= 0
    )


def free_bytes(folder: Path) -> int:
    info = os.statvfs(folder)
    return info.f_bavail * info.f_frsize


def copy_layer(source: Any, path: Path) -> str:
    """Write `source` to `path` (a new file) while hashing it; its digest."""
    digest = hashlib.sha256()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        while block := source.read(BLOCK):
            digest.update(block)
            out.write(block)
    return "sha256:" + digest.hexdigest()


def link_target(name: str, member: tarfile.TarInfo) -> str:
    """The member a link names: a symlink relative to its folder, a hard link from the root."""
    if member.issym():
        return posixpath.normpath(posixpath.join(posixpath.dirname(name), member.linkname))
    return member.linkname.removeprefix("./")


class Scan:
    """What one pass over the archive found: layer paths with their digest (None when the
    layer was not read) and size, links, the config and manifest.json."""

    def __init__(self) -> None:
        self.found: dict[str, tuple[str | None, int]] = {}
        self.links: dict[str, str] = {}
        self.config: bytes | None = None
        self.saved: bytes | None = None
        self.written: dict[str, int] = {}

    def target(self, path: str) -> str:
        for _ in range(8):  # docker save links one layer.tar to another, never in a chain
            if path not in self.links:
                break
            path = self.links[path]
        return path


def scan_archive(
    paths: list[Path], dest: Path, image_id: str, keep: Any, sizes: set[int] | None
) -> Scan:
    """Read the archive once; write each layer `keep(digest)` accepts to dest/<hex>. With
    `sizes`, a layer.tar of any other size is not read at all."""
    scan = Scan()
    partial = dest / ".partial"
    try:
        with tarfile.open(fileobj=Chunks(paths), mode="r|", bufsize=BLOCK) as tar:
            for member in tar:
                name = member.name.removeprefix("./")
                if LAYER.fullmatch(name) and (member.issym() or member.islnk()):
                    scan.links[name] = link_target(name, member)
                elif LAYER.fullmatch(name) and member.isreg():
                    if sizes is not None and member.size not in sizes:
                        scan.found[name] = (None, member.size)
                        continue
                    digest = copy_layer(tar.extractfile(member), partial)
                    if keep(digest):
                        partial.replace(dest / digest.split(":")[1])
                        scan.written[digest] = member.size
                    else:
                        partial.unlink()
                    scan.found[name] = (digest, member.size)
                elif member.isreg() and member.size <= MAX_JSON and CONFIG.fullmatch(name):
                    data = _read(tar, member)
                    if "sha256:" + hashlib.sha256(data).hexdigest() == image_id:
                        scan.config = data
                elif member.isreg() and member.size <= MAX_JSON and name == "manifest.json":
                    scan.saved = _read(tar, member)
    except (tarfile.TarError, EOFError) as exc:
        raise LayoutError(f"the image archive is not a whole tar ({exc}): {RECOPY}") from None
    return scan


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    handle = tar.extractfile(member)
    return handle.read() if handle is not None else b""


def saved_layers(scan: Scan, image_id: str) -> tuple[list[str], list[str]]:
    """manifest.json's layer paths and the config's diff ids, one for one."""
    if scan.config is None:
        raise LayoutError(
            f"the image archive holds no image config that hashes to the image id {image_id}: "
            + RECOPY
        )
    try:
        saved = json.loads(scan.saved or b"null")
        paths = saved[0]["Layers"] if isinstance(saved, list) and len(saved) == 1 else None
        diff_ids = json.loads(scan.config)["rootfs"]["diff_ids"]
    except (ValueError, TypeError, KeyError, IndexError):
        paths = diff_ids = None
    if (
        not isinstance(paths, list)
        or not isinstance(diff_ids, list)
        or len(paths) != len(diff_ids)
        or not all(isinstance(p, str) for p in paths)
        or not all(isinstance(d, str) and DIGEST.fullmatch(d) for d in diff_ids)
    ):
        raise LayoutError(f"the image archive's manifest.json does not name its layers: {RECOPY}")
    return [p.removeprefix("./") for p in paths], diff_ids


def missing_hint(image: dict[str, Any]) -> str:
    parent, base = image.get("parent"), image.get("base")
    if isinstance(parent, dict):
        return (
            f"this bundle is a delta over the bundle {parent.get('bundle')} (image "
            f"{parent.get('image_ref')}): seed that bundle first, then this one"
        )
    if isinstance(base, dict):
        return (
            f"the bundle leaves out the layers of its base {base.get('ref')}: seed a bundle that "
            "carries them first"
        )
    return RECOPY


def write_layout(bundle_path: str, dest_path: str, present: Iterable[str]) -> dict[str, Any]:
    bundle, dest = Path(bundle_path), Path(dest_path)
    image = read_manifest(bundle)
    image_id, layers = image["id"], image.get("layers")
    held = {d for d in present if DIGEST.fullmatch(d)}
    wanted = None if layers is None else {x["diff_id"]: x["size"] for x in layers}
    lacking = None if wanted is None else {d: s for d, s in wanted.items() if d not in held}
    need = image["size"] if lacking is None else sum(lacking.values())
    parent = dest.absolute().parent
    if free_bytes(parent) < need:
        raise LayoutError(
            f"{parent} has {free_bytes(parent)} bytes free on the control node, and the layers "
            f"the registry lacks take {need}: free space there, or point sglx_registry_work_dir "
            "at a larger filesystem; nothing was pushed"
        )
    dest.mkdir(mode=0o700)

    def keep(digest: str) -> bool:
        return digest not in held and (lacking is None or digest in lacking)

    sizes = None if lacking is None else set(lacking.values())
    chunks = [bundle / c for c in image["chunks"]]
    scan = scan_archive(chunks, dest, image_id, keep, sizes)
    paths, diff_ids = saved_layers(scan, image_id)
    if layers is not None and [x["diff_id"] for x in layers] != diff_ids:
        raise LayoutError(
            f"{bundle}/bundle.json's image.layers are not the layers of the image config: {RECOPY}"
        )
    entries, listed = [], []
    for index, (path, diff_id) in enumerate(zip(paths, diff_ids, strict=True)):
        digest, size = scan.found.get(scan.target(path), (None, None))
        if digest is not None and digest != diff_id:
            raise LayoutError(
                f"layer {index} of the image archive ({path}) hashes to {digest}, not its diff id "
                f"{diff_id}: {RECOPY}"
            )
        if layers is not None:
            if size is not None and size != layers[index]["size"]:
                raise LayoutError(
                    f"layer {index} ({path}) is {size} bytes, bundle.json says "
                    f"{layers[index]['size']}: {RECOPY}"
                )
            size = layers[index]["size"]
        if diff_id not in held and diff_id not in scan.written:
            raise LayoutError(
                f"layer {index} ({diff_id}) is neither in the bundle's image archive nor in the "
                f"registry: {missing_hint(image)}; nothing was pushed"
            )
        entries.append({"mediaType": LAYER_TYPE, "size": size, "digest": diff_id})
        listed.append({"digest": diff_id, "size": size, "written": diff_id in scan.written})
    config = scan.config or b""
    document = {
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": CONFIG_TYPE, "size": len(config), "digest": image_id},
        "layers": entries,
    }
    manifest = (json.dumps(document, indent=3) + "\n").encode()
    for name, data in (
        (image_id.split(":")[1], config),
        ("manifest.json", manifest),
        ("version", DIR_VERSION.encode()),
    ):
        (dest / name).write_bytes(data)
    return {
        "manifest_digest": "sha256:" + hashlib.sha256(manifest).hexdigest(),
        "written_layers": len(scan.written),
        "written_bytes": sum(scan.written.values()),
        "layers": listed,
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "bundle": {"type": "path", "required": True},
            "dest": {"type": "path", "required": True},
            "present": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=False,
    )
    bundle, dest = module.params["bundle"], module.params["dest"]
    if os.path.lexists(dest):
        module.fail_json(msg=f"{dest} exists already: the layout is written to a new folder")
    try:
        result = write_layout(bundle, dest, module.params["present"])
    except (LayoutError, OSError) as exc:
        shutil.rmtree(dest, ignore_errors=True)
        message = str(exc) if isinstance(exc, LayoutError) else f"{exc.filename}: {exc.strerror}"
        module.fail_json(msg=message)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()

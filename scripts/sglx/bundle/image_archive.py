"""What a bundle's image archive holds, read from its chunks without reassembling them: the
image `manifest.json` names, its config, and the layer members (headers only; tarfile seeks
over their bytes). `layer_findings` checks bundle.json's layer list against it.

Used after the chunks' hashes are checked (verify, install), and on a parent bundle made before
bundle.json recorded layers, where the config is trusted only because it hashes to the image id
the parent's bundle.json names.
"""

from __future__ import annotations

import hashlib
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx.bundle.layers import link_target
from sglx.bundle.layout import MANIFEST
from sglx.bundle.manifest import BundleManifest, ImageRecord
from sglx.scan.chunked import ChunkedReader
from sglx_core.errors import SglxError
from sglx_core.report import Finding
from sglx_core.untrusted import parse_json, tar_member_bytes

MAX_JSON = 16 << 20
CODE = "bundle_layers"
FIX = "re-create the bundle on the source side (`sglx bundle create`); do not install this one"


@dataclass(frozen=True)
class Held:
    """One member of the archive: a regular file of `size` bytes, or a link to `target`."""

    size: int
    link: str | None


@dataclass(frozen=True)
class ArchiveImage:
    config_digest: str
    diff_ids: tuple[str, ...]
    layer_paths: tuple[str, ...]
    members: dict[str, Held]

    def layer_member(self, index: int) -> Held | None:
        """The layer's file in the archive (a link followed once), None when it is left out."""
        held = self.members.get(self.layer_paths[index])
        if held is not None and held.link is not None:
            return self.members.get(held.link)
        return held


def read_image(root: Path, image: ImageRecord) -> ArchiveImage:
    """The archive of `image` under `root` (a bundle folder), as far as its layers go."""
    where = f"{root / image.archive} (read from its {len(image.chunks)} chunks)"
    try:
        reader = ChunkedReader([root / c for c in image.chunks])
        with tarfile.open(fileobj=reader, mode="r:") as tar:
            members: dict[str, Held] = {}
            for info in tar.getmembers():
                if info.isfile():
                    members[info.name] = Held(info.size, None)
                elif info.issym():
                    members[info.name] = Held(0, link_target(info.name, info.linkname))
            manifest = _json(tar, "manifest.json", where)
            entry = manifest[0] if isinstance(manifest, list) and len(manifest) == 1 else None
            if not isinstance(entry, dict) or not isinstance(entry.get("Config"), str):
                raise _bad(f"{where}: manifest.json does not name one image")
            layers = entry.get("Layers")
            if not isinstance(layers, list) or not all(isinstance(p, str) for p in layers):
                raise _bad(f"{where}: manifest.json does not list the image's layers")
            raw = _bytes(tar, entry["Config"], where)
    except (tarfile.TarError, OSError) as exc:
        raise _bad(f"{where}: unreadable image archive ({exc})") from None
    config = parse_json(raw, path=root / image.archive, what="image config", hint=FIX)
    try:
        diff_ids = config["rootfs"]["diff_ids"]
    except (KeyError, TypeError):
        diff_ids = None
    if not isinstance(diff_ids, list) or not all(isinstance(d, str) for d in diff_ids):
        raise _bad(f"{where}: the image config has no rootfs.diff_ids")
    if len(diff_ids) != len(layers):
        raise _bad(f"{where}: manifest.json lists {len(layers)} layers, the config {len(diff_ids)}")
    return ArchiveImage(
        config_digest="sha256:" + hashlib.sha256(raw).hexdigest(),
        diff_ids=tuple(diff_ids),
        layer_paths=tuple(layers),
        members=members,
    )


def layer_findings(root: Path, manifest: BundleManifest) -> list[Finding]:
    """bundle.json's layers against the archive: the same layers in the same order as the image
    config, each carried one present with its size, each referenced one absent. A bundle made
    before layers were recorded has nothing to check."""
    image = manifest.image
    if image.layers is None:
        return []
    try:
        held = read_image(root, image)
    except SglxError as exc:
        return [Finding(CODE, exc.message, image.archive, exc.hint)]
    if held.config_digest != image.id:
        message = f"the archive's image config is {held.config_digest}, not the image {image.id}"
        return [Finding(CODE, message, image.archive, FIX)]
    listed = [layer.diff_id for layer in image.layers]
    findings = [
        Finding(CODE, f"bundle.json omits layer {i} ({d}) of the image", MANIFEST, FIX)
        for i, d in enumerate(held.diff_ids)
        if d not in listed
    ] + [
        Finding(CODE, f"bundle.json lists a layer the image does not have ({d})", MANIFEST, FIX)
        for d in listed
        if d not in held.diff_ids
    ]
    if not findings and listed != list(held.diff_ids):
        message = "bundle.json lists the image's layers in another order than its config"
        findings.append(Finding(CODE, message, MANIFEST, FIX))
    if findings:
        return findings
    for index, layer in enumerate(image.layers):
        member = held.layer_member(index)
        path = held.layer_paths[index]
        if layer.carried and member is None:
            message = (
                f"layer {index} ({layer.diff_id}) is carried by bundle.json, but the archive "
                f"lacks {path}"
            )
        elif layer.carried and member is not None and member.size != layer.size:
            message = (
                f"layer {index} ({layer.diff_id}) is {member.size} bytes in the archive, "
                f"bundle.json says {layer.size}"
            )
        elif not layer.carried and path in held.members:
            source = "the base" if image.base and index < image.base.layers else "the parent"
            message = (
                f"layer {index} ({layer.diff_id}) is taken from {source} by bundle.json, but "
                f"the archive carries {path}"
            )
        else:
            continue
        findings.append(Finding(CODE, message, image.archive, FIX))
    return findings


def _json(tar: tarfile.TarFile, name: str, where: str) -> Any:
    return parse_json(_bytes(tar, name, where), path=Path(where), what=name, hint=FIX)


def _bytes(tar: tarfile.TarFile, name: str, where: str) -> bytes:
    raw = tar_member_bytes(tar, name, max_bytes=MAX_JSON)
    if raw is None:
        raise _bad(f"{where}: it has no {name} (or it is a link that leads to no file)")
    if len(raw) > MAX_JSON:
        raise _bad(f"{where}: {name} is larger than {MAX_JSON >> 20} MiB")
    return raw


def _bad(message: str) -> SglxError:
    return SglxError(message, hint=FIX, code=CODE)

"""Delta bundles: a bundle whose archive leaves out the layers its parent's image holds, and
the checks that keep it complete by reference.

`create --since PREVIOUS` reads the previous bundle here (`read_bundle`) and asks which of the
new image's layers it holds (`shared`). `verify --with PARENT` checks each link of the chain
(`chain_findings`): the parent is the bundle this one names (the sha256 of its bundle.json), its
image is the one named, and it holds every layer this one takes from it. `install` and
install.sh ask the engine (`engine_missing`) and refuse before anything loads when a layer is
missing, naming the parent bundle to install first.

`docker load` itself skips each layer whose chain id the engine holds without opening its file
(moby image/tarexport/load.go; checked on Docker 20.10, docs/reference/bundle.md), which is
what makes such an archive loadable at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx.bundle import layout
from sglx.bundle.layers import chain_ids, held_chains
from sglx.bundle.manifest import BundleManifest, ImageRecord, LayerEntry, parse, sha256_bytes
from sglx.engine import listed_images
from sglx_core.errors import SglxError
from sglx_core.report import Finding
from sglx_core.sizes import human_bytes
from sglx_core.untrusted import read_bounded

CODE = "bundle_parent"


@dataclass(frozen=True)
class Bundle:
    """A bundle named by its folder or its bundle.json: the manifest and its digest."""

    given: Path
    folder: Path
    manifest: BundleManifest
    digest: str  # "sha256:<hex>" of bundle.json

    @property
    def name(self) -> str:
        return self.folder.name or str(self.folder)

    def diff_ids(self) -> tuple[str, ...]:
        """The layers of its image: from bundle.json, or (a bundle made before layers were
        recorded) from its archive's image config, trusted because it hashes to the image id."""
        image = self.manifest.image
        if image.layers is not None:
            return tuple(layer.diff_id for layer in image.layers)
        from sglx.bundle.image_archive import read_image

        if not all((self.folder / chunk).is_file() for chunk in image.chunks):
            raise SglxError(
                f"{self.given}: this bundle's bundle.json records no layers (made by an older "
                "sglx), and its image chunks are not beside it to read them from",
                hint="pass the bundle folder itself, with its image/ chunks",
                code="usage",
            )
        archive = read_image(self.folder, image)
        if archive.config_digest != image.id:
            raise SglxError(
                f"{self.given}: the image config in its archive is not its image {image.id}",
                hint="check that bundle with `sglx bundle verify` and re-copy what it names",
                code=CODE,
            )
        return archive.diff_ids


def read_bundle(path: Path, flag: str) -> Bundle:
    """The bundle `path` names (its folder, or its bundle.json), as `flag` gave it."""
    file = path / layout.MANIFEST if path.is_dir() else path
    if not file.is_file():
        raise SglxError(
            f"{flag} {path}: no bundle there (no {layout.MANIFEST})",
            hint="pass a bundle folder written by `sglx bundle create`, or its bundle.json",
            code="usage",
            path=str(path),
        )
    raw = read_bounded(
        file,
        what="bundle manifest",
        max_bytes=layout.MAX_MANIFEST_BYTES,
        hint="pass a bundle folder written by `sglx bundle create`, or its bundle.json",
    )
    manifest = parse(raw, str(file))
    folder = file.absolute().parent
    digest = "sha256:" + sha256_bytes(raw)
    return Bundle(given=path, folder=folder, manifest=manifest, digest=digest)


def shared(diff_ids: Sequence[str], parent: Bundle) -> list[int]:
    """The layers of an image (by index) whose chain the parent's image holds."""
    held = set(chain_ids(parent.diff_ids()))
    return [index for index, chain in enumerate(chain_ids(diff_ids)) if chain in held]


def describe(image: ImageRecord) -> str:
    """'a delta over NAME (bundle sha256:..., image REF sha256:...)'."""
    parent = image.parent
    assert parent is not None
    return (
        f"a delta over the bundle {layout.shown(parent.bundle)} (bundle.json {parent.digest}, "
        f"image {layout.shown(parent.image_ref)} {parent.image_id})"
    )


def chain_findings(
    manifest: BundleManifest, given: Sequence[Bundle]
) -> tuple[list[Finding], list[str]]:
    """Each link from `manifest` down its parents, as far as `given` reaches: the parent is the
    bundle named, its image is the one named, and it holds every layer the child takes from it.
    Findings for a broken link, lines for what was checked and where the chain goes on."""
    by_digest = {bundle.digest: bundle for bundle in given}
    findings: list[Finding] = []
    lines: list[str] = []
    child, child_name, seen = manifest, "this bundle", set[str]()
    while child.image.parent is not None:
        parent = child.image.parent
        found = by_digest.get(parent.digest)
        if found is None:
            if not seen:
                offered = ", ".join(f"{b.name} ({b.digest})" for b in given) or "none"
                findings.append(
                    Finding(
                        CODE,
                        f"{child_name} is {describe(child.image)}; no --with bundle is it "
                        f"(given: {offered})",
                        "bundle.json",
                        f"pass --with the bundle {layout.shown(parent.bundle)}: a delta over "
                        "another bundle does not install",
                    )
                )
            else:
                lines.append(
                    f"{child_name} is {describe(child.image)}: pass --with it too to check that "
                    "link"
                )
            break
        seen.add(found.digest)
        problem = _link_problem(child.image, found)
        if problem is not None:
            findings.append(Finding(CODE, f"{child_name} -> {found.name}: {problem}", None, _FIX))
            break
        needs = child.image.from_parent()
        lines.append(
            f"{child_name} takes {len(needs)} layers ({human_bytes(sum(n.size for n in needs))}) "
            f"from {found.name} ({found.digest}): all there"
        )
        child, child_name = found.manifest, found.name
    unused = [b.name for b in given if b.digest not in seen]
    if unused:
        lines.append(f"not in this bundle's chain, not checked: {', '.join(unused)}")
    if child.image.parent is None and not findings and seen:
        lines.append(f"the chain is complete: it ends in {child_name}, a full bundle")
    return findings, lines


_FIX = "create the delta again with `sglx bundle create --since` the bundle the site installs"


def _link_problem(child: ImageRecord, parent: Bundle) -> str | None:
    named = child.parent
    assert named is not None
    if parent.manifest.image.id != named.image_id:
        return (
            f"its image is {parent.manifest.image.id}, but the delta was made over image "
            f"{named.image_id}"
        )
    held = set(chain_ids(parent.diff_ids()))
    missing = [layer for layer in child.from_parent() if layer.chain_id not in held]
    if missing:
        return (
            f"its image lacks {len(missing)} of the layers the delta takes from it, e.g. "
            f"{missing[0].diff_id}"
        )
    return None


def engine_missing(client: Any, image: ImageRecord) -> list[LayerEntry]:
    """The layers a delta takes from its parent, or a bundle from its base, that the engine does
    not hold (none for a full bundle). The parent's and the base's images are asked first; else
    every image the engine lists."""
    needs = image.referenced()
    if not needs:
        return []
    from docker.errors import NotFound

    named = [image.parent.image_id] if image.parent is not None else []
    named += [image.base.image_id] if image.base is not None else []
    lists: list[Sequence[str]] = []
    for image_id in named:
        with contextlib.suppress(NotFound):
            lists.append(_layers(client.images.get(image_id)))
    if any(n.chain_id not in held_chains(lists) for n in needs):
        lists += [_layers(found) for found in listed_images(client)]
    held = held_chains(lists)
    return [layer for layer in needs if layer.chain_id not in held]


def _layers(image: Any) -> list[str]:
    layers = ((image.attrs or {}).get("RootFS") or {}).get("Layers") or []
    return [str(layer) for layer in layers]


def refusal(image: ImageRecord, missing: Sequence[LayerEntry]) -> SglxError:
    """The error install gives, before anything loads, on an engine without the base (named
    first: a parent's install needs it too) or without the parent."""
    from_base = [layer for layer in missing if layer in image.from_base()]
    if from_base:
        from sglx.bundle import base_layers

        return base_layers.refusal(image, from_base)
    parent = image.parent
    assert parent is not None
    needs = image.from_parent()
    return SglxError(
        f"this bundle is {describe(image)}: this engine lacks {len(missing)} of the "
        f"{len(needs)} layers it takes from it (e.g. {missing[0].diff_id}); nothing was loaded",
        hint=f"install the bundle {layout.shown(parent.bundle)} first (`sglx bundle install "
        f"{layout.shown(parent.bundle)}` or `sh {layout.shown(parent.bundle)}/install.sh`), then "
        "this one; `sglx bundle verify THIS --with PARENT` checks that they belong together",
        code=CODE,
    )

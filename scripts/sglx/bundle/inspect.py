"""`sglx bundle inspect`: what a bundle holds, by layer, without checking it.

The image's layers bottom first with their sizes, and for each whether the archive carries it,
a delta takes it from its parent bundle (named, with its digest) or the bundle leaves it to its
base image (`create --exclude-base`: named, with its id and how to load it). A bundle made before
bundle.json recorded layers is read from its archive's image config and members instead.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglx.bundle import layout
from sglx.bundle.delta import describe, read_bundle
from sglx.bundle.layers import chain_ids
from sglx.bundle.manifest import BaseRecord, LayerEntry
from sglx.progress import Progress
from sglx_core.errors import SglxError
from sglx_core.report import Result, Table
from sglx_core.sizes import human_bytes
from sglx_core.untrusted import read_bounded


def inspect_bundle(path: Path, progress: Progress) -> Result:
    if path.is_file() and path.suffix == ".tar":
        raise SglxError(
            f"{path} is a bundle tar: inspect reads a bundle folder or its bundle.json",
            hint=f"unpack it once with `sh {path.stem}.install.sh --check {path.name}` and "
            "inspect the folder",
            code="usage",
        )
    bundle = read_bundle(path, "inspect")
    manifest, image = bundle.manifest, bundle.manifest.image
    layers, source = image.layers, "bundle.json"
    if layers is None:
        layers, source = _from_archive(bundle.folder, image), "the archive (not in bundle.json)"
    progress(f"{len(layers or ())} layers, from {source}")
    rows = []
    base = image.base
    for index, layer in enumerate(layers or ()):
        where = "carried" if layer.carried else f"from {layout.shown(_parent_name(image))}"
        if base is not None and index < base.layers and not layer.carried:
            where = f"from the base {base.ref}"
        rows.append((str(index), layer.diff_id, human_bytes(layer.size), where))
    carried = sum(layer.size for layer in layers or () if layer.carried)
    taken = sum(layer.size for layer in image.from_parent())
    from_base = sum(layer.size for layer in image.from_base())
    kind = "full" if image.parent is None else describe(image)
    about = (
        ("bundle", str(bundle.folder)),
        ("digest", bundle.digest),
        ("arch", manifest.arch),
        ("image", f"{layout.shown(image.ref)} {image.id}"),
        ("manifest", image.manifest_digest or "(not recorded: an older bundle)"),
        ("created", f"{manifest.created} by sglx {manifest.sglx_version}"),
        ("kind", kind),
        *(() if base is None else (("base", _base_row(base)),)),
        ("archive", f"{human_bytes(image.size)} in {len(image.chunks)} chunks"),
        ("files", f"{len(manifest.files)}, {human_bytes(sum(e.size for e in manifest.files))}"),
    )
    sbom = _sbom_summary(bundle.folder)
    if sbom is not None:
        counts = ", ".join(f"{n} {kind}" for kind, n in sorted(sbom["components"].items()))
        about = (*about, ("sbom", f"{layout.SBOM}: {counts or 'no components'}"))
    attested = [name for path, name in layout.ATTESTATIONS.items() if path in manifest.by_path()]
    about = (*about, ("attestations", ", ".join(attested) or "none (create --attest-key KEY)"))
    tables = [Table(("field", "value"), about, title=f"bundle {bundle.name}")]
    lines: list[str] = []
    if layers is None:
        lines.append("no layers: bundle.json records none and the image chunks are not there")
    else:
        tables.append(
            Table(("#", "diff id", "size", "in this bundle"), tuple(rows), title="layers")
        )
        count, kept = len(image.from_parent()), sum(1 for layer in layers if layer.carried)
        lines.append(
            f"carries {kept} of {len(layers)} layers ({human_bytes(carried)})"
            + (
                f"; takes {count} ({human_bytes(taken)}) from {layout.shown(_parent_name(image))}"
                ", which a host must have installed first"
                if count
                else ""
            )
            + (
                f"; leaves {len(image.from_base())} ({human_bytes(from_base)}) to its base "
                f"{base.ref}, which a host must have loaded first"
                if base is not None and from_base
                else ""
            )
        )
    data: dict[str, Any] = {
        "path": str(bundle.folder),
        "digest": bundle.digest,
        "arch": manifest.arch,
        "image": {"ref": image.ref, "id": image.id, "manifest_digest": image.manifest_digest},
        "parent": None if image.parent is None else image.parent.model_dump(mode="json"),
        "base": None if base is None else base.model_dump(mode="json"),
        "layers_from": source if layers is not None else None,
        "layers": None
        if layers is None
        else [{"index": i, **layer.model_dump(mode="json")} for i, layer in enumerate(layers)],
        "carried_bytes": carried,
        "referenced_bytes": taken + from_base,
        "base_bytes": from_base,
        "archive_bytes": image.size,
        "bytes": sum(e.size for e in manifest.files),
        "sbom": sbom,
        "attestations": attested,
    }
    return Result(("bundle", "inspect"), data=data, tables=tuple(tables), lines=tuple(lines))


def _sbom_summary(folder: Path) -> dict[str, Any] | None:
    """Counts by kind, the base and the weights of the bundle's SBOM; None without one (a
    bundle made with --no-scan, or before SBOMs)."""
    from sglx.sbom.document import summary

    path = folder / layout.SBOM
    if not path.is_file():
        return None
    raw = read_bounded(path, what="SBOM", max_bytes=layout.MAX_SBOM_BYTES)
    return {"path": layout.SBOM, **summary(raw.decode("utf-8", "replace"))}


def _base_row(base: BaseRecord) -> str:
    """'REF sha256:..., its lowest N layers; load it first: HOW'."""
    from sglx.bundle.base_layers import how_to_load

    return f"{base.ref} {base.image_id}, its lowest {base.layers} layers; {how_to_load(base)}"


def _parent_name(image: Any) -> str:
    return "the parent" if image.parent is None else str(image.parent.bundle)


def _from_archive(folder: Path, image: Any) -> tuple[LayerEntry, ...] | None:
    """A bundle made before layers were recorded: every layer carried, sized from its member."""
    if not all((folder / chunk).is_file() for chunk in image.chunks):
        return None
    from sglx.bundle.image_archive import read_image

    archive = read_image(folder, image)
    chains = chain_ids(archive.diff_ids)
    entries = []
    for index, diff in enumerate(archive.diff_ids):
        member = archive.layer_member(index)
        size = 0 if member is None else member.size
        entries.append(LayerEntry(diff_id=diff, chain_id=chains[index], size=size, carried=True))
    return tuple(entries)

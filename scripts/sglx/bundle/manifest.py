"""`bundle.json` and `SHA256SUMS`: what a bundle holds, and the two ways a site checks it.

`bundle.json` lists every file of the bundle except the three metadata files (itself, its
signature, SHA256SUMS) with size and sha256, plus the arch, the image digest and the creation
time. `SHA256SUMS` is not an independent list: it is rendered from `bundle.json` (every file of
it, then `bundle.json` and the signature themselves), so verify compares it byte for byte with
what it should be and a tampered copy of either file is found. A signature over `bundle.json`
therefore covers every byte of the bundle.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from sglx.bundle import layout
from sglx.bundle.layers import chain_ids
from sglx.image_reference import check_reference
from sglx_core.digests import Digest, Sha256
from sglx_core.errors import SglxError
from sglx_core.profile.loader import NAME_PATTERN
from sglx_core.tuned import MANIFEST as TUNED_MANIFEST
from sglx_core.untrusted import parse_json, schema_problem
from sglx_core.weights_manifest import MANIFEST_NAME as WEIGHTS_MANIFEST

FORMAT: Literal["sglx-bundle"] = "sglx-bundle"
FORMAT_VERSION: Literal[1] = 1
ImageId = Digest
# One part of a bundle path: no leading dot (so no `.` or `..`), no spaces, slashes or
# backslashes (SHA256SUMS and install.sh read paths unquoted).
PART = r"[A-Za-z0-9_+@=-][A-Za-z0-9._+@=-]*"
RelPath = Annotated[
    str, StringConstraints(pattern=rf"^{PART}(/{PART})*$", max_length=layout.MAX_PATH_CHARS)
]
# The weights manifest's name (sglx_core.weights_manifest.MANIFEST_NAME): every store entry has one.
# The weights' folder name (`weights/NAME`, and the folder made under --weights-dir): one plain
# path component.
WEIGHTS_NAME = re.compile(r"[A-Za-z0-9_+-][A-Za-z0-9._+-]{0,127}")
WEIGHTS_NAME_RULE = (
    "one plain name of ASCII letters, digits, '.', '_', '+' and '-', not starting with '.', "
    "at most 128 characters"
)
Arch = Annotated[str, StringConstraints(pattern=NAME_PATTERN.pattern, max_length=64)]
Kind = Literal["image-chunk", "meta", "install", "wheel", "lock", "weights", "ansible", "tuned"]
# The bundle's own files of a fixed path, and their kind.
FIXED_KINDS: dict[str, Kind] = {
    layout.SCAN_REPORT: "meta",
    layout.SBOM: "meta",
    layout.VEX: "meta",
    layout.PROVENANCE: "meta",
    layout.SCAN_ATTESTATION: "meta",
    layout.IN_TOTO_LAYOUT: "meta",
    layout.VERSIONS: "meta",
    layout.LABELS: "meta",
    layout.PROFILE: "meta",
    layout.RUN_SPEC: "meta",
    layout.INSTALL_SH: "install",
}
RECOPY = "re-copy bundle.json from the source side, or re-create the bundle"


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class FileEntry(_Record):
    """One file of the bundle."""

    path: RelPath
    size: int = Field(ge=0)
    sha256: Sha256
    kind: Kind


class LayerEntry(_Record):
    """One layer of the image, bottom first: its diff id, its chain id (sglx.bundle.layers),
    the bytes of its `layer.tar` in the save stream, and whether the archive carries it (a
    delta leaves out the layers its parent's image holds)."""

    diff_id: Digest
    chain_id: Digest
    size: int = Field(ge=0)
    carried: bool


class ParentRecord(_Record):
    """The bundle a delta takes its other layers from: the sha256 of its bundle.json (its
    install record's key), the folder name it was created under, and its image."""

    digest: Digest
    bundle: Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f/]+$", max_length=255)]
    image_ref: str
    image_id: ImageId


class BaseRecord(_Record):
    """The base image whose layers a bundle leaves out by reference (`create --exclude-base`):
    its reference and engine id, how many of the image's layers (from the bottom) are the
    base's, and how the profile says to obtain it ("" when that would not give this image)."""

    ref: str
    image_id: ImageId
    layers: int = Field(ge=1, le=layout.MAX_LAYERS)
    obtain: Annotated[str, StringConstraints(pattern=r"^[^\x00-\x1f\x7f]*$", max_length=2000)]


class ImageRecord(_Record):
    """The image: its config digest (`id`, the image id of Docker's classic store and podman)
    and its manifest digest (the image id of Docker's containerd store; bundles made before it
    was recorded have none), the tag it was saved under and the archive's chunks in order; its
    layers (bundles made before they were recorded have none), for a delta its parent, and for
    a bundle that leaves out its base's layers that base (sglx.image_identity)."""

    ref: str
    id: ImageId
    manifest_digest: ImageId | None = None
    archive: RelPath
    size: int = Field(ge=0)
    chunk_size: int = Field(ge=layout.MIN_CHUNK_SIZE)
    chunks: tuple[RelPath, ...] = Field(min_length=1)
    layers: tuple[LayerEntry, ...] | None = Field(default=None, max_length=layout.MAX_LAYERS)
    parent: ParentRecord | None = None
    base: BaseRecord | None = None

    def referenced(self) -> tuple[LayerEntry, ...]:
        """The layers this archive leaves out: the engine must hold them (from the parent or
        the base)."""
        return tuple(layer for layer in self.layers or () if not layer.carried)

    def from_base(self) -> tuple[LayerEntry, ...]:
        """The layers left out that are the base's (the lowest `base.layers`)."""
        count = 0 if self.base is None else self.base.layers
        return tuple(layer for layer in (self.layers or ())[:count] if not layer.carried)

    def from_parent(self) -> tuple[LayerEntry, ...]:
        """The layers left out above the base's: a delta takes them from its parent."""
        count = 0 if self.base is None else self.base.layers
        return tuple(layer for layer in (self.layers or ())[count:] if not layer.carried)


class WeightsFile(_Record):
    """One file of the weights' store entry (sglx.weights.store): the model's or its manifest."""

    name: Annotated[str, StringConstraints(pattern=rf"^{PART}$", max_length=255)]
    size: int = Field(ge=0)
    sha256: Sha256


class WeightsRecord(_Record):
    """Converted weights outside the image: carried beside it (`weights/NAME/`), or, in a delta
    whose parent had the same weights, named by digest only (`carried` false): the host's
    weights store holds them since the parent's install. `files` lists the store entry's files;
    bundles made before the store list none (their weights files are the entry's)."""

    name: Annotated[str, StringConstraints(pattern=rf"^{WEIGHTS_NAME.pattern}$")]
    path: RelPath | None
    digest: Digest
    size: int = Field(ge=0)
    carried: bool = True
    files: tuple[WeightsFile, ...] | None = Field(default=None, max_length=layout.MAX_FILES)


class TunedRecord(_Record):
    """A tuned set (sglx_core/tuned.py) carried at `tuned/`: its digest names its folder on the
    hosts (<tuning.host_root>/<digest hex>); its files are the bundle's entries of kind tuned,
    its manifest.json among them."""

    digest: Digest
    path: Literal["tuned"] = "tuned"


class Slot(_Record):
    """A part of the bundle that may be absent, and why."""

    included: bool
    path: RelPath | None = None
    note: str = ""


class BundleManifest(_Record):
    format: Literal["sglx-bundle"] = FORMAT
    format_version: Literal[1] = FORMAT_VERSION
    arch: Arch
    created: str
    sglx_version: str
    image: ImageRecord
    weights: WeightsRecord | None = None
    tuned: TunedRecord | None = None
    wheelhouse: Slot
    ansible: Slot
    files: tuple[FileEntry, ...] = Field(max_length=layout.MAX_FILES)

    def by_path(self) -> dict[str, FileEntry]:
        return {entry.path: entry for entry in self.files}

    def chunk_label(self, path: str) -> str | None:
        """'chunk 7 of image.tar' for a chunk's path, None for any other file."""
        if path not in self.image.chunks:
            return None
        name = PurePosixPath(self.image.archive).name
        return f"chunk {self.image.chunks.index(path)} of {name}"


def dump(manifest: BundleManifest) -> bytes:
    data = manifest.model_dump(mode="json")
    for key in ("base", "manifest_digest"):
        if data["image"][key] is None:  # written as before: an older sglx reads it
            del data["image"][key]
    weights = data.get("weights")
    if weights is not None and weights["carried"] and weights["files"] is None:
        del weights["carried"], weights["files"]  # carried weights are written as before
    if data["tuned"] is None:  # written as before: an older sglx reads it
        del data["tuned"]
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def parse(raw: bytes, where: str) -> BundleManifest:
    """Validate `bundle.json` bytes: JSON under untrusted's rules (no repeated key, bounded
    depth), the schema, then the manifest against itself and the bundle layout. Any problem is
    an error naming the file and the field."""
    if len(raw) > layout.MAX_MANIFEST_BYTES:
        raise SglxError(
            f"{where} is {len(raw)} bytes, more than a manifest can be "
            f"({layout.MAX_MANIFEST_BYTES} bytes)",
            hint="this is not an sglx bundle manifest; re-copy bundle.json from the source",
            code="bundle_manifest",
            path=where,
        )
    try:
        parse_json(raw, path=Path(where), what="bundle manifest")
    except SglxError as exc:
        raise SglxError(exc.message, hint=RECOPY, code="bundle_manifest", path=where) from None
    try:
        # JSON mode: strict models still take JSON arrays for tuples.
        manifest = BundleManifest.model_validate_json(raw)
    except ValidationError as exc:
        raise _invalid(where, schema_problem(exc)) from None
    problem = _image_problem(manifest.image) or _files_problem(manifest)
    if problem is not None:
        raise _invalid(where, problem)
    return manifest


def check_weights_name(name: str, where: str) -> str:
    """`name` if it can name the weights of a bundle; else an error naming `where`."""
    if not WEIGHTS_NAME.fullmatch(name):
        raise SglxError(
            f"{where}: {name!r} cannot name weights in a bundle",
            hint=f"rename the folder: the name must be {WEIGHTS_NAME_RULE}",
            code="usage",
        )
    return name


def _image_problem(image: ImageRecord) -> str | None:
    """Why the image record contradicts itself, or None: the reference, the archive's name and
    its chunks, which must be `chunk_name(0..n-1)` for n = ceil(size / chunk_size)."""
    try:
        check_reference(image.ref, "image.ref")
    except SglxError as exc:
        return exc.message
    if image.archive != layout.IMAGE_ARCHIVE:
        return f"image.archive: {image.archive} is not {layout.IMAGE_ARCHIVE}"
    problem = _layers_problem(image)
    if problem is not None:
        return problem
    count = max(1, -(-image.size // image.chunk_size))
    if len(image.chunks) != count:
        return (
            f"image.chunks: {image.size} bytes in chunks of {image.chunk_size} make {count} "
            f"chunks, the list has {len(image.chunks)}"
        )
    for index, chunk in enumerate(image.chunks):
        if chunk != layout.chunk_name(index):
            return f"image.chunks: chunk {index} is {chunk}, not {layout.chunk_name(index)}"
    return None


def _layers_problem(image: ImageRecord) -> str | None:
    """Why the layers, the parent and the base contradict themselves: every chain id is the one
    its diff ids make, a layer not carried is the base's or a parent names where it is, and a
    parent or a base needs the layers."""
    if image.layers is None:
        if image.parent is not None:
            return "image.parent: a delta must list its layers (image.layers)"
        return "image.base: a bundle without its base must list its layers" if image.base else None
    if not image.layers:
        return "image.layers: an image has at least one layer"
    chains = chain_ids([layer.diff_id for layer in image.layers])
    for index, (layer, chain) in enumerate(zip(image.layers, chains, strict=True)):
        if layer.chain_id != chain:
            return f"image.layers.{index}.chain_id: {layer.chain_id} is not the chain id {chain}"
    if image.parent is None and image.from_parent():
        above = " above the base" if image.base is not None else ""
        return f"image.layers: a layer{above} is not carried, but no image.parent names where it is"
    if image.base is not None:
        problem = _base_problem(image, image.base, len(image.layers))
        if problem is not None:
            return problem
    if image.parent is not None and image.parent.image_id == image.id:
        return "image.parent: the parent's image is this bundle's own image"
    if image.parent is not None:
        try:
            check_reference(image.parent.image_ref, "image.parent.image_ref")
        except SglxError as exc:
            return exc.message
    return None


def _base_problem(image: ImageRecord, base: BaseRecord, count: int) -> str | None:
    if base.layers > count:
        return f"image.base.layers: {base.layers}, but the image has {count} layers"
    if base.image_id == image.id:
        return "image.base: the base's image is this bundle's own image"
    try:
        check_reference(base.ref, "image.base.ref")
    except SglxError as exc:
        return exc.message
    return None


def _files_problem(manifest: BundleManifest) -> str | None:
    """Why `files` contradicts the rest of the manifest, or None: each path once, where the
    layout puts it with the kind the layout gives it, and the chunk sizes add up to the image."""
    seen: set[str] = set()
    for entry in manifest.files:
        if entry.path in seen or entry.path in layout.METADATA:
            return f"files: {entry.path} is listed twice, or is a metadata file"
        seen.add(entry.path)
        if entry.path.count("/") >= layout.MAX_PATH_DEPTH:
            return f"files: {entry.path} is nested more than {layout.MAX_PATH_DEPTH} levels deep"
        kind = _layout_kind(manifest, entry.path)
        if kind is None:
            return f"files: {entry.path} has no place in the bundle layout"
        if kind != entry.kind:
            return f"files: {entry.path} is of kind {entry.kind!r}, the layout says {kind!r}"
    image, by_path = manifest.image, manifest.by_path()
    missing = [c for c in image.chunks if c not in by_path]
    if missing:
        return f"image.chunks: {', '.join(missing[:5])} have no file entry"
    last = image.size - (len(image.chunks) - 1) * image.chunk_size
    for index, chunk in enumerate(image.chunks):
        want = last if index == len(image.chunks) - 1 else image.chunk_size
        if by_path[chunk].size != want:
            return f"files: {chunk} is {by_path[chunk].size} bytes, the image record says {want}"
    problem = _weights_problem(manifest) or _tuned_problem(manifest)
    if problem is not None:
        return problem
    for name, slot, path in (
        ("wheelhouse", manifest.wheelhouse, layout.WHEELHOUSE),
        ("ansible", manifest.ansible, layout.ANSIBLE),
    ):
        if slot.included and slot.path != path:
            return f"{name}.path: {slot.path} is not {path}"
    return None


def _weights_problem(manifest: BundleManifest) -> str | None:
    """Why the weights record contradicts the files: carried weights are `weights/NAME/` and
    their files are those `weights.files` lists; weights not carried are a delta's, with no
    file in the bundle and their files listed, sglx-weights.json among them."""
    weights = manifest.weights
    if weights is None:
        return None
    entries = [e for e in manifest.files if e.kind == "weights"]
    listed = weights.files
    if weights.carried:
        if weights.path != f"{layout.WEIGHTS}/{weights.name}":
            return f"weights.path: {weights.path} is not {layout.WEIGHTS}/{weights.name}"
        size = sum(e.size for e in entries)
        if size != weights.size:
            return f"weights.size: {weights.size} bytes, its files add up to {size}"
        prefix = f"{weights.path}/"
        if listed is not None and sorted(
            (e.path.removeprefix(prefix), e.size, e.sha256) for e in entries
        ) != sorted((f.name, f.size, f.sha256) for f in listed):
            return "weights.files: not the files the bundle carries under weights.path"
    else:
        if weights.path is not None or entries:
            return "weights: weights not carried have no path and no file in the bundle"
        if manifest.image.parent is None:
            return "weights.carried: only a delta (image.parent) takes its weights from the store"
        if listed is None:
            return "weights.files: weights not carried must list their files"
        if sum(f.size for f in listed) != weights.size:
            return f"weights.size: {weights.size} bytes, weights.files add up to another size"
    if listed is not None:
        names = [f.name for f in listed]
        if len(set(names)) != len(names) or WEIGHTS_MANIFEST not in names:
            return f"weights.files: a name listed twice, or no {WEIGHTS_MANIFEST}"
    return None


def _tuned_problem(manifest: BundleManifest) -> str | None:
    """A tuned record needs its manifest.json among the files under tuned/."""
    if manifest.tuned is None:
        return None
    names = {e.path for e in manifest.files if e.kind == "tuned"}
    if f"{manifest.tuned.path}/{TUNED_MANIFEST}" not in names:
        return f"tuned: no {manifest.tuned.path}/{TUNED_MANIFEST} among the files"
    return None


def weights_files(manifest: BundleManifest) -> tuple[WeightsFile, ...]:
    """The files of the bundle's weights store entry: `weights.files`, or (a bundle made before
    the store) its weights files under `weights.path`."""
    weights = manifest.weights
    if weights is None:
        return ()
    if weights.files is not None:
        return weights.files
    prefix = f"{weights.path}/"
    return tuple(
        WeightsFile(name=e.path.removeprefix(prefix), size=e.size, sha256=e.sha256)
        for e in manifest.files
        if e.kind == "weights"
    )


def _layout_kind(manifest: BundleManifest, path: str) -> Kind | None:
    """The kind the bundle layout gives `path` in this manifest; None when it has no place."""
    top, _, rest = path.partition("/")
    if path in manifest.image.chunks:
        return "image-chunk"
    if path in FIXED_KINDS:
        return FIXED_KINDS[path]
    if layout.IN_TOTO_LINK.fullmatch(path):
        return "meta"
    if top == layout.WHEELHOUSE and manifest.wheelhouse.included:
        if path == layout.WHEEL_LOCK:
            return "lock"
        return "wheel" if "/" not in rest and rest.endswith(".whl") else None
    if top == layout.ANSIBLE and manifest.ansible.included:
        return "lock" if path == layout.ANSIBLE_LOCK else "ansible"
    weights = manifest.weights
    if weights is not None and weights.path is not None and path.startswith(weights.path + "/"):
        return "weights"
    if manifest.tuned is not None and top == manifest.tuned.path and "/" not in rest:
        return "tuned"
    return None


def _invalid(where: str, detail: str) -> SglxError:
    return SglxError(
        f"{where} is not a valid sglx bundle manifest ({detail})",
        hint=RECOPY,
        code="bundle_manifest",
        path=where,
    )


def render_sums(
    manifest: BundleManifest, manifest_sha256: str, signature_sha256: str | None
) -> str:
    """The `SHA256SUMS` text for this manifest (GNU coreutils format, two spaces, text mode)."""
    lines = [f"{entry.sha256}  {entry.path}" for entry in sorted(manifest.files, key=_path_key)]
    lines.append(f"{manifest_sha256}  {layout.MANIFEST}")
    if signature_sha256 is not None:
        lines.append(f"{signature_sha256}  {layout.SIGNATURE}")
    return "\n".join(lines) + "\n"


def _path_key(entry: FileEntry) -> str:
    return entry.path


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

"""Which weights a bundle carries beside its image, and which it names by digest only.

An image built with its weights outside it (its label io.sglx.weights.outside, set by `sglx
image build` above the profile's weights.outside_above) needs them beside it: `bundle create`
takes them from `--weights-outside DIR` or from the weights store it was built into
(`<--models-root>/<digest hex>`, sglx_core.weights_store), checked against the image's
io.sglx.weights.digest. An image with baked weights takes `--weights-outside` as before (other
weights, mounted over the baked ones). A delta (`--since`) whose parent bundle had the same
weights digest carries none of their bytes: bundle.json names them (`carried` false) with the
files of their store entry, which the host has since the parent's install.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx import image_labels
from sglx.bundle import layout
from sglx.bundle.delta import Bundle
from sglx.bundle.manifest import (
    PART,
    WEIGHTS_NAME,
    WeightsFile,
    WeightsRecord,
    check_weights_name,
    weights_files,
)
from sglx.weights import store
from sglx_core.errors import SglxError
from sglx_core.profile import Profile


@dataclass(frozen=True)
class WeightsPlan:
    """The bundle's weights record, the files to copy (none when not carried) and the store
    entry's files (what install.sh checks and places)."""

    record: WeightsRecord
    sources: tuple[Path, ...]
    stored: tuple[WeightsFile, ...]

    @property
    def carried(self) -> bool:
        return self.record.carried


def folder_name(folder: Path) -> str:
    """The name the weights get in the bundle: the folder's own name, `.` and `..` resolved
    as written (not through links, so a linked folder keeps the name it was given)."""
    return Path(os.path.normpath(folder.absolute())).name


def plan_weights(
    image: Any,
    ref: str,
    profile: Profile,
    folder: Path | None,
    models_root: Path | None,
    parent: Bundle | None,
) -> WeightsPlan | None:
    labels = image.labels or {}
    labelled = labels.get(image_labels.WEIGHTS_DIGEST)
    outside = labels.get(image_labels.WEIGHTS_OUTSIDE) == "true"
    if outside and labelled is None:
        raise SglxError(
            f"image '{ref}' says its weights are outside it ({image_labels.WEIGHTS_OUTSIDE}) "
            "but names no "
            f"weights digest ({image_labels.WEIGHTS_DIGEST})",
            hint="rebuild the image with `sglx image build`",
            code="usage",
        )
    previous = None if parent is None else parent.manifest.weights
    if outside and folder is None and previous is not None and previous.digest == labelled:
        assert parent is not None
        return _referenced(previous, weights_files(parent.manifest))
    name = None
    if folder is None and outside:
        assert labelled is not None
        root = store.root(models_root, profile.weights.store)
        assert root is not None
        folder = store.entry(root, labelled)
        if not folder.is_dir():
            raise SglxError(
                f"image '{ref}' keeps its weights ({labelled}) outside it, and the weights store "
                f"has no entry {folder}",
                hint="pass --weights-outside DIR (the converted weights it was built with), or "
                "--models-root ROOT of the store `sglx image build` put them in",
                code="usage",
                path=str(folder),
            )
        name = labels.get(image_labels.MODEL_NAME, "")
        name = name if WEIGHTS_NAME.fullmatch(name) else "model"
    if folder is None:
        return None
    from sglx_core.weights_manifest import manifest_digest

    digest = manifest_digest(folder)
    if not outside and labelled == digest:
        raise SglxError(
            f"the weights in {folder} ({digest}) are already baked into the image",
            hint="a bundle never carries the same bytes twice: drop --weights-outside, or "
            "build the image without these weights",
            code="usage",
        )
    if outside and labelled != digest:
        raise SglxError(
            f"--weights-outside {folder} holds the weights {digest}; image '{ref}' was built "
            f"with {labelled} (its {image_labels.WEIGHTS_DIGEST} label), kept outside it",
            hint="pass the converted weights the image was built with",
            code="usage",
            path=str(folder),
        )
    found = store.folder_files(folder)
    for file in found:  # before a record is made of them: its schema refuses such a name
        if not re.fullmatch(PART, file.name):
            raise SglxError(
                f"--weights-outside {folder}: the file name {file.name!r} cannot be a bundle path",
                hint="bundle paths are ASCII letters, digits and '._+@=-', not starting with '.': "
                "convert the weights again under plain names",
                code="usage",
                path=str(folder / file.name),
            )
    stored = tuple(WeightsFile(name=f.name, size=f.size, sha256=f.sha256) for f in found)
    if previous is not None and previous.digest == digest:
        return _referenced(previous, stored)
    name = name or check_weights_name(folder_name(folder), f"--weights-outside {folder}")
    record = WeightsRecord(
        name=name,
        path=f"{layout.WEIGHTS}/{name}",
        digest=digest,
        size=sum(f.size for f in stored),
    )
    return WeightsPlan(record, tuple(folder / f.name for f in stored), stored)


def _referenced(previous: WeightsRecord, files: tuple[WeightsFile, ...]) -> WeightsPlan:
    """The parent's weights, named by digest only: the host's store has them."""
    record = WeightsRecord(
        name=previous.name,
        path=None,
        digest=previous.digest,
        size=sum(f.size for f in files),
        carried=False,
        files=files,
    )
    return WeightsPlan(record, (), files)

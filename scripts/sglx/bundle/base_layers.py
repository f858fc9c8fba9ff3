"""Base layers by reference: a bundle that leaves out the layers its image shares with its base
image (`create --exclude-base`), for a site that loads the base once with `sglx base load`.

An upstream ROCm base is most of an image's bytes and changes far less often than sglx's
layers, so carrying it once (its own tar, checked by `sglx base load`) and every bundle without
it saves that many bytes per upgrade. `find_base` names the base at create: by the image's
labels (`sglx image build` records the base's reference and engine id), else by the profile's
`base.ref` (and `base.digest` when pinned); the engine's copy of that base must be the bottom of
the image. bundle.json's `image.base` names it, and its layers are `carried: false`.

`install` and install.sh ask the engine before anything loads (sglx.bundle.delta.engine_missing
for both kinds of left-out layer) and refuse with `refusal`, naming the base and how to load it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sglx import image_labels
from sglx.bundle.manifest import BaseRecord, ImageRecord, LayerEntry
from sglx.image_reference import check_reference
from sglx_core.digests import DIGEST
from sglx_core.errors import SglxError
from sglx_core.profile import Profile

CODE = "bundle_base"
# What `sglx image build` labels an image with (sglx.image.build._labels).
_ID = re.compile(DIGEST)
NO_BASE = "create the bundle without --exclude-base (it then carries the base's layers)"


def find_base(
    client: Any, image: Any, ref: str, diff_ids: Sequence[str], profile: Profile
) -> BaseRecord:
    """The base of `image` (saved as `ref`), checked against the engine's copy of it."""
    from docker.errors import ImageNotFound

    labels = image.labels or {}
    named = labels.get(image_labels.BASE_NAME) or ""
    base_ref = named if _is_reference(named) else profile.base.ref
    labelled = labels.get(image_labels.BASE_DIGEST) or ""
    base_id = labelled if _ID.fullmatch(labelled) else None
    how = _obtain(profile, base_ref) or f"docker save it where {ref} was built, then sglx base load"
    try:
        base = client.images.get(base_id or base_ref)
    except ImageNotFound:
        raise SglxError(
            f"--exclude-base: the base of {ref}, {base_ref}"
            + (f" ({base_id})" if base_id else "")
            + ", is not in this engine, so which layers are its cannot be told",
            hint=f"load it here ({how}), or {NO_BASE}",
            code="base_missing",
        ) from None
    if base_id is None and profile.base.digest and base.id != profile.base.digest:
        raise SglxError(
            f"--exclude-base: the base {base_ref} in this engine is {base.id}, the {profile.arch} "
            f"profile pins {profile.base.digest}",
            hint=f"load the pinned base ({how}), or {NO_BASE}",
            code="base_mismatch",
        )
    if base.id == image.id:
        raise SglxError(
            f"--exclude-base: {ref} is its base image {base_ref} itself",
            hint="bundle the image built on it (`sglx image build`), not the base",
            code="usage",
        )
    layers = [str(d) for d in ((base.attrs.get("RootFS") or {}).get("Layers") or [])]
    if not layers or list(diff_ids[: len(layers)]) != layers:
        raise SglxError(
            f"--exclude-base: {ref} is not built on the base {base_ref} ({base.id}) this engine "
            "holds: its lowest layers are not that image's",
            hint=f"rebuild the image on that base (`sglx image build --arch {profile.arch}`), "
            f"or {NO_BASE}",
            code="base_mismatch",
        )
    return BaseRecord(
        ref=base_ref, image_id=base.id, layers=len(layers), obtain=_obtain(profile, base_ref)
    )


def _is_reference(value: str) -> bool:
    try:
        check_reference(value, "label")
    except SglxError:
        return False
    return True


def _obtain(profile: Profile, ref: str) -> str:
    """The profile's way to obtain the base, where it gives this very image: a base the profile
    loads from a tar (`sglx base build` makes another image id each time)."""
    if ref != profile.base.ref or profile.base.source != "load":
        return ""
    return " ".join(profile.base.obtain.split())


def describe(base: BaseRecord) -> str:
    """'the base image REF (sha256:...)'."""
    return f"the base image {base.ref} ({base.image_id})"


def how_to_load(base: BaseRecord) -> str:
    """The fix for an engine without the base, worded for install and install.sh alike."""
    how = base.obtain or (
        f"`docker save -o FILE {base.ref}` where the image was built, carry FILE in, then "
        "`sglx base load FILE`"
    )
    return (
        f"load the base {base.ref} into this engine first ({how}), then install this bundle again"
    )


def refusal(image: ImageRecord, missing: Sequence[LayerEntry]) -> SglxError:
    """The error install gives, before anything loads, on an engine without the base's layers."""
    base = image.base
    assert base is not None
    return SglxError(
        f"this bundle leaves out the {len(image.from_base())} layers of {describe(base)}: this "
        f"engine lacks {len(missing)} of them (e.g. {missing[0].diff_id}); nothing was loaded",
        hint=how_to_load(base),
        code=CODE,
    )

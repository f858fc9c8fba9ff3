"""`sglx image build` with weights above the threshold: kept outside the image, in the store.

The threshold is `--weights-outside-above SIZE`, else $SGLX_WEIGHTS_OUTSIDE_ABOVE, else the
profile's weights.outside_above (sglx_core.weights_store). Converted weights larger than it are
not baked: the image gets their folder without the `.safetensors` shards (the manifest,
config and tokenizer, which the build's own steps read; the digest label and the manifest still
say which weights it serves) and the label
io.sglx.weights.outside=true; the weights go to the build host's weights store
(`--models-root`, $SGLX_MODELS_ROOT or the profile's weights.store), placed once and checked
like an install places them (sglx.weights.store), where `sglx bundle create` finds them.
"""

from __future__ import annotations

import os
from pathlib import Path

from sglx.progress import Progress
from sglx.weights import store
from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.sizes import EXAMPLES, parse_size
from sglx_core.weights_store import THRESHOLD_ENV, outside

HINT = f"use {EXAMPLES}"


def threshold(profile: Profile, given: str | None) -> int:
    """The size above which converted weights stay outside the image, in bytes."""
    for text, where in (
        (given, "--weights-outside-above"),
        (os.environ.get(THRESHOLD_ENV), THRESHOLD_ENV),
        (profile.weights.outside_above, f"the {profile.arch} profile's weights.outside_above"),
    ):
        if text is None or text == "":
            continue
        size = parse_size(text)
        if size is None:
            raise SglxError(f"{where} is {text!r}, not a size", hint=HINT, code="usage")
        return size
    raise AssertionError("the profile's weights.outside_above is required")


def weights_size(folder: Path) -> int:
    """The converted weights' bytes: their files and their manifest, as the store holds them."""
    return sum(f.size for f in store.folder_files(folder))


def keep(
    profile: Profile,
    folder: Path,
    digest: str,
    limit: int,
    models_root: Path | None,
    progress: Progress,
) -> Path | None:
    """The store entry the weights were kept in when they are above `limit`; None (baked)."""
    size = weights_size(folder)
    if not outside(size, limit):
        return None
    root = store.root(models_root, profile.weights.store)
    assert root is not None
    entry = store.entry(root, digest)
    files = store.folder_files(folder)
    progress(
        f"the weights are {size} bytes, above {limit}: kept outside the image, in the weights "
        f"store at {entry}"
    )
    problem = store.problem(entry, files, digest)
    if problem is None:
        progress(f"{entry} holds them already (every sha256 checked)")
        return entry
    if problem != "is not there":
        progress(f"{entry} {problem}: placing it again")
    try:
        store.place(entry, [(folder / f.name, f) for f in files], progress)
    except OSError as exc:
        raise SglxError(
            f"cannot place the weights in the weights store {root}: {exc.strerror or exc}",
            hint="run as root, or pass --models-root DIR (or set SGLX_MODELS_ROOT) to a "
            "writable folder",
            code="environment",
            path=str(root),
        ) from None
    return entry

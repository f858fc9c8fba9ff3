"""install.sh's part for weights outside the image: the node-local weights store in sh.

What sglx.weights.store does in Python, with coreutils: `weights_ok DIR` is true when DIR is a
folder (not a link) holding exactly the files of `weights_list` (the store entry's files, from
bundle.json at create time: `SHA256 SIZE NAME` lines), each a regular file of its size and
sha256 (install.sh's `sha256_of`); else `weights_why` says why. `weights_place` copies the
bundle's weights into a hidden staging folder beside the entry, checks the sha256 of every copy
and renames the folder into place (a damaged entry renamed aside first, removed last). Entries
of other digests are never touched.

Carried weights are placed after the image is loaded and before the install is recorded (the
bundle_install role takes a record as "installed"): an entry that matches is kept, one that
does not is placed again. A delta that names its parent's weights without carrying them checks
the entry before anything loads, and refuses, naming the parent bundle, when it is missing or
does not match: it cannot place what it does not carry.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from sglx.bundle.install_sh_values import fill, part, plain
from sglx.bundle.manifest import ImageRecord, WeightsFile, WeightsRecord
from sglx_core.errors import SglxError
from sglx_core.weights_store import entry_name

# Stands for the weights store's root in the rendered run line; install.sh puts its root there.
MODELS_MARK = "@SGLX_MODELS_ROOT@"


def parts(
    weights: WeightsRecord | None, files: Sequence[WeightsFile], image: ImageRecord | None
) -> dict[str, str]:
    """The template's weights values: the functions, what runs before the image loads and
    after it, and the closing note."""
    if weights is None:
        none = {"@DIGEST@": "''", "@HEX@": "''", "@SRC@": "''", "@FROM@": "''", "@LIST@": ""}
        return {
            "weights_sh": fill(part("weights.sh"), none),
            "weights_before_load": ": # no weights outside the image",
            "weights_after_load": ": # no weights outside the image",
            "weights_note": "",
        }
    if not files:
        raise SglxError("install.sh: weights outside the image with no files", code="usage")
    parent = None if image is None or image.parent is None else image.parent.bundle
    if not weights.carried and parent is None:
        raise SglxError("install.sh: weights not carried, but no parent bundle", code="usage")
    values = {
        "@DIGEST@": shlex.quote(weights.digest),
        "@HEX@": entry_name(weights.digest),
        "@SRC@": shlex.quote(weights.path or ""),
        "@FROM@": shlex.quote(plain(parent or "", "the parent bundle's name")),
        "@LIST@": "\n".join(f"{f.sha256} {f.size} {f.name}" for f in files),
    }
    note = "say " + shlex.quote(
        f"the weights {weights.digest} are outside the image, in the weights store: the line "
        "below mounts them read-only"
    )
    return {
        "weights_sh": fill(part("weights.sh"), values),
        "weights_before_load": part("weights_carried_before.sh")
        if weights.carried
        else part("weights_referenced.sh"),
        "weights_after_load": part("weights_carried.sh")
        if weights.carried
        else ": # weights named, not carried: checked before the load",
        "weights_note": note,
    }

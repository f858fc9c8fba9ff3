"""The node-local weights store: where weights kept outside the image live on a host, and when
they are kept outside.

Each host keeps one folder per converted model, `<root>/<64 hex of the weights manifest
digest>` (sglx_core.weights_manifest.manifest_digest), shared by every image version that serves
those weights and mounted read-only at the image's model folder. The root is the profile's
`weights.store`; a site moves it with SGLX_MODELS_ROOT (install.sh, `sglx bundle install`,
`sglx image build`, `--models-root`) or the roles' variables. Weights whose converted size is
above the profile's `weights.outside_above` (or SGLX_WEIGHTS_OUTSIDE_ABOVE) are not baked into
the image. The host side (sglx.run_spec, sglx.weights.store, install.sh, the roles) takes these
facts from here.
"""

from __future__ import annotations

from sglx_core.digests import sha256_hex

ROOT_ENV = "SGLX_MODELS_ROOT"
THRESHOLD_ENV = "SGLX_WEIGHTS_OUTSIDE_ABOVE"
# The image label that says the image's weights (io.sglx.weights.digest) are outside it.
OUTSIDE_LABEL = "io.sglx.weights.outside"


def entry_name(digest: str) -> str:
    """The folder of the weights `digest` under the store's root: its 64 hex digits."""
    return sha256_hex(digest, "a weights digest")


def entry_folder(root: str, digest: str) -> str:
    """The store entry of the weights `digest` under `root`."""
    return f"{root.rstrip('/') or ''}/{entry_name(digest)}"


def outside(size: int, threshold: int) -> bool:
    """Whether weights of `size` bytes stay outside the image: strictly above the threshold."""
    return size > threshold

"""The names of the labels `sglx image build` writes on an image, in one place for the code
that writes them (sglx.image.build, sglx.base) and the code that reads them (bundle create,
the SBOM, the attestations, prune).

OCI's annotation keys (https://github.com/opencontainers/image-spec/blob/main/annotations.md)
where one fits; `io.sglx.*` for the rest. The labels the server side reads too (the profile,
golden numerics, Triton cache and weights-outside labels) live in sglx_core beside their
readers and are re-exported here.
"""

from __future__ import annotations

from sglx_core.gate.golden import GOLDEN_LABEL as GOLDEN_DIGEST
from sglx_core.profile.resolved import PROFILE_DIGEST_LABEL as PROFILE_DIGEST
from sglx_core.triton_cache import LABEL as TRITON_CACHE
from sglx_core.weights_store import OUTSIDE_LABEL as WEIGHTS_OUTSIDE

CREATED = "org.opencontainers.image.created"
VERSION = "org.opencontainers.image.version"  # sglx's version
REVISION = "org.opencontainers.image.revision"  # the source commit, `-dirty` when it had changes
BASE_NAME = "org.opencontainers.image.base.name"
BASE_DIGEST = "org.opencontainers.image.base.digest"
ARCH = "io.sglx.arch"
STAGE = "io.sglx.stage"  # an intermediate image of the build (prune)
SGLANG_VERSION = "io.sglx.sglang.version"
LOCK_DIGEST = "io.sglx.lock.digest"
LOCK_WHEELS = "io.sglx.lock.wheels"
WEIGHTS_DIGEST = "io.sglx.weights.digest"
MODEL_NAME = "io.sglx.model.name"
MODEL_DEMO = "io.sglx.model.demo"

__all__ = [
    "ARCH",
    "BASE_DIGEST",
    "BASE_NAME",
    "CREATED",
    "GOLDEN_DIGEST",
    "LOCK_DIGEST",
    "LOCK_WHEELS",
    "MODEL_DEMO",
    "MODEL_NAME",
    "PROFILE_DIGEST",
    "REVISION",
    "SGLANG_VERSION",
    "STAGE",
    "TRITON_CACHE",
    "VERSION",
    "WEIGHTS_DIGEST",
    "WEIGHTS_OUTSIDE",
]

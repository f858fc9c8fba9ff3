"""The sha256 digest, as sglx writes and reads it: 64 lowercase hex digits, and `sha256:` before
them where it names content (an image id, a bundle, a weights manifest). One pattern, so that
every reader of a record, a manifest, an archive or a profile refuses the same strings."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import StringConstraints

HEX64 = "[0-9a-f]{64}"
DIGEST = f"sha256:{HEX64}"

# Fields of the models that read records and manifests.
Sha256 = Annotated[str, StringConstraints(pattern=f"^{HEX64}$")]
Digest = Annotated[str, StringConstraints(pattern=f"^{DIGEST}$")]
# The profile's fields (strict: a YAML number is not a string).
StrictSha256 = Annotated[str, StringConstraints(strict=True, pattern=f"^{HEX64}$")]
StrictDigest = Annotated[str, StringConstraints(strict=True, pattern=f"^{DIGEST}$")]

_SHA256 = re.compile(f"sha256:({HEX64})")


def sha256_hex(digest: str, what: str) -> str:
    """The 64 hex digits of `digest` ("sha256:" and 64 lowercase hex): the one rule for naming
    a folder after a digest (the JIT cache's per image, the weights store's per manifest), so
    no digest from a record can name a path outside its root."""
    found = _SHA256.fullmatch(digest)
    if found is None:
        raise ValueError(f"{digest!r} is not {what} (sha256: and 64 lowercase hex digits)")
    return found.group(1)

"""The sha256 digest, as sglx writes and reads it: 64 lowercase hex digits, and `sha256:` before
them where it names content (an image id, a bundle, a weights manifest). One pattern, so that
every reader of a record, a manifest, an archive or a profile refuses the same strings."""

from __future__ import annotations

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

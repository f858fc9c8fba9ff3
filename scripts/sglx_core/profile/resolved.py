"""The resolved profile as it travels: the text baked into the image (/etc/sglx/arch.yaml) and
carried by a bundle (meta/arch.yaml), and its digest (the image label io.sglx.profile.digest).

One function each, so the image build, `sglx bundle create` (which refuses an image whose
label names another profile) and any later reader compute them the same way.
"""

from __future__ import annotations

import hashlib

import yaml

from sglx_core.profile.schema import Profile

PROFILE_DIGEST_LABEL = "io.sglx.profile.digest"


def resolved_text(profile: Profile) -> str:
    """The resolved profile (shared fragments merged in), as YAML with a header line."""
    return (
        f"# sglx arch profile {profile.arch}, resolved (shared fragments merged in)\n"
        + yaml.safe_dump(profile.to_json(), sort_keys=False)
    )


def profile_digest(profile: Profile) -> str:
    """sha256 of the profile's canonical form (its JSON model as YAML, keys sorted): the same
    for the same resolved profile whatever file order or comments it was written with."""
    canonical = yaml.safe_dump(profile.to_json(), sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(canonical).hexdigest()

"""The arch profile baked into the image, which decides how this plugin behaves.

Images write the resolved profile to /etc/sglx/arch.yaml; SGLX_PROFILE points elsewhere (tests,
a host install). Loading goes through the sglx host package's schema, so the plugin and the
build read the same validated `Profile`.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from sglx_core.profile import Profile, load_profile_file

PROFILE_ENV = "SGLX_PROFILE"
DEFAULT_PROFILE = Path("/etc/sglx/arch.yaml")


def profile_path() -> Path:
    return Path(os.environ.get(PROFILE_ENV) or DEFAULT_PROFILE)


@lru_cache(maxsize=4)
def _load(path: Path) -> Profile:
    return load_profile_file(path)


def baked_profile() -> Profile:
    """The profile at `profile_path()`, loaded and validated once per process."""
    return _load(profile_path())

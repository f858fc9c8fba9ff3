"""Architecture profiles: `images/<arch>/arch.yaml`, the single source of truth for an arch.

Everything downstream (Dockerfiles, plugin defaults, Ansible vars, scan rules) reads the
`Profile` object `load_profile` returns; nothing else parses arch.yaml.
"""

from sglx_core.paths import IMAGES_DIR_ENV, PROFILE_FILE, images_dir
from sglx_core.profile.issues import ProfileError, ProfileIssue
from sglx_core.profile.loader import (
    known_arches,
    load_profile,
    load_profile_file,
    profile_path,
)
from sglx_core.profile.schema import SCHEMA_VERSION, Profile

__all__ = [
    "IMAGES_DIR_ENV",
    "PROFILE_FILE",
    "SCHEMA_VERSION",
    "Profile",
    "ProfileError",
    "ProfileIssue",
    "images_dir",
    "known_arches",
    "load_profile",
    "load_profile_file",
    "profile_path",
]

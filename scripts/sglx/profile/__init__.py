"""Architecture profiles: `images/<arch>/arch.yaml`, the single source of truth for an arch.

Everything downstream (Dockerfiles, plugin defaults, Ansible vars, scan rules) reads the
`Profile` object `load_profile` returns; nothing else parses arch.yaml.
"""

from sglx.profile.issues import ProfileError, ProfileIssue
from sglx.profile.loader import (
    IMAGES_DIR_ENV,
    PROFILE_FILE,
    images_dir,
    known_arches,
    load_profile,
    load_profile_file,
    profile_path,
)
from sglx.profile.schema import SCHEMA_VERSION, Profile

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

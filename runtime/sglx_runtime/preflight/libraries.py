"""Where the profile's required libraries are, found the way the dynamic loader looks."""

from __future__ import annotations

import os
import sys
from fnmatch import fnmatch
from pathlib import Path

from sglx_core.ldconf import conf_dirs
from sglx_core.profile import Profile
from sglx_core.rootfs import RootFS
from sglx_platform.failures import FailureClass
from sglx_runtime.preflight.checks import Check, failed

DEFAULT_LIB_DIRS = (
    "/lib",
    "/usr/lib",
    "/lib64",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
)


def required_libraries(profile: Profile, checks: list[Check]) -> list[str]:
    """The path of each library the profile requires; a check fails for each one missing."""
    found: list[str] = []
    for pattern, why in profile.scan.require.items():
        path = find_library(pattern)
        if path is None:
            checks.append(
                failed(
                    f"library {pattern}",
                    f"not found ({why})",
                    FailureClass.SYMBOL_NOT_FOUND,
                    "the image lacks it: rebuild from a base that carries it "
                    "(sglx scan --image shows what is unresolved)",
                )
            )
        else:
            found.append(str(path))
    return found


def library_dirs() -> list[Path]:
    """Where the dynamic loader looks: LD_LIBRARY_PATH, ld.so.conf, default dirs, then the
    Python environment (wheels such as torch ship their libraries in site-packages)."""
    dirs = [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += [Path(d) for d in conf_dirs(RootFS(Path("/")))]
    dirs += [Path(d) for d in DEFAULT_LIB_DIRS]
    dirs += [Path(p) for p in sys.path if p.endswith("site-packages")]
    return [d for d in dict.fromkeys(dirs) if d.is_dir()]


def find_library(pattern: str) -> Path | None:
    """The first file matching the soname glob in the loader's dirs (site-packages: recursive)."""
    for folder in library_dirs():
        candidates = (
            folder.rglob("*.so*") if folder.name == "site-packages" else folder.glob("*.so*")
        )
        for candidate in candidates:
            if fnmatch(candidate.name, pattern):
                return candidate
    return None

"""The Python platform an arch's image installs wheels for, as pip's target arguments."""

from __future__ import annotations

from dataclasses import dataclass

from sglx_core.profile import Profile

# The oldest manylinux level sglx accepts; every level from here to the base's glibc is allowed.
MIN_GLIBC_MINOR = 17


@dataclass(frozen=True)
class Target:
    python_version: str  # "3.11"
    machine: str  # "x86_64"
    platforms: tuple[str, ...]  # manylinux tags, newest first

    def pip_args(self) -> list[str]:
        args = [
            "--only-binary=:all:",
            "--implementation",
            "cp",
            "--python-version",
            self.python_version,
        ]
        for platform in self.platforms:
            args += ["--platform", platform]
        return args

    def describe(self) -> str:
        return f"CPython {self.python_version}, {self.platforms[0]} and older"


def target_of(profile: Profile) -> Target:
    """Wheels for the profile's Python, built for its glibc or any older manylinux level."""
    machine = profile.machine
    newest = int(profile.python.glibc.split(".")[1])
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(newest, MIN_GLIBC_MINOR - 1, -1)]
    tags.append(f"manylinux2014_{machine}")
    return Target(profile.python.version, machine, tuple(tags))

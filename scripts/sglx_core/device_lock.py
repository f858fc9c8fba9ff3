"""The device-init lock's host folder: one mount and one variable in every `docker run` sglx writes.

The plugin serialises device bring-up with an flock on the folder $SGLX_LOCK_DIR names
(plugin/sglx_platform/device_init.py). The lock is host-wide only when every server container
of a host mounts the same host folder there, so the three ways sglx runs a server take both
from here: the systemd unit of the sglang_service role (through `sglx ansible vars`), and the
`docker run` line of install.sh and `sglx bundle install` (`bundle.install_sh.docker_run_words`).
The image bakes neither: a container started by hand without the mount keeps its own lock
rather than naming a folder that is not there.
"""

from __future__ import annotations

from typing import Any

from sglx_core.profile import Profile

# The variable the plugin reads (sglx_platform.device_init imports it from here).
LOCK_DIR_ENV = "SGLX_LOCK_DIR"


def lock_env(profile: Profile) -> dict[str, str]:
    """The variable that points the plugin at the mounted folder."""
    return {LOCK_DIR_ENV: profile.container.lock_dir.target}


def lock_dir_words(profile: Profile) -> list[str]:
    """`docker run` arguments: the host folder mounted read-only (the plugin opens the folder
    and flocks it, which writes nothing) and the variable naming it."""
    lock = profile.container.lock_dir
    words = ["-v", f"{lock.source}:{lock.target}:ro"]
    for name, value in lock_env(profile).items():
        words += ["-e", f"{name}={value}"]
    return words


def lock_dir_vars(profile: Profile) -> dict[str, Any]:
    """The sglang_service role's `sglang_service_lock_dir`: the folder on each side (the role
    creates `source`; the host checks find the mount), the variable, and the unit's
    `docker run` arguments, the very words install.sh prints."""
    lock = profile.container.lock_dir
    return {
        "source": lock.source,
        "target": lock.target,
        "env": lock_env(profile),
        "args": lock_dir_words(profile),
    }

"""Where the checkout's parts are: the one home of the repository's layout.

sglx runs from its source checkout (or an image that carries the profiles): every other module
asks here for a folder instead of counting `parents[...]` from its own file. Environment
overrides let an operator or a test point sglx at another tree.
"""

from __future__ import annotations

import os
from pathlib import Path

from sglx_core.errors import SglxError

ROOT_ENV = "SGLX_ROOT"
IMAGES_DIR_ENV = "SGLX_IMAGES_DIR"
PROFILE_FILE = "arch.yaml"

# scripts/sglx_core/paths.py: the checkout is two folders up.
_CHECKOUT = Path(__file__).resolve().parents[2]


def source_root() -> Path:
    """The checkout sglx runs from: $SGLX_ROOT, else the folder above scripts/."""
    override = os.environ.get(ROOT_ENV)
    return Path(override) if override else _CHECKOUT


def images_dir() -> Path:
    """Where the arch profiles live: $SGLX_IMAGES_DIR, else `images/` of the checkout."""
    override = os.environ.get(IMAGES_DIR_ENV)
    if override:
        path = Path(override)
        if not path.is_dir():
            raise SglxError(
                f"{IMAGES_DIR_ENV}={override} is not a directory",
                hint=f"point it at the images/ folder that holds <arch>/{PROFILE_FILE}",
                code="environment",
            )
        return path
    path = source_root() / "images"
    if not path.is_dir():
        raise SglxError(
            f"no images/ folder found next to the sglx package ({path})",
            hint=f"set {IMAGES_DIR_ENV} to the folder that holds <arch>/{PROFILE_FILE}",
            code="environment",
        )
    return path


def ansible_dir(root: Path | None = None) -> Path:
    """The Ansible content (playbooks, roles, inventories) of `root` (default: the checkout)."""
    return (root or source_root()) / "ansible"


# Where a bundle carries the host-check suite (sglx.bundle.layout names it from here).
BUNDLE_HOST_CHECKS = "ansible/host-checks"


def host_checks_dir(root: Path | None = None) -> Path:
    """The host-check suite `sglx hosts check` runs and every bundle ships."""
    return (root or source_root()) / "hostchecks"


def bundle_host_checks_dir(bundle: Path) -> Path:
    """The host-check suite a bundle folder carries: what `sglx hosts check --bundle` runs, so a
    control node with sglx installed from a wheel (no checkout) checks with the bundle's own."""
    return bundle / BUNDLE_HOST_CHECKS

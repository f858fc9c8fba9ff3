"""The vendor's own sglang platform package that an sglx platform stands on (Kunlun's
sglang-kunlun): is it installed, and its general plugins run.

Images set SGLANG_PLATFORM to sglx's entry point, and sglang's `load_plugins()` then skips the
general plugins of every distribution that provides another platform (`_get_excluded_dists`,
sglang 0.5.23 srt/plugins/__init__.py). The vendor's hooks (its attention modules, KV pools,
communicator factory) would never register. sglx's own general plugin runs them instead, in
the same early moment of every process.
"""

from __future__ import annotations

import logging
from importlib.metadata import EntryPoint, PackageNotFoundError, distribution, entry_points

from sglx_core.profile.schema import VendorPlatform

logger = logging.getLogger(__name__)

PLATFORMS_GROUP = "sglang.srt.platforms"
PLUGINS_GROUP = "sglang.srt.plugins"


def _of(vendor: VendorPlatform, group: str) -> list[EntryPoint]:
    wanted = vendor.distribution.replace("_", "-").lower()
    return [
        ep
        for ep in entry_points(group=group)
        if ep.dist is not None and ep.dist.name.replace("_", "-").lower() == wanted
    ]


def missing(vendor: VendorPlatform) -> str | None:
    """Why the vendor platform cannot be stood on here, or None when it is installed."""
    try:
        version = distribution(vendor.distribution).version
    except PackageNotFoundError:
        return f"the vendor platform package {vendor.distribution} is not installed"
    names = [ep.name for ep in _of(vendor, PLATFORMS_GROUP)]
    if vendor.entry_point not in names:
        return (
            f"{vendor.distribution} {version} has no '{vendor.entry_point}' entry point in "
            f"{PLATFORMS_GROUP} (found: {', '.join(names) or 'none'})"
        )
    return None


def general_plugins(vendor: VendorPlatform) -> list[str]:
    """The vendor's general plugins, as `name = module:function`."""
    return [f"{ep.name} = {ep.value}" for ep in _of(vendor, PLUGINS_GROUP)]


def run_general_plugins(vendor: VendorPlatform) -> list[str]:
    """Run each of the vendor's general plugins once, as sglang would have; their names."""
    ran = []
    for ep in _of(vendor, PLUGINS_GROUP):
        ep.load()()
        logger.info("sglx: ran %s's general plugin %s (%s)", vendor.distribution, ep.name, ep.value)
        ran.append(ep.name)
    return ran

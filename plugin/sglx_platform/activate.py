"""Entry point of the `sglang.srt.platforms` group: decide whether an sglx platform serves.

sglang calls `activate()` in every process that touches `current_platform`. It must stay cheap
and side-effect free: read the baked profile and probe sysfs, import no torch, initialise no
device. It returns the platform class path, or None when the hardware is absent -- unless the
sglx platform was selected explicitly (SGLANG_PLATFORM), in which case a classified error names
what is missing, instead of sglang's generic "hardware not available?".
"""

from __future__ import annotations

import logging
import os

from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.profile.schema import DeviceNode
from sglx_core.serving.probe_root import PROBE_ROOT_ENV
from sglx_platform.failures import FailureClass, PlatformError
from sglx_platform.image_profile import PROFILE_ENV, baked_profile, profile_path
from sglx_platform.probe import ProbeResult, probe
from sglx_platform.vendor import missing

logger = logging.getLogger(__name__)

PLATFORM_CLASSES = {
    "cpu": "sglx_platform.platforms.cpu:SglxCpuPlatform",
    "rocm": "sglx_platform.platforms.rocm:SglxRocmPlatform",
    "kunlun": "sglx_platform.platforms.kunlun:SglxKunlunPlatform",
}


def activate() -> str | None:
    """The sglx platform class for this host, or None when its hardware is absent."""
    path = profile_path()
    explicit = os.environ.get("SGLANG_PLATFORM")
    if not path.is_file():
        if explicit == "sglx":
            raise PlatformError(
                FailureClass.PLUGIN_NOT_FOUND,
                f"SGLANG_PLATFORM=sglx but there is no sglx arch profile at {path}",
                f"run the sglx image for this host, or set {PROFILE_ENV} to an arch.yaml",
            )
        logger.debug("sglx: no arch profile at %s; not activating", path)
        return None
    try:
        profile = baked_profile()
    except SglxError as exc:
        raise PlatformError(
            FailureClass.CONFIG_REFUSED,
            f"the baked sglx profile is invalid: {exc.message}",
            exc.hint or "rebuild the image from a valid profile (sglx arch validate)",
        ) from None
    found = probe(profile)
    if found.present:
        _require_vendor(profile)
        logger.info(
            "sglx: %s platform for %s (%s)",
            profile.platform.family,
            profile.arch,
            ", ".join(f"{d.name}: {d.target}" for d in found.devices),
        )
        return PLATFORM_CLASSES[profile.platform.family]
    if explicit == profile.platform.entry_point:
        raise PlatformError(
            FailureClass.DEVICE_INIT_FAILED,
            f"SGLANG_PLATFORM={explicit} selects sglx for {profile.arch}, but {found.reason}",
            _missing_device_fix(profile.arch, found, profile.devices.nodes),
        )
    logger.debug("sglx: %s hardware not found: %s", profile.arch, found.reason)
    return None


def _require_vendor(profile: Profile) -> None:
    """The vendor platform the family's class subclasses must be importable before sglang
    imports that class; its absence is named, never an ImportError in sglang's log."""
    vendor = profile.platform.vendor
    why = missing(vendor) if vendor else None
    if vendor and why:
        raise PlatformError(
            FailureClass.PLUGIN_NOT_FOUND,
            f"the {profile.arch} platform stands on {vendor.distribution}'s, but {why}",
            f"build the image on a base that carries {vendor.distribution} (base.provides; "
            "sglx base load)",
        )


def _missing_device_fix(arch: str, found: ProbeResult, nodes: tuple[DeviceNode, ...]) -> str:
    if found.other:
        return f"this host's accelerators are not {arch}: run the sglx image built for them"
    return (
        f"pass the device nodes to the container ({device_flags(nodes)}), check the host driver "
        f"(sglx host checks), or set {PROBE_ROOT_ENV} when probing a copy of sysfs"
    )


def device_flags(nodes: tuple[DeviceNode, ...]) -> str:
    """`--device` flags for the required nodes (a glob such as /dev/xpu[0-9]* becomes xpuN)."""
    return " ".join(
        f"--device {node.path.replace('[0-9]*', 'N')}" for node in nodes if node.required
    )

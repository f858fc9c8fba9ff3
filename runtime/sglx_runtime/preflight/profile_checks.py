"""The baked profile loads, and sglang will find the sglx plugin in the serving environment."""

from __future__ import annotations

import os
from importlib.metadata import entry_points

from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_platform.failures import FailureClass
from sglx_platform.image_profile import PROFILE_ENV, baked_profile, profile_path
from sglx_platform.vendor import general_plugins, missing
from sglx_runtime.preflight.checks import Check, failed


def check_profile(checks: list[Check]) -> Profile | None:
    path = profile_path()
    if not path.is_file():
        checks.append(
            failed(
                "profile",
                f"no sglx arch profile at {path}",
                FailureClass.PLUGIN_NOT_FOUND,
                f"run the sglx image, or set {PROFILE_ENV} to an arch.yaml",
            )
        )
        return None
    try:
        profile = baked_profile()
    except SglxError as exc:
        checks.append(failed("profile", exc.message, FailureClass.CONFIG_REFUSED, exc.hint))
        return None
    checks.append(
        Check("profile", "pass", f"{profile.arch} ({profile.support.level}): {profile.description}")
    )
    checks.extend(Check("support", "warn", note) for note in profile.support.notes)
    return profile


def check_plugin(profile: Profile, checks: list[Check]) -> None:
    """Both entry points present, and SGLANG_PLATFORM selecting sglx (so a broken plugin stops
    the server instead of letting sglang fall back to another platform)."""
    name = profile.platform.entry_point
    platforms = {ep.name: ep.value for ep in entry_points(group="sglang.srt.platforms")}
    hooks = {ep.name: ep.value for ep in entry_points(group="sglang.srt.plugins")}
    if not platforms.get(name, "").startswith("sglx_platform"):
        checks.append(
            failed(
                "plugin",
                f"no '{name}' entry point of sglx-platform in sglang.srt.platforms "
                f"(found: {', '.join(platforms) or 'none'})",
                FailureClass.PLUGIN_NOT_FOUND,
                "install the sglx-platform wheel into the serving environment",
            )
        )
        return
    if not hooks.get(name, "").startswith("sglx_platform"):
        checks.append(
            failed(
                "plugin",
                f"no '{name}' entry point in sglang.srt.plugins",
                FailureClass.PLUGIN_NOT_FOUND,
                "reinstall the sglx-platform wheel (its metadata is incomplete)",
            )
        )
        return
    selected = os.environ.get("SGLANG_PLATFORM")
    if selected is None:
        checks.append(
            Check(
                "plugin",
                "warn",
                "SGLANG_PLATFORM is unset: a broken plugin would "
                f"let sglang fall back to another platform (set it to {name})",
            )
        )
    elif selected != name:
        checks.append(
            failed(
                "plugin",
                f"SGLANG_PLATFORM={selected} selects another platform plugin",
                FailureClass.PLUGIN_NOT_FOUND,
                f"set SGLANG_PLATFORM={name}",
            )
        )
    else:
        checks.append(Check("plugin", "pass", f"sglang.srt.platforms:{name} -> {platforms[name]}"))
    check_vendor(profile, checks)


def check_vendor(profile: Profile, checks: list[Check]) -> None:
    """The vendor platform the sglx platform subclasses is installed, with the general plugins
    that sglx runs for it (sglang skips them while SGLANG_PLATFORM selects sglx)."""
    vendor = profile.platform.vendor
    if vendor is None:
        return
    why = missing(vendor)
    if why:
        checks.append(
            failed(
                "vendor_platform",
                why,
                FailureClass.PLUGIN_NOT_FOUND,
                f"build the image on a base that carries {vendor.distribution} (base.provides)",
            )
        )
        return
    plugins = general_plugins(vendor)
    checks.append(
        Check(
            "vendor_platform",
            "pass",
            f"{vendor.distribution}'s '{vendor.entry_point}' platform, extended by sglx; its "
            f"general plugins, run by sglx: {', '.join(plugins) or 'none'}",
        )
    )

"""The base image the container was built on: which one, what it ships, and whether that is
what the profile expects.

The build leaves /etc/sglx/base.json (the base's ref and image id, and what it declared at build
time). Preflight reads the versions again in this container, the way upstream's images declare
them (pip metadata for sglang and torch, ROCm's version file or its pip SDK's metadata: see
sglx_core.base_probe), so a later change to the environment is caught too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sglx_core.base_facts import Fact, compare, missing_provided, vendor_release
from sglx_core.base_probe import facts as live_facts
from sglx_core.profile import Profile
from sglx_platform.failures import FailureClass
from sglx_platform.image_profile import profile_path
from sglx_runtime.preflight.checks import Check, failed

REPORT_NAME = "base.json"
MAX_REPORT_BYTES = 1 << 20


def report_path() -> Path:
    """Next to the baked profile (/etc/sglx/base.json in an image)."""
    return profile_path().parent / REPORT_NAME


def read_report(path: Path) -> dict[str, Any] | None:
    """The build's record of the base, or None when absent or unreadable (bounded)."""
    try:
        if path.stat().st_size > MAX_REPORT_BYTES:
            return None
        report = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def check_base(
    profile: Profile,
    checks: list[Check],
    *,
    probe: dict[str, Any] | None = None,
    report: dict[str, Any] | None = None,
) -> None:
    """One 'base' check (fail when sglang, torch, ROCm or Python differ from the profile;
    skipped outside an sglx image), plus a warning naming provided distributions the base
    lacks."""
    report = read_report(report_path()) if report is None else report
    if report is None:
        # Not an image sglx built (a host install, a test): there is no base to report.
        checks.append(Check("base", "skip", f"no build record at {report_path()}"))
        return
    probe = live_facts() if probe is None else probe
    ref = str(report.get("ref") or profile.base.ref)
    digest = str(report.get("digest") or "digest unknown")
    facts = compare(profile, probe)
    found = ", ".join(_shown(f) for f in facts)
    differ = [f for f in facts if f.matches is False]
    if differ:
        checks.append(
            failed(
                "base",
                f"{ref} ({digest}): " + "; ".join(_differs(f) for f in differ),
                FailureClass.CONFIG_REFUSED,
                f"run the image built on the base the profile names ({profile.base.obtain})",
            )
        )
    else:
        checks.append(Check("base", "pass", f"{ref} ({digest}): {found}, as the profile expects"))
    vendor = vendor_release(profile, probe)
    if vendor is not None:
        checks.append(
            Check("vendor release", "pass" if vendor.validated else "warn", vendor.message())
        )
    lacking = missing_provided(profile, probe)
    if lacking:
        checks.append(
            Check(
                "base provides",
                "warn",
                f"the base lacks {', '.join(lacking)}, which the profile's base.provides lists",
            )
        )


def _shown(fact: Fact) -> str:
    return f"{fact.name} {fact.found or 'none'}"


def _differs(fact: Fact) -> str:
    return f"{fact.name} is {fact.found or 'missing'}, the profile expects {fact.expected}"

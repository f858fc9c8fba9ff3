"""The serving environment against the profile: forbidden variables and the baked ones.

Reads `os.environ` and never changes it: whatever preflight sees is what the server gets.
"""

from __future__ import annotations

import os

from sglx_core.profile import Profile
from sglx_platform.failures import FailureClass
from sglx_runtime.preflight.checks import Check, failed


def check_env(profile: Profile, checks: list[Check]) -> None:
    for name, reason in profile.env_forbidden.items():
        if name in os.environ:
            checks.append(
                failed(
                    f"env {name}",
                    f"is set ({os.environ[name]}): {reason}",
                    FailureClass.CONFIG_REFUSED,
                    f"unset {name}",
                )
            )
    changed = [n for n, v in profile.env.items() if os.environ.get(n) != v]
    if changed:
        checks.append(
            Check(
                "env",
                "warn",
                f"{len(changed)} variable(s) differ from the profile: {', '.join(changed)}",
            )
        )
    else:
        checks.append(Check("env", "pass", f"{len(profile.env)} profile variables as baked"))


def probe_environment() -> dict[str, str]:
    """A copy of the environment for the probe child, without SGLANG_PLATFORM: importing
    sglang resolves the platform, and an explicit selection would turn a missing device (which
    the checks above already report) into an import failure there. A copy: the caller's own
    environment, which the server inherits, stays exactly as it is."""
    return {k: v for k, v in os.environ.items() if k != "SGLANG_PLATFORM"}

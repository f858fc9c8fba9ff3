"""Variables a switched-on feature needs at a minimum (the profile's env_floors).

The example that made it a rule: SGLANG_ROCM_USE_MULTI_STREAM=1 overlaps MoE experts on an
alternate stream, which serializes unless GPU_MAX_HW_QUEUES is at least 5 (HIP's default is 4,
and dense serving is tuned at 2). Reads os.environ: what preflight sees is what the server gets.
The rule itself is sglx_core.env_floors, the one the run spec (sglx.run_spec) raises the
server's environment with.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from sglx_core.env_floors import current, switched_on
from sglx_core.profile import Profile
from sglx_platform.failures import FailureClass
from sglx_runtime.preflight.checks import Check


def check_env_floors(
    profile: Profile, checks: list[Check], environ: Mapping[str, str] | None = None
) -> None:
    environ = os.environ if environ is None else environ
    for key, floor in profile.env_floors.items():
        if not switched_on(floor, environ):
            continue
        value = current(floor, environ)
        switched = " ".join(f"{n}={v}" for n, v in floor.when.items())
        if value is not None and value >= floor.minimum:
            checks.append(
                Check(
                    f"env {floor.name}", "pass", f"{value} with {switched} (needs {floor.minimum})"
                )
            )
            continue
        shown = environ.get(floor.name)
        now = f"is {shown}" if shown is not None else f"is unset (the runtime uses {floor.unset})"
        checks.append(
            Check(
                f"env {floor.name}",
                "fail" if floor.action == "refuse" else "warn",
                f"{now} while {switched}: {floor.reason} ({key})",
                FailureClass.CONFIG_REFUSED if floor.action == "refuse" else None,
                f"set {floor.name}={floor.minimum} for this server, or unset "
                f"{' '.join(floor.when)}",
            )
        )

"""Every preflight check in order, and the report they make.

Checks that read files run here in milliseconds; libraries, imports, the first device operation
and the server arguments run in one probe child (`child_checks`), which imports the serving stack
once. Nothing here changes this process's environment.
"""

from __future__ import annotations

from collections.abc import Sequence

from sglx_core.report import Finding, Result, Table
from sglx_platform.image_profile import profile_path
from sglx_runtime.preflight.base_check import check_base
from sglx_runtime.preflight.checks import Check
from sglx_runtime.preflight.child_checks import child_checks
from sglx_runtime.preflight.env_floors import check_env_floors
from sglx_runtime.preflight.environment import check_env
from sglx_runtime.preflight.hardware import check_arch, check_devices, check_interconnect
from sglx_runtime.preflight.libraries import required_libraries
from sglx_runtime.preflight.profile_checks import check_plugin, check_profile


def run(server_argv: Sequence[str] | None, *, device_init: bool, timeout_s: float) -> Result:
    """`server_argv` None: no server-args check; [] reports it as skipped."""
    checks: list[Check] = []
    profile = check_profile(checks)
    if profile is not None:
        check_plugin(profile, checks)
        present = check_arch(profile, checks)
        if present:
            check_interconnect(profile, checks)
        check_devices(profile, checks)
        check_env(profile, checks)
        check_env_floors(profile, checks)
        check_base(profile, checks)
        libraries = required_libraries(profile, checks)
        checks += child_checks(
            libraries,
            device_type=profile.platform.device_type if device_init and present else "",
            server_argv=server_argv,
            timeout_s=timeout_s,
        )
    return report(checks, profile.arch if profile else "?")


def report(checks: Sequence[Check], arch: str) -> Result:
    findings = tuple(
        Finding(
            code=c.failure.value if c.failure else "failed",
            message=f"{c.name}: {c.detail}",
            hint=c.fix,
        )
        for c in checks
        if c.status == "fail"
    )
    table = Table(
        ("check", "status", "class", "detail"),
        tuple(
            (c.name, c.status, c.failure.value if c.failure else "", _short(c.detail))
            for c in checks
        ),
        title=f"sglx preflight ({arch}, profile {profile_path()})",
    )
    verdict = (
        "preflight passed"
        if not findings
        else f"preflight failed: {len(findings)} check(s); fixes below"
    )
    return Result(
        command=("preflight",),
        data={"arch": arch, "checks": [c.to_json() for c in checks]},
        tables=(table,),
        lines=(verdict,),
        findings=findings,
    )


def _short(text: str, width: int = 100) -> str:
    """One table line; the findings below the table carry the full text."""
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 1] + "…"

"""The server arguments against the profile, with sglang's own parser (runs in the child).

sglang parses the arguments exactly as the server will; the profile's defaults and refusals
are planned on the result, as the sglx platform will apply them inside the server.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence

from sglx_platform.failures import FailureClass
from sglx_platform.image_profile import baked_profile
from sglx_runtime.preflight.checks import Check, failed


def check_server_args(argv: Sequence[str]) -> list[Check]:
    if not argv:
        return [Check("server args", "skip", "none given (pass them after --)")]
    from sglang.srt.server_args import prepare_server_args

    from sglx_platform.model_config import model_facts
    from sglx_platform.platforms.base import server_arg_defaults
    from sglx_platform.server_args import explicit_fields, plan, reads_model

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            args = prepare_server_args(list(argv))
    except SystemExit:
        reason = (said.getvalue().strip().splitlines() or ["(no message)"])[-1]
        return [
            failed(
                "server args",
                f"sglang rejected the arguments: {reason}",
                FailureClass.CONFIG_REFUSED,
                "fix the flags sglang names",
            )
        ]
    profile = baked_profile()
    defaults = server_arg_defaults()
    current = {name: getattr(args, name) for name in defaults if hasattr(args, name)}
    model = model_facts(getattr(args, "model_path", None)) if reads_model(profile) else {}
    decided = plan(profile, current, explicit_fields(current, defaults), model)
    checks = [
        failed(
            "server args",
            f"{refusal.field}={refusal.value!r}: {refusal.reason}",
            FailureClass.CONFIG_REFUSED,
            f"use {refusal.instead}" if refusal.instead else None,
        )
        for refusal in decided.refusals
    ]
    checks += [Check("server args", "warn", str(warning)) for warning in decided.warnings]
    if not decided.refusals:
        applied = ", ".join(f"{k}={v}" for k, v in decided.writes.items()) or "none"
        checks.append(Check("server args", "pass", f"accepted; profile defaults: {applied}"))
    return checks

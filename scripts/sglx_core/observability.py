"""Whether a server exposes metrics for the site's Prometheus, and where.

The arch profile says (`observability.metrics`, on unless a profile turns it off); a host says
otherwise with `SGLX_METRICS` in the server's environment (the sglang_service role sets it from
`sglang_service_metrics`), read as sglang reads a boolean variable. The server then runs with
sglang's `--enable-metrics`, and sglx's own series join sglang's at the same route
(sglx_platform.metrics). docs/reference/observability.md lists them.
"""

from __future__ import annotations

from collections.abc import Mapping

from sglx_core.env_bool import as_bool
from sglx_core.errors import SglxError
from sglx_core.profile import Profile

METRICS_ENV = "SGLX_METRICS"
FIELD = "enable_metrics"  # sglang's ServerArgs field (--enable-metrics)


def metrics_on(profile: Profile, environ: Mapping[str, str]) -> bool:
    """The profile's choice, unless the server's environment names another."""
    word = environ.get(METRICS_ENV, "")
    if not word:
        return profile.observability.metrics
    value = as_bool(word)
    if value is None:
        raise SglxError(
            f"{METRICS_ENV}={word!r} is neither on nor off",
            hint=f"set {METRICS_ENV} to 1 or 0 (true, false, yes, no), or unset it for the "
            f"{profile.arch} profile's choice",
            code="usage",
        )
    return value

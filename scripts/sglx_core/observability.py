"""Whether a server exposes metrics for the site's Prometheus, and where.

The arch profile says (`observability.metrics`, on unless a profile turns it off); a host says
otherwise with `SGLX_METRICS` in the server's environment (the sglang_service role sets it from
`sglang_service_metrics`), read as sglang reads a boolean variable. The server then runs with
sglang's `--enable-metrics`, and sglx's own series join sglang's at the same route
(sglx_platform.metrics). docs/reference/observability.md lists them.

What runs is known where it is installed, not in the image: each door that starts the server
(install.sh's printed line, `sglx bundle install`'s, the sglang_service unit) names the image id
and the bundle's digest in the server's environment (`deployment_env`), and the server's
`sglx_info` series carries them as labels (`deployment_labels`), so a site's Prometheus says
which bundle each host serves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sglx_core.digests import DIGEST
from sglx_core.env_bool import as_bool
from sglx_core.errors import SglxError
from sglx_core.profile import Profile

METRICS_ENV = "SGLX_METRICS"
FIELD = "enable_metrics"  # sglang's ServerArgs field (--enable-metrics)
# The deployment's identity in the server's environment: label -> variable.
DEPLOYMENT_ENV = {"image_id": "SGLX_IMAGE_ID", "bundle_digest": "SGLX_BUNDLE_DIGEST"}
_DIGEST = re.compile(DIGEST)


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


def deployment_env(image_id: str | None, bundle_digest: str | None) -> dict[str, str]:
    """The variables that name what runs, for the doors that start the server: only those
    known (an image started by hand names neither)."""
    values = {"image_id": image_id, "bundle_digest": bundle_digest}
    return {DEPLOYMENT_ENV[label]: value for label, value in values.items() if value}


def deployment_labels(environ: Mapping[str, str]) -> dict[str, str]:
    """`sglx_info`'s deployment labels, read from the server's environment: a digest
    (sha256: and 64 lowercase hex) or "" where the variable is unset or holds anything else,
    so a label holds one bounded value per deployment."""
    labels = {}
    for label, variable in DEPLOYMENT_ENV.items():
        value = environ.get(variable, "")
        labels[label] = value if _DIGEST.fullmatch(value) else ""
    return labels

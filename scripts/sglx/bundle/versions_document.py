"""meta/versions.json: what a bundle's image runs (sglang, sglx, the plugin, the runtime, the
kernels, the base, the weights, the lock and the golden numerics), read from the image's labels,
with this sglx's distributions where a label is missing."""

from __future__ import annotations

from importlib import metadata
from typing import Any

from sglx import __version__, image_labels
from sglx_core.profile import Profile


def versions(profile: Profile, labels: dict[str, str]) -> dict[str, Any]:
    def dist(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "unknown"

    return {
        "arch": profile.arch,
        "sglang": labels.get(image_labels.SGLANG_VERSION, profile.sglang.version),
        "sglx": labels.get(image_labels.VERSION, __version__),
        "plugin": dist("sglx-platform"),
        "runtime": dist("sglx-runtime"),
        "kernels": {
            "sglx-kernels": dist("sglx-kernels"),
            "triton": profile.kernels.triton,
            "serve": list(profile.kernels.serve),
        },
        "base": {
            "name": labels.get(image_labels.BASE_NAME, profile.base.ref),
            "digest": labels.get(image_labels.BASE_DIGEST, "unknown"),
        },
        "weights_digest": labels.get(image_labels.WEIGHTS_DIGEST, "unknown"),
        "lock_digest": labels.get(image_labels.LOCK_DIGEST, "unknown"),
        # The golden numerics the image carries (/etc/sglx/golden.json): what the serving gate
        # replays on every host.
        "golden_digest": labels.get(image_labels.GOLDEN_DIGEST, "none"),
    }

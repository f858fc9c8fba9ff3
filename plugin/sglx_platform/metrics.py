"""sglx's own series, served beside sglang's at the server's /metrics, without patching sglang.

sglang serves /metrics from prometheus_client's multiprocess collector over the folder
`PROMETHEUS_MULTIPROC_DIR` names; when the variable is set before the server starts, sglang and
every process it starts write there (sglang 0.5.23 srt/utils/common.py
set_prometheus_multiproc_dir). So can any other process that shares the variable:
`sglx-serve`, the server's parent, and the platform hooks running inside the server's
processes. `prepare` gives the server a fresh folder before it starts (a restarted container
keeps its /tmp: no stale values), and the functions below write sglx's series into it.

Every series has a few labels of bounded values (the arch, the serving profile, the model's
served name): never a request, a prompt or a path. docs/reference/observability.md lists them.
prometheus_client is imported only after the variable is set: it picks its multiprocess mode
at import.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client import Gauge

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
PREFIX = "sglx_"


def prepare() -> Path:
    """A fresh folder for the server's metrics, named in this process's environment (which the
    server inherits) and removed when this process exits; one the operator named is kept."""
    named = os.environ.get(MULTIPROC_ENV)
    if named:
        Path(named).mkdir(parents=True, exist_ok=True)
        return Path(named)
    folder = Path(tempfile.mkdtemp(prefix="sglx-metrics-"))
    os.environ[MULTIPROC_ENV] = str(folder)
    atexit.register(shutil.rmtree, folder, True)
    return folder


def enabled() -> bool:
    """Whether this process writes where a server's /metrics reads (prepare ran before it)."""
    return bool(os.environ.get(MULTIPROC_ENV))


def _gauge(name: str, documentation: str, labels: tuple[str, ...] = ()) -> Gauge:
    from prometheus_client import Gauge

    # registry=None: the value goes to the shared folder; nothing to register in this process
    return Gauge(name, documentation, labels, registry=None, multiprocess_mode="max")


def publish_start(
    *,
    arch: str,
    version: str,
    serving_profile: str,
    model: str,
    copied: int,
    present: int,
    deployment: Mapping[str, str],
) -> None:
    """What `sglx-serve` started: its info series (with the deployment's image id and bundle
    digest, sglx_core.observability.deployment_labels), the start time (a restart changes it)
    and the prebuilt Triton cache entries it put in place for the server's JIT cache."""
    if not enabled():
        return
    info = _gauge(
        PREFIX + "info",
        "The sglx build, serving choice and deployment of this server (value 1)",
        ("arch", "version", "serving_profile", "model", *deployment),
    )
    info.labels(arch, version, serving_profile, model, *deployment.values()).set(1)
    started = _gauge(PREFIX + "server_start_time_seconds", "When sglx-serve started the server")
    started.set(time.time())
    entries = _gauge(
        PREFIX + "prebuilt_triton_cache_entries",
        "Prebuilt Triton cache entries in the server's JIT cache at start: copied from the "
        "image, or already present from an earlier start",
        ("state",),
    )
    entries.labels("copied").set(copied)
    entries.labels("present").set(present)


def record_lock_wait(seconds: float) -> None:
    """How long a server process waited for the host's device-init lock at this start."""
    if not enabled():
        return
    waited = _gauge(
        PREFIX + "device_init_lock_wait_seconds",
        "The longest wait of this server's processes for the host's device-init lock",
    )
    waited.set(seconds)

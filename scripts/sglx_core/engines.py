"""The container engines sglx is tested on, and how an engine is named in reports.

An engine is its product (Docker or podman), its version and its image store: Docker's classic
store, or the containerd image store (`features.containerd-snapshotter` in daemon.json; the
default of a fresh Docker 29), which names images by their manifest digest
(sglx.image_identity) and keeps its own builds' layers compressed. The tested list is what the
suite runs (tests/integration/test_site_engines.py; docs/reference/engines.md); the host check
`container_engine` reports any other as a finding, naming this list.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# `docker info`'s DriverStatus on the containerd image store.
CONTAINERD_SNAPSHOTTER = "io.containerd.snapshotter.v1"

# A version as engines write it ("20.10.24", "28.5.2+dfsg1", "5.8.6"); anything else the API
# answers is shown as "?", never echoed into a report.
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+~-]{0,63}")

# (product, major.minor, store), as the suite runs them.
TESTED: tuple[tuple[str, str, str], ...] = (
    ("Docker", "20.10", "classic"),
    ("Docker", "26.1", "classic"),
    ("Docker", "28.5", "classic"),
    ("Docker", "28.5", "containerd"),
)


@dataclass(frozen=True)
class Engine:
    product: str  # "Docker" or "podman"
    version: str
    store: str  # "classic" or "containerd"

    @property
    def containerd_store(self) -> bool:
        return self.store == "containerd"

    @property
    def cli(self) -> str:
        """The command a start line names: podman's CLI takes docker's arguments."""
        return "podman" if self.product == "podman" else "docker"

    def describe(self) -> str:
        return f"{self.product} {self.version} ({self.store} image store)"

    def tested(self) -> bool:
        minor = ".".join(self.version.split(".")[:2])
        return (self.product, minor, self.store) in TESTED


def store_of(driver_status: Iterable[Any] | None) -> str:
    """The image store `docker info`'s DriverStatus ([[key, value], ...]) says; anything else
    the API answers is the classic store's absence of a snapshotter."""
    listed = driver_status if isinstance(driver_status, list | tuple) else ()
    pairs = {
        str(pair[0]): str(pair[1])
        for pair in listed
        if isinstance(pair, list | tuple) and len(pair) == 2
    }
    return "containerd" if pairs.get("driver-type") == CONTAINERD_SNAPSHOTTER else "classic"


def engine_from(version: Mapping[str, Any], driver_status: Iterable[Any] | None) -> Engine:
    """The engine from `docker version`'s Server part (its Version and Components: podman's
    Docker API names a `Podman Engine` component) and `docker info`'s DriverStatus."""
    components = version.get("Components")
    listed = components if isinstance(components, list | tuple) else ()
    names = {c.get("Name") for c in listed if isinstance(c, Mapping)}
    product = "podman" if "Podman Engine" in names else "Docker"
    number = version.get("Version")
    shown = number if isinstance(number, str) and _VERSION.fullmatch(number) else "?"
    return Engine(product, shown, store_of(driver_status))


def names_tested() -> str:
    """'Docker 20.10 (classic store), ...': what a finding about an untested engine names."""
    return ", ".join(f"{product} {minor} ({store} store)" for product, minor, store in TESTED)

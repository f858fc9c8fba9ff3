"""Fixtures for the e2e tests: the real engine and the cpu image, shared with the integration
layer (imported from its conftest, so one session builds them once)."""

from __future__ import annotations

from integration.conftest import (  # noqa: F401  (fixtures, found by name)
    cpu_base,
    cpu_bundle,
    cpu_image,
    cpu_wheelhouse,
    docker,
    no_leftover_images,
)

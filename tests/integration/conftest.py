"""Fixtures for tests that drive the real Docker engine.

Everything created carries the session's run id and is removed at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sglx.engine import docker_client


@pytest.fixture(scope="session")
def docker() -> Any:
    """The real engine; fails (does not skip) when none answers: `make test` starts one."""
    return docker_client()


@pytest.fixture(scope="session")
def cpu_base(docker: Any, run_id: str) -> Iterator[str]:
    """The cpu base image, debootstrapped from Debian by `sglx base build` (no registry)."""
    from sglx.cli import main

    tag = f"sglx-test/base-cpu:{run_id}"
    assert main(["base", "build", "--arch", "cpu", "--tag", tag]) == 0
    yield tag
    docker.images.remove(tag, force=True)

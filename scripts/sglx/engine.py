"""The Docker engine, reached through the Docker SDK for Python."""

from __future__ import annotations

from typing import Any

from sglx_core.errors import SglxError


def docker_client(timeout: int = 600) -> Any:
    """A connected `docker.DockerClient`, or an error that says how to get an engine."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=timeout)
        client.ping()
    except DockerException as exc:
        raise SglxError(
            f"no Docker engine answers ({exc.__class__.__name__}: {exc})",
            hint="run `make setup`, which installs and starts dockerd on a fresh machine, or "
            "start your engine and check DOCKER_HOST",
            code="environment",
        ) from None
    return client

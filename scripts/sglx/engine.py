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


def image_ids(client: Any) -> set[str]:
    """The ids of every image the engine holds, in one call. `client.images.list` would inspect
    each image after listing it, and fails outright when another client removes one meanwhile."""
    return {str(entry) for entry in client.api.images(all=True, quiet=True)}


def listed_images(client: Any) -> list[Any]:
    """Every image the engine holds, inspected; an image removed between the listing and its
    inspection (by another client of the same engine) is left out instead of failing the call."""
    from docker.errors import NotFound

    found = []
    for image_id in sorted(image_ids(client)):
        try:
            found.append(client.images.get(image_id))
        except NotFound:
            continue
    return found


def read_image_file(client: Any, image_id: str, path: str, max_bytes: int) -> bytes | None:
    """The bytes of the regular file `path` in an image, read from a container that is never
    started; None when it is absent, not a regular file, or larger than `max_bytes`."""
    import io
    import tarfile

    from docker.errors import DockerException

    container = client.api.create_container(
        image_id, command=["/sglx-read-never-runs"], network_disabled=True
    )
    try:
        stream, stat = client.api.get_archive(container["Id"], path)
        if int(stat.get("size", 0)) > max_bytes:
            return None
        data = bytearray()
        for chunk in stream:
            data += chunk
            if len(data) > max_bytes + (1 << 20):  # the tar adds headers only
                return None
        with tarfile.open(fileobj=io.BytesIO(bytes(data))) as tar:
            member = tar.next()
            if member is None or not member.isfile():
                return None
            handle = tar.extractfile(member)
            return handle.read() if handle is not None else None
    except (DockerException, tarfile.TarError):
        return None
    finally:
        client.api.remove_container(container["Id"], force=True)

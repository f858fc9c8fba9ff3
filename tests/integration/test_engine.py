"""The Docker engine works here for real: a locally debootstrapped base builds and runs."""

from __future__ import annotations

import contextlib
import io
from typing import Any

import pytest
from docker.errors import ImageNotFound

pytestmark = pytest.mark.docker


def test_debootstrapped_base_is_labelled_and_came_from_no_registry(
    docker: Any, cpu_base: str
) -> None:
    image = docker.images.get(cpu_base)
    labels = image.labels
    assert labels["io.sglx.arch"] == "cpu"
    assert labels["org.opencontainers.image.base.name"] == "debian:bookworm (debootstrap)"
    assert image.attrs["RepoDigests"] == []  # imported, never pulled
    assert "python3" in labels["io.sglx.base.packages"]


def test_an_image_built_from_the_base_runs_and_prints(
    docker: Any, cpu_base: str, run_id: str
) -> None:
    tag = f"sglx-test/engine-probe:{run_id}"
    dockerfile = (
        f"FROM {cpu_base}\n"
        "RUN echo built-offline > /etc/sglx-probe\n"
        'CMD ["python3", "-c", "import platform; print(open(\'/etc/sglx-probe\').read().strip(), '
        'platform.python_version())"]\n'
    )
    try:
        # network_mode none: the build must not need the network.
        docker.images.build(
            fileobj=io.BytesIO(dockerfile.encode()), tag=tag, rm=True, network_mode="none"
        )
        output = docker.containers.run(tag, remove=True, network_mode="none").decode()
    finally:
        docker.images.remove(tag, force=True)
    word, version = output.split()
    assert word == "built-offline"
    assert version.startswith("3.11.")


def test_listing_the_engine_survives_an_image_removed_meanwhile(docker: Any, run_id: str) -> None:
    """Another client of the same engine (a parallel test, a site's cleanup job) may remove an
    image between the listing and its inspection: the listing leaves it out instead of failing
    the command, which `docker.images.list` does (CI failed on it once, in `base load`)."""
    from helpers.bundles import import_tiny_image

    from sglx.engine import image_ids, listed_images

    tag = f"sglx-test/engine-listing:{run_id}"
    doomed = import_tiny_image(docker, tag, blob_bytes=1000)
    listing = docker.api.images

    def listing_then_a_removal(*args: Any, **kwargs: Any) -> Any:
        listed = listing(*args, **kwargs)
        docker.images.remove(doomed, force=True)
        return listed

    try:
        docker.api.images = listing_then_a_removal
        found = listed_images(docker)
    finally:
        docker.api.images = listing
        with contextlib.suppress(ImageNotFound):
            docker.images.remove(doomed, force=True)
    assert doomed not in {image.id for image in found}
    assert doomed not in image_ids(docker)
    assert {image.id for image in found} <= image_ids(docker)

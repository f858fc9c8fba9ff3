"""Fixtures for the tests that drive the real Docker engine, registered once for the whole
suite by tests/conftest.py (a conftest that imports them from another would register them a
second time: each session fixture, the cpu image build included, would then run twice).

Everything created carries the session's run id and is removed at the end of the session.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglx.engine import docker_client


@pytest.fixture(scope="session")
def docker() -> Iterator[Any]:
    """The real engine; fails (does not skip) when none answers: `make test` starts one.

    At the end of the session it removes the untagged images this session's builds left
    behind (the classic builder keeps each build's intermediate stages), and only those: ids
    seen before are kept."""
    client = docker_client()
    before = {image.id for image in client.images.list(all=True)}
    yield client
    for image in client.images.list(filters={"dangling": True}):
        if image.id not in before:
            with contextlib.suppress(Exception):
                client.images.remove(image.id)


@pytest.fixture(scope="session")
def cpu_base(docker: Any, run_id: str) -> Iterator[str]:
    """The cpu base image, debootstrapped from Debian by `sglx base build` (no registry)."""
    from sglx.cli import main

    tag = f"sglx-test/base-cpu:{run_id}"
    assert main(["base", "build", "--arch", "cpu", "--tag", tag]) == 0
    yield tag
    remove_images(docker, tag)


@pytest.fixture(scope="session")
def cpu_wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The cpu lock's wheels, fetched the way a connected builder does (`sglx wheels fetch`);
    3 GB, removed at the end of the session rather than left to pytest's temp rotation."""
    from sglx.cli import main

    folder = tmp_path_factory.mktemp("wheelhouse") / "cpu"
    assert main(["wheels", "fetch", "--arch", "cpu", "--dest", str(folder), "-q"]) == 0
    yield folder
    shutil.rmtree(folder.parent, ignore_errors=True)


def build(*args: str) -> dict[str, Any]:
    """`sglx image build --json ARGS` in-process; its data, asserting it succeeded."""
    from sglx.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["image", "build", "--json", "-q", *args])
    envelope = json.loads(out.getvalue())
    # Joined into one string: pytest shortens the repr of a list, which hid the engine's error.
    assert code == 0, "\n".join(f"{e['code']}: {e['message']}" for e in envelope["errors"])
    data: dict[str, Any] = envelope["data"]
    return data


@pytest.fixture(scope="session")
def cpu_image(docker: Any, run_id: str, request: pytest.FixtureRequest) -> Iterator[dict]:
    """The cpu serving image, built once per session by `sglx image build` (demo model).
    SGLX_TEST_CPU_IMAGE=REF reuses an image built from this tree instead (development only)."""
    reused = os.environ.get("SGLX_TEST_CPU_IMAGE")
    if reused:
        yield {"tag": reused, "payload_images_imported": []}
        return
    cpu_base = request.getfixturevalue("cpu_base")
    cpu_wheelhouse = request.getfixturevalue("cpu_wheelhouse")
    tag = f"sglx-test/cpu:{run_id}"
    data = build(
        "--arch", "cpu", "--base", cpu_base, "--wheelhouse", str(cpu_wheelhouse), "--tag", tag
    )
    yield data
    remove_images(docker, tag, *data["payload_images_imported"])


def labelled_copy(docker: Any, source: str, tag: str) -> str:
    """`source` plus one label: a new image id over the same layers (removing it, without
    pruning parents, leaves `source` and its build cache alone)."""
    context = io.BytesIO(f"FROM {source}\nLABEL io.sglx.test.copy={tag}\n".encode())
    image, _ = docker.images.build(fileobj=context, tag=tag, network_mode="none", rm=True)
    return str(image.id)


@pytest.fixture(scope="session")
def cpu_bundle(
    docker: Any, cpu_image: dict, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    """The bundle of a labelled copy of the cpu image, made once per session by `sglx bundle
    create` with the image scan (1 GiB chunks): test_bundle_cpu round-trips it, the e2e test
    rolls it out. `docker save` streams the full 6.4 GB archive either way."""
    from sglx.cli import main

    tag = f"sglx-test/bundle-cpu:{run_id}"
    image_id = labelled_copy(docker, cpu_image["tag"], tag)
    folder = tmp_path_factory.mktemp("cpu-bundle") / "bundle"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(folder),
                     "--chunk-size", "1GiB", "--json", "-q"])  # fmt: skip
    created = json.loads(out.getvalue())
    assert code == 0, created
    yield {"path": folder, "tag": tag, "image_id": image_id, "created": created["data"]}
    from docker.errors import ImageNotFound

    with contextlib.suppress(ImageNotFound):
        docker.images.remove(tag, noprune=True)
    shutil.rmtree(folder.parent, ignore_errors=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def remove_images(docker: Any, *tags: str) -> None:
    from docker.errors import ImageNotFound

    for tag in tags:
        with contextlib.suppress(ImageNotFound):
            docker.images.remove(tag, force=True)

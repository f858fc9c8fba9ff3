"""Fixtures for the tests that drive the real Docker engine, registered once for the whole
suite by tests/conftest.py (a conftest that imports them from another would register them a
second time: each session fixture, the cpu image build included, would then run twice).

The cpu base, wheelhouse, image and bundle are built once per run, by whichever process or
thread asks first (helpers/run_shared.py), and removed when the run ends. Everything created
carries the run's id. Their builders are plain functions as well, so that the e2e test can
start the chain in a thread and configure its hosts meanwhile; they run sglx as a child
process for that reason.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from helpers.child_env import child_environment
from helpers.run_shared import Made, note_engine_images, once
from sglx.engine import docker_client

SGLX = str(Path(sys.executable).parent / "sglx")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def docker(pytestconfig: pytest.Config) -> Any:
    """The real engine; fails (does not skip) when none answers: `make test` starts one.

    The untagged images this run's builds leave behind (the classic builder keeps each
    build's intermediate stages) are removed when the run ends, and only those: the ids the
    engine held when the run first used it are kept."""
    client = docker_client()
    note_engine_images(pytestconfig, client)
    return client


def sglx_json(*argv: str, **env: str) -> dict[str, Any]:
    """`sglx ARGV --json -q` as a child process (safe in a thread, unlike the CLI in-process,
    which swaps sys.stdout), with the suite's fixed environment plus `env` and its folder, never
    what a test running meanwhile patched (helpers/child_env.py); its data, asserting it
    succeeded."""
    command = [SGLX, *argv, "--json", "-q"]
    done = subprocess.run(
        command, capture_output=True, text=True, check=False, env=child_environment(**env),
        cwd=REPO,
    )  # fmt: skip
    try:
        envelope = json.loads(done.stdout)
    except json.JSONDecodeError:
        said = f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-3000:]}"
        raise AssertionError(said) from None
    # Joined into one string: pytest shortens the repr of a list, which hid the engine's error.
    errors = "\n".join(f"{e['code']}: {e['message']}" for e in envelope["errors"])
    assert done.returncode == 0, errors or done.stderr[-3000:]
    data: dict[str, Any] = envelope["data"]
    return data


def build_cpu_base(config: pytest.Config, run_id: str) -> str:
    """The cpu base image, debootstrapped from Debian by `sglx base build` (no registry)."""

    def make() -> Made:
        tag = f"sglx-test/base-cpu:{run_id}"
        sglx_json("base", "build", "--arch", "cpu", "--tag", tag)
        return Made(tag, images=[tag])

    return str(once(config, "cpu_base", make))


def fetch_cpu_wheelhouse(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cpu lock's wheels (3 GB), fetched the way a connected builder does (`sglx wheels
    fetch`), removed at the end of the run rather than left to pytest's temp rotation."""

    def make() -> Made:
        folder = tmp_path_factory.mktemp("wheelhouse") / "cpu"
        sglx_json("wheels", "fetch", "--arch", "cpu", "--dest", str(folder))
        return Made(str(folder), paths=[str(folder.parent)])

    return Path(once(config, "cpu_wheelhouse", make))


def build_cpu_image(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, run_id: str
) -> dict[str, Any]:
    """The cpu serving image, built once per run by `sglx image build` (demo model).
    SGLX_TEST_CPU_IMAGE=REF reuses an image built from this tree instead (development only)."""
    reused = os.environ.get("SGLX_TEST_CPU_IMAGE")
    if reused:
        return {"tag": reused, "payload_images_imported": []}

    def make() -> Made:
        # The wheel fetch (mostly download) runs beside the debootstrap (mostly dpkg).
        with ThreadPoolExecutor(max_workers=1) as pool:
            fetching = pool.submit(fetch_cpu_wheelhouse, config, tmp_path_factory)
            base = build_cpu_base(config, run_id)
            wheelhouse = fetching.result()
        tag = f"sglx-test/cpu:{run_id}"
        data = sglx_json(
            "image", "build", "--arch", "cpu", "--base", base, "--wheelhouse", str(wheelhouse),
            "--tag", tag,
        )  # fmt: skip
        return Made(data, images=[tag, *data["payload_images_imported"]])

    value: dict[str, Any] = once(config, "cpu_image", make)
    return value


def make_cpu_bundle(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, run_id: str
) -> dict[str, Any]:
    """The bundle of a labelled copy of the cpu image, made once per run by `sglx bundle
    create` (1 GiB chunks): test_bundle_cpu round-trips it, the e2e test rolls it out. `docker
    save` streams the full 6.4 GB archive either way. Made without the image scan (about two
    minutes on two cores), which would hold up the e2e's rollout: `scan_cpu_bundle` scans the
    same archive once, for the tests that read the scan, and test_bundle_tiny shows create's
    own scan."""

    def make() -> Made:
        source = build_cpu_image(config, tmp_path_factory, run_id)["tag"]
        tag = f"sglx-test/bundle-cpu:{run_id}"
        image_id = labelled_copy(source, tag)
        folder = tmp_path_factory.mktemp("cpu-bundle") / "bundle"
        created = sglx_json("bundle", "create", "--arch", "cpu", "--image", tag, "--out",
                            str(folder), "--chunk-size", "1GiB", "--no-scan")  # fmt: skip
        value = {"path": str(folder), "tag": tag, "image_id": image_id, "created": created}
        return Made(value, images=[tag], paths=[str(folder.parent)])

    value: dict[str, Any] = once(config, "cpu_bundle", make)
    return {**value, "path": Path(value["path"])}


def scan_cpu_bundle(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, run_id: str
) -> dict[str, Any]:
    """`sglx scan --bundle` of the session's cpu bundle (its chunks, layer for layer, with the
    cpu profile's rules), once per run: the whole envelope, findings included, and the SBOM it
    wrote from the same unpacked root (`data.sbom.path`)."""

    def make() -> Made:
        bundle = make_cpu_bundle(config, tmp_path_factory, run_id)["path"]
        sbom = tmp_path_factory.mktemp("cpu-bundle-sbom") / "sbom.cdx.json"
        command = [SGLX, "scan", "--bundle", str(bundle), "--sbom", str(sbom), "--json", "-q"]
        done = subprocess.run(
            command, capture_output=True, text=True, check=False, env=child_environment(), cwd=REPO
        )
        try:
            return Made(json.loads(done.stdout), paths=[str(sbom.parent)])
        except json.JSONDecodeError:
            raise AssertionError(
                f"{' '.join(command)}: exit {done.returncode}: {done.stderr[-3000:]}"
            ) from None

    value: dict[str, Any] = once(config, "cpu_bundle_scan", make)
    return value


@pytest.fixture(scope="session")
def cpu_bundle_scan(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> dict[str, Any]:
    return scan_cpu_bundle(pytestconfig, tmp_path_factory, run_id)


@pytest.fixture(scope="session")
def cpu_base(docker: Any, run_id: str, pytestconfig: pytest.Config) -> str:
    return build_cpu_base(pytestconfig, run_id)


@pytest.fixture(scope="session")
def cpu_wheelhouse(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Path:
    return fetch_cpu_wheelhouse(pytestconfig, tmp_path_factory)


def build(*args: str) -> dict[str, Any]:
    """`sglx image build ARGS`; its data, asserting it succeeded."""
    return sglx_json("image", "build", *args)


@pytest.fixture(scope="session")
def cpu_image(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> dict[str, Any]:
    return build_cpu_image(pytestconfig, tmp_path_factory, run_id)


def labelled_copy(source: str, tag: str) -> str:
    """`source` plus one label: a new image id over the same layers (removing it, without
    pruning parents, leaves `source` and its build cache alone)."""
    context = io.BytesIO(f"FROM {source}\nLABEL io.sglx.test.copy={tag}\n".encode())
    image, _ = docker_client().images.build(fileobj=context, tag=tag, network_mode="none", rm=True)
    return str(image.id)


@pytest.fixture(scope="session")
def cpu_bundle(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> dict[str, Any]:
    return make_cpu_bundle(pytestconfig, tmp_path_factory, run_id)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


_RESERVED: set[int] = set()


def reserved_port(span: int = 1) -> int:
    """The first of `span` consecutive ports free now and below the kernel's ephemeral range,
    for a server that stops and starts again while the suite runs (the e2e fleet's restarts,
    rollbacks and serving-group changes; a serving group's rendezvous and the ports sglang
    derives from it). `free_port()` gets the kernel's pick from that range, so no other test
    running meanwhile can take these ports while the server is down (CI-I: a rank's port was
    taken during such a restart, "[Errno 98] address already in use"). Each call in a run
    gives other ports."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for first in random.sample(range(max(1024, low - 8000), low - span), 400):
        ports = range(first, first + span)
        if _RESERVED.intersection(ports) or not all(_bindable(port) for port in ports):
            continue
        _RESERVED.update(ports)
        return first
    raise RuntimeError(f"no {span} free ports below the ephemeral range (from {low})")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def remove_images(docker: Any, *tags: str) -> None:
    from docker.errors import ImageNotFound

    for tag in tags:
        with contextlib.suppress(ImageNotFound):
            docker.images.remove(tag, force=True)


def has_image(docker: Any, ref: str) -> bool:
    """Whether the engine holds `ref` (an image id or a reference)."""
    from docker.errors import ImageNotFound

    try:
        docker.images.get(ref)
    except ImageNotFound:
        return False
    return True

"""The engines sites run, as stand-ins beside the suite's own Docker 20.10: Debian sid's
docker.io 28.5.2 with containerd 2.1.9, and its podman, and Debian trixie's docker.io 26.1.5
(a site on Debian 13 or an Ubuntu of its time), each run in a container of the suite's engine
(`--cap-add ALL --cap-drop SYS_RESOURCE`, seccomp and AppArmor unconfined: this machine
refuses `--privileged`), its storage in a volume, its API socket in a host folder, and no
network.

Each suite's engine image is debootstrapped from Debian's own packages once per run (about two
minutes, mostly downloads) and removed at the run's end (run_shared). An engine container runs
dockerd with the containerd image store on (`features.containerd-snapshotter`, the default of
a fresh Docker 29) or off (the classic store every Docker before 29 has), or podman's API
service; it is removed with its volume when its fixture ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from helpers.run_shared import Made, once

MIRROR = "http://deb.debian.org/debian"
DOCKER_PACKAGES = ("docker.io", "docker-cli", "containerd", "iptables", "tini", "ca-certificates")
# Debian suite -> what its engine image holds (both ship the CLI as docker-cli).
SUITES = {"sid": (*DOCKER_PACKAGES, "podman"), "trixie": DOCKER_PACKAGES}
SOCKET_DIR = "/run/sglx-engine"
START_TIMEOUT = 90.0


def engine_images(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, run_id: str
) -> dict[str, str]:
    """Each suite's engine image (SUITES), by suite: built beside the e2e
    (helpers.worker_schedule)."""
    return {suite: engine_image(config, tmp_path_factory, run_id, suite) for suite in SUITES}


def engine_image(
    config: pytest.Config, tmp_path_factory: pytest.TempPathFactory, run_id: str, suite: str
) -> str:
    """The tag of the run's engine image of a Debian `suite`, debootstrapped by the first
    process that asks (or $SGLX_TEST_ENGINE_IMAGE_<SUITE>, an image made so before, which the
    run leaves alone)."""
    given = os.environ.get(f"SGLX_TEST_ENGINE_IMAGE_{suite.upper()}")
    if given:
        return given

    def make() -> Made:
        root = tmp_path_factory.mktemp(f"engine-rootfs-{suite}") / "rootfs"
        tag = f"sglx-test/engine-{suite}:{run_id}"
        try:
            subprocess.run(
                ["debootstrap", "--variant=minbase", f"--include={','.join(SUITES[suite])}",
                 suite, str(root), MIRROR],
                check=True, capture_output=True, text=True,
            )  # fmt: skip
            shutil.rmtree(root / "var/cache/apt/archives", ignore_errors=True)
            tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
            subprocess.run(["docker", "import", "-", tag], stdin=tar.stdout, check=True,
                           capture_output=True)  # fmt: skip
            if tar.wait() != 0:
                raise RuntimeError("tar of the engine rootfs failed")
        except subprocess.CalledProcessError as exc:
            raise RuntimeError(f"{exc.cmd[0]} failed: {exc.stderr!s:.2000}") from None
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return Made(value=tag, images=[tag])

    return str(once(config, f"engine-{suite}", make))


# The engines the fixture runs, by test id: (Debian suite, kind), the kind being Docker on one
# image store or podman (its Docker-compatible API socket, `podman system service`, and its own
# CLI).
ENGINES: dict[str, tuple[str, str]] = {
    "containerd-store": ("sid", "containerd-store"),
    "classic-store": ("sid", "classic-store"),
    "podman": ("sid", "podman"),
    "docker-26": ("trixie", "classic-store"),
}
# The version each suite's dockerd reports.
DOCKER_VERSIONS = {"sid": "28.5.2+dfsg4", "trixie": "26.1.5+dfsg1"}
CONTAINERS_CONF = """[containers]
netns = "none"
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
"""


@dataclass(frozen=True)
class SiteEngine:
    """A running stand-in engine: `host` is its DOCKER_HOST (Docker's socket, or podman's
    Docker-compatible one); `cli` the command its own CLI answers to inside."""

    name: str
    kind: str
    suite: str
    host: str
    container: Any
    shared: Path  # a host folder mounted at the same path inside (bundles, records)

    @property
    def containerd_store(self) -> bool:
        return self.kind == "containerd-store"

    @property
    def cli(self) -> str:
        return "podman" if self.kind == "podman" else "docker"

    @property
    def docker_version(self) -> str:
        return DOCKER_VERSIONS[self.suite]

    def client(self) -> Any:
        import docker

        return docker.DockerClient(base_url=self.host, timeout=600)

    def sh(self, script: str, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        """`sh -c script` inside the engine's container, with its own CLI (its Docker's, or
        podman's, which install.sh takes with SGLX_ENGINE=podman)."""
        env = [f"DOCKER_HOST=unix://{SOCKET_DIR}/docker.sock", f"SGLX_ENGINE={self.cli}"]
        argv = ["docker", "exec", *(w for e in env for w in ("-e", e)), self.container.name,
                "sh", "-c", script, "sh", *args]  # fmt: skip
        return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=900)


@contextlib.contextmanager
def site_engine(
    docker: Any, images: dict[str, str], name: str, folder: Path, engine: str
) -> Iterator[SiteEngine]:
    """The engine `engine` (ENGINES) in a container of its suite's image (`images`, by suite)
    named `name`; `folder` holds its socket and the shared folder. Removed with its storage
    volume on exit."""
    suite, kind = ENGINES[engine]
    sockets = folder / "sockets"
    shared = folder / "shared"
    sockets.mkdir(parents=True)
    shared.mkdir()
    volumes = {
        str(sockets): {"bind": SOCKET_DIR, "mode": "rw"},
        str(shared): {"bind": str(shared), "mode": "rw"},
    }
    if kind == "podman":
        (folder / "containers.conf").write_text(CONTAINERS_CONF)
        volumes[str(folder / "containers.conf")] = {
            "bind": "/etc/containers/containers.conf",
            "mode": "ro",
        }
        socket = f"{SOCKET_DIR}/podman.sock"
        command = ["podman", "system", "service", "--time=0", f"unix://{socket}"]
    else:
        daemon = {
            "features": {"containerd-snapshotter": kind == "containerd-store"},
            "iptables": False,
            "ip6tables": False,
            "bridge": "none",
            "hosts": [f"unix://{SOCKET_DIR}/docker.sock"],
        }
        (folder / "daemon.json").write_text(json.dumps(daemon))
        volumes[str(folder / "daemon.json")] = {"bind": "/etc/docker/daemon.json", "mode": "ro"}
        socket = f"{SOCKET_DIR}/docker.sock"
        command = ["dockerd"]
    volume = docker.volumes.create(name=f"{name}-storage")
    # The engines' storage (/var/lib/docker, /var/lib/containerd, /var/lib/containers): the
    # overlay drivers cannot work on the container's own overlay root.
    volumes[volume.name] = {"bind": "/var/lib", "mode": "rw"}
    container = docker.containers.run(
        images[suite],
        ["/usr/bin/tini", "--", *command],
        name=name,
        detach=True,
        network_mode="none",
        cap_add=["ALL"],
        cap_drop=["SYS_RESOURCE"],
        security_opt=["seccomp=unconfined", "apparmor=unconfined"],
        volumes=volumes,
    )
    host = f"unix://{sockets}/{socket.rsplit('/', 1)[1]}"
    site = SiteEngine(name, kind, suite, host, container, shared)
    try:
        _wait_until_up(site)
        yield site
    finally:
        with contextlib.suppress(Exception):
            container.remove(force=True)
        with contextlib.suppress(Exception):
            volume.remove(force=True)


def _wait_until_up(engine: SiteEngine) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while True:
        driver = None
        with contextlib.suppress(Exception):
            client = engine.client()
            driver = dict(client.info().get("DriverStatus") or ())
            client.close()
        if driver is not None:
            on = driver.get("driver-type") == "io.containerd.snapshotter.v1"
            assert on == engine.containerd_store, f"{engine.name}: DriverStatus {driver}"
            return
        engine.container.reload()
        if engine.container.status != "running" or time.monotonic() > deadline:
            logs = engine.container.logs(tail=30).decode(errors="replace")
            raise AssertionError(
                f"{engine.name} did not come up ({engine.container.status}): {logs}"
            )
        time.sleep(0.5)

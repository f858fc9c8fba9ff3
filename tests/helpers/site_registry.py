"""The site registry (role sglx_registry) on this machine, for the tests: Debian's
docker-registry (bootstrap.sh installs it) configured by the role's entry point `main` on
localhost and run as the package's service (its init script here, where systemd is not PID 1;
the same `ansible.builtin.service` task starts the systemd unit on a host with systemd),
listening on 127.0.0.1 only, with its storage in a folder of its own.

The package's service reads one fixed file, /etc/docker/registry/config.yml: `site_registry`
keeps the file it found and puts it back, after stopping the service, when the test ends.
Also: `playbook` runs ansible-playbook on localhost (local connection) with the repository's
roles.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from helpers.ansible_play import ansible_playbook
from helpers.engine_fixtures import free_port

CONFIG = Path("/etc/docker/registry/config.yml")
SERVICE = "docker-registry"


def playbook(
    work: Path,
    plays: list[dict[str, Any]],
    extra: dict[str, Any],
    *args: str,
    hosts: dict[str, dict[str, Any]] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`plays` run by ansible-playbook, every host local (`hosts`: inventory names and their
    variables; localhost alone by default), `extra` as extra vars (JSON)."""
    return ansible_playbook(
        work, plays, hosts or {"localhost": {}}, "-c", "local", "-e", json.dumps(extra), *args
    )


def role_play(entry: str, hosts: str = "localhost", **play: Any) -> dict[str, Any]:
    """One play including `role` at `entry` (role sglx_registry unless `role=` says)."""
    role = play.pop("role", "sglx_registry")
    task = {"name": f"{role} {entry}",
            "ansible.builtin.include_role": {"name": role, "tasks_from": entry}}  # fmt: skip
    return {"name": f"{role} {entry}", "hosts": hosts, "gather_facts": False, "tasks": [task],
            **play}  # fmt: skip


@dataclass(frozen=True)
class SiteRegistry:
    address: str  # 127.0.0.1:PORT
    storage: Path
    work: Path

    @property
    def vars(self) -> dict[str, Any]:
        """The role's variables for this registry (main, seed, gc)."""
        return {
            "sglx_registry_listen": self.address,
            "sglx_registry_address": self.address,
            "sglx_registry_storage": str(self.storage),
            "sglx_registry_host": "localhost",
            "sglx_registry_install": False,
            "sglx_registry_docker": shutil.which("docker"),
        }

    def get(self, path: str, method: str = "GET") -> tuple[int, bytes, dict[str, str]]:
        accept = "application/vnd.docker.distribution.manifest.v2+json"
        request = urllib.request.Request(
            f"http://{self.address}{path}", method=method, headers={"Accept": accept}
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return answer.status, answer.read(), dict(answer.headers)
        except urllib.error.HTTPError as exc:
            return exc.code, b"", {}

    def blob_file(self, digest: str) -> Path:
        hexdigest = digest.split(":")[1]
        return self.storage / "docker/registry/v2/blobs/sha256" / hexdigest[:2] / hexdigest / "data"

    def blobs(self) -> set[str]:
        root = self.storage / "docker/registry/v2/blobs/sha256"
        return {"sha256:" + p.parent.name for p in root.glob("*/*/data")}


@contextlib.contextmanager
def site_registry(work: Path) -> Iterator[SiteRegistry]:
    """The package's registry set up by the role's `main` (then stopped, its config file put
    back and its storage removed). The storage is under /var/tmp: the service runs as the
    docker-registry user, which cannot enter pytest's private temporary folders."""
    storage = Path(tempfile.mkdtemp(prefix="sglx-test-registry-", dir="/var/tmp"))
    storage.chmod(0o755)
    kept = CONFIG.read_bytes() if CONFIG.is_file() else None
    registry = SiteRegistry(f"127.0.0.1:{free_port()}", storage / "storage", work)
    try:
        done = playbook(work, [role_play("main")], registry.vars)
        assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
        yield registry
    finally:
        subprocess.run(["service", SERVICE, "stop"], capture_output=True, check=False)
        if kept is not None:
            CONFIG.write_bytes(kept)
        shutil.rmtree(storage, ignore_errors=True)

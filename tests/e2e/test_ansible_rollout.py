"""Real ansible-playbook over SSH against two test hosts: site.yml, then rollout.yml with the
cpu bundle, idempotence, check mode, and a failed upgrade that is rolled back.

The hosts share this machine's engine (see helpers/test_hosts.py). Consequences the test
names: the image of a bundle is "already loaded" on every host once it is in the engine, so
the install step is checked by its verification report on each host (install.sh hashed every
file there) and by the image id each host's unit runs; and the hosts' configuration runs with
gfx942's variables on fixture device nodes while serving runs with the cpu bundle (no GPU).

The second bundle version is the cpu image plus one LABEL (`docker build`, seconds, no new
layer content), bundled like any image: that is the cheapest honest second version, since a
bundle always carries a full `docker save` of its image.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.server import http
from helpers.test_hosts import SshHost, build_host_image, recap, sh
from integration.conftest import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent


class Fleet:
    def __init__(self, work: Path, hosts: list[SshHost], key: Path, ports: dict[str, int]):
        self.work, self.hosts, self.key, self.ports = work, hosts, key, ports

    def inventory(self, name: str, arch: str, host_vars: dict[str, dict[str, Any]]) -> Path:
        folder = self.work / f"inventory-{name}"
        (folder / "group_vars" / "sglx").mkdir(parents=True)
        sh(str(BIN / "sglx"), "ansible", "vars", "--arch", arch, "--out",
           str(folder / "group_vars" / "sglx" / "sglx_profile.yml"))  # fmt: skip
        hosts = {}
        for host in self.hosts:
            hosts[host.name] = {
                "ansible_host": "127.0.0.1",
                "ansible_port": host.ssh_port,
                "ansible_user": "ops",
                "ansible_ssh_private_key_file": str(self.key),
                "ansible_ssh_common_args": "-o StrictHostKeyChecking=no "
                "-o UserKnownHostsFile=/dev/null",
                "container_runtime_engine_managed": False,
                "sglang_service_container": host.container + "-server",
                "sglang_service_host_port": self.ports[host.name],
                "sglang_service_publish_address": "127.0.0.1",
                "sglang_service_health_timeout": 420,
                **host_vars.get(host.name, {}),
            }
        (folder / "hosts.yml").write_text(yaml.safe_dump({"sglx": {"hosts": hosts}}))
        return folder / "hosts.yml"

    def play(self, inventory: Path, playbook: str, *extra: str) -> tuple[int, str]:
        done = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(inventory), playbook, *extra],
            cwd=ANSIBLE,
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
            env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
                 "ANSIBLE_NOCOLOR": "1",
                 # one line per message, so the test can match whole sentences
                 "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
        )  # fmt: skip
        log = self.work / f"{Path(playbook).stem}-{len(list(self.work.glob('*.log')))}.log"
        log.write_text(done.stdout + done.stderr)  # kept for reading a failure in full
        return done.returncode, done.stdout + done.stderr


@pytest.fixture(scope="module")
def fleet(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory, request: Any
) -> Iterator[Fleet]:
    """Two test hosts; SGLX_TEST_CPU_BASE=REF reuses a built cpu base (development only)."""
    base = os.environ.get("SGLX_TEST_CPU_BASE") or request.getfixturevalue("cpu_base")
    work = tmp_path_factory.mktemp("e2e-ansible")
    key = work / "id_ed25519"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key))
    image = f"sglx-test/ansible-host:{run_id}"
    hosts = [
        SshHost("host-a", f"sglx-test-{run_id}-a", free_port()),
        SshHost("host-b", f"sglx-test-{run_id}-b", free_port()),
    ]
    bundles = work / "bundles"
    bundles.mkdir()
    try:
        build_host_image(base, image, work, key.with_suffix(".pub"))
        for host in hosts:
            host.start(image, ["-v", f"{bundles}:{bundles}:ro"])
        yield Fleet(work, hosts, key, {h.name: free_port() for h in hosts})
    finally:
        for host in hosts:
            sh("docker", "rm", "-f", host.container + "-server", check=False)
            host.remove()
        sh("docker", "rmi", "-f", image, check=False)
        shutil.rmtree(bundles, ignore_errors=True)


def bundle(tag: str, out: Path) -> str:
    """`sglx bundle create` of `tag` into `out` (no scan: the integration tests scan it)."""
    sh(str(BIN / "sglx"), "bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(out),
       "--no-scan", "-q")  # fmt: skip
    return json.loads((out / "bundle.json").read_text())["image"]["id"]


def served(fleet: Fleet, host: SshHost) -> str:
    status, body = http(
        f"http://127.0.0.1:{fleet.ports[host.name]}/v1/completions",
        {"model": "demo", "prompt": "Hello", "max_tokens": 4, "temperature": 0},
        timeout=120,
    )
    assert status == 200, body
    return str(body["choices"][0]["text"])


def running_image(host: SshHost) -> str:
    return sh(
        "docker", "inspect", "--format", "{{.Image}}", host.container + "-server"
    ).stdout.strip()


# Two 6.4 GB bundles and five server starts on 2 cores: beyond the suite's 900 s default.
@pytest.mark.timeout(1800)
def test_site_rollout_idempotence_check_mode_and_rollback(
    fleet: Fleet, cpu_image: dict[str, Any], run_id: str
) -> None:
    a, b = fleet.hosts
    site_inv = fleet.inventory("site", "gfx942", {})

    # --- site.yml with gfx942's variables, on fixture device nodes ---
    code, out = fleet.play(site_inv, "site.yml")
    assert code == 0, out
    assert "reboot required for kernel arguments iommu=pt pci=realloc=off" in out
    # Either udev took the rules, or the role said per setting that it could not.
    assert ("NOT loaded: no udev daemon answers here" in out) or (
        "RUNNING HANDLER [accel_host : Apply udev rules]" in out
    )
    code, again = fleet.play(site_inv, "site.yml")
    assert code == 0, again
    assert {h: r["changed"] for h, r in recap(again).items()} == {"host-a": 0, "host-b": 0}, again
    code, checked = fleet.play(site_inv, "site.yml", "--check", "--diff")
    assert code == 0, checked
    assert {h: r["changed"] for h, r in recap(checked).items()} == {"host-a": 0, "host-b": 0}
    for host in (a, b):
        assert host.exec("stat -c '%G %a' /dev/kfd /dev/dri/renderD128").split("\n")[:2] == [
            "render 660", "render 660"]  # fmt: skip
        assert set(host.exec("id -nG sglx").split()) >= {"video", "render"}
        assert host.exec("cat /etc/udev/rules.d/70-sglx.rules").splitlines()[-2:] == [
            'KERNEL=="kfd", GROUP="render", MODE="0660"',
            'SUBSYSTEM=="drm", KERNEL=="renderD*", GROUP="render", MODE="0660"',
        ]
        assert "kernel.numa_balancing = 0" in host.exec("cat /etc/sysctl.d/90-sglx.conf")
        assert host.exec("tail -n1 /etc/default/grub.d/90-sglx.cfg").strip() == (
            'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} iommu=pt pci=realloc=off"'
        )
        assert host.exec("cat /var/lib/sglx/reboot-required").strip() == (
            "kernel command line lacks: iommu=pt pci=realloc=off"
        )
        # Not rebooted: the container's init (pid 1) is the one it started with.
        assert sh("docker", "inspect", "--format", "{{.RestartCount}} {{.State.Running}}",
                  host.container).stdout.split() == ["0", "true"]  # fmt: skip
        assert "GPU_MAX_HW_QUEUES=2" in host.exec("cat /etc/sglx/accel.env")
        assert "sglx hard memlock unlimited" in host.exec("cat /etc/security/limits.d/90-sglx.conf")

    # --- rollout.yml of the cpu bundle ---
    v1 = fleet.work / "bundles" / "v1"
    v1_id = bundle(cpu_image["tag"], v1)
    roll_inv = fleet.inventory("roll", "cpu", {})
    code, out = fleet.play(roll_inv, "rollout.yml", "-e", f"sglx_bundle_path={v1}")
    assert code == 0, out
    for host in (a, b):
        assert served(fleet, host)
        assert running_image(host) == v1_id
        log = host.exec("cat /var/lib/sglx/bundles/*.log")
        assert "all files match" in log  # install.sh verified every file on this host
        # The shared engine had the image already, so neither host loaded it again.
        assert "the engine already has image" in log
        env = json.loads(sh("docker", "inspect", "--format", "{{json .Config.Env}}",
                            host.container + "-server").stdout)  # fmt: skip
        assert {"GPU_MAX_HW_QUEUES=2", "SGLANG_PLATFORM=sglx", "HF_HUB_OFFLINE=1"} <= set(env)
    code, again = fleet.play(roll_inv, "rollout.yml", "-e", f"sglx_bundle_path={v1}")
    assert code == 0, again
    assert {h: r["changed"] for h, r in recap(again).items()} == {"host-a": 0, "host-b": 0}, again
    v1_digest = "sha256:" + sh("sha256sum", str(v1 / "bundle.json")).stdout.split()[0]
    assert f"host-a: unchanged: runs bundle {v1_digest}" in again

    # --- a second version; host-b's model is broken, so its health gate fails ---
    v2_tag = f"sglx-test/cpu-v2:{run_id}"
    context = fleet.work / "v2"
    context.mkdir()
    (context / "Dockerfile").write_text(f"FROM {cpu_image['tag']}\nLABEL io.sglx.test.version=2\n")
    sh("docker", "build", "-q", "-t", v2_tag, str(context))
    v2 = fleet.work / "bundles" / "v2"
    try:
        v2_id = bundle(v2_tag, v2)
        b.exec("mkdir -p /srv/broken-model && echo '{not json' >/srv/broken-model/config.json")
        broken = {"host-b": {"sglang_service_model_dir": "/srv/broken-model"}}
        code, out = fleet.play(fleet.inventory("v2", "cpu", broken), "rollout.yml",
                               "-e", f"sglx_bundle_path={v2}")  # fmt: skip
        assert code != 0, out
        v2_digest = "sha256:" + sh("sha256sum", str(v2 / "bundle.json")).stdout.split()[0]
        assert f"host-a: updated: runs bundle {v2_digest}" in out
        assert f"host-b: rolled_back: runs bundle {v1_digest}" in out
        assert "restarted" in out and "the server crashes on start" in out
        assert "rollout stopped: host-b failed the health gate" in out
        assert running_image(a) == v2_id
        assert running_image(b) == v1_id
        assert served(fleet, a) and served(fleet, b)
    finally:
        sh("docker", "rmi", v2_tag, check=False)
        shutil.rmtree(v2, ignore_errors=True)

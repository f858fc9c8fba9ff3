"""Test hosts for the Ansible e2e tests: containers that run systemd and sshd.

Each host is a container on the host network whose sshd listens on its own 127.0.0.1 port
(nothing else is reached). It shares this machine's Docker engine through its socket, so the
server containers it starts are siblings on that engine. Fixture device nodes are made with
mknod in the real kfd/dri layout (/dev/kfd, /dev/dri/renderD128, char majors 235 and 226).

A bind mount's source is a path of this machine, whatever host asks the engine for it: every
test host's server mounts this machine's one device-init lock folder (/run/lock/sglx), so the
hosts bring their devices up one at a time, which two machines never do. On cpu the lock is
held only for a one-element tensor op, so it costs no time here.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.child_env import child_environment

# What a test host is built from, on top of the debootstrapped Debian base. Debian's node
# exporter, as a site runs it, is left disabled: both hosts share this machine's network, so
# each is started on a port of its own (SshHost.serve_node_exporter).
DOCKERFILE = """FROM {base}
RUN apt-get update -qq \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      systemd systemd-sysv openssh-server sudo python3 prometheus-node-exporter >/dev/null \\
 && rm -rf /var/lib/apt/lists/* \\
 && systemctl disable prometheus-node-exporter.service
# The docker CLI only (the engine is this machine's, reached through its socket).
COPY docker /usr/bin/docker
COPY authorized_keys /home/ops/.ssh/authorized_keys
RUN useradd -m -s /bin/bash ops \\
 && chown -R ops:ops /home/ops && chmod 700 /home/ops/.ssh \\
 && echo 'ops ALL=(ALL) NOPASSWD:ALL' >/etc/sudoers.d/ops && chmod 0440 /etc/sudoers.d/ops \\
 && printf 'ListenAddress 127.0.0.1\\nPasswordAuthentication no\\n' \\
      >/etc/ssh/sshd_config.d/10-sglx-test.conf \\
 && systemctl disable ssh.service \\
 && systemctl mask getty@tty1.service console-getty.service systemd-logind.service
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
"""

RUN_FLAGS = [
    "--network", "host",
    "--cap-add", "SYS_ADMIN",
    "--security-opt", "seccomp=unconfined",
    "--cgroupns=host",
    "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
    "--tmpfs", "/run",
    "--tmpfs", "/run/lock",
    "-v", "/var/run/docker.sock:/run/docker.sock",
]  # fmt: skip

_RECAP = re.compile(
    r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M
)


def sh(*argv: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """`argv` with the suite's fixed environment (it runs from threads too: child_env.py)."""
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=child_environment(),
    )
    if check and done.returncode != 0:
        raise AssertionError(f"{argv} failed ({done.returncode}): {done.stdout}{done.stderr}")
    return done


def build_host_image(base: str, tag: str, work: Path, public_key: Path) -> None:
    context = work / "host-image"
    context.mkdir()
    (context / "Dockerfile").write_text(DOCKERFILE.format(base=base))
    docker_cli = shutil.which("docker")
    assert docker_cli, "the docker CLI is needed to build the test hosts"
    shutil.copy(docker_cli, context / "docker")
    shutil.copy(public_key, context / "authorized_keys")
    sh("docker", "build", "-q", "-t", tag, str(context))
    shutil.rmtree(context)


@dataclass(frozen=True)
class SshHost:
    name: str
    container: str
    ssh_port: int

    def exec(self, command: str, check: bool = True) -> str:
        return sh("docker", "exec", self.container, "sh", "-c", command, check=check).stdout

    def start(self, image: str, extra: list[str]) -> None:
        sh("docker", "run", "-d", "--name", self.container, *RUN_FLAGS, *extra, image)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            state = self.exec("systemctl is-system-running || true", check=False).strip()
            if state in {"running", "degraded"}:
                break
            time.sleep(1)
        else:
            raise AssertionError(f"{self.container}: systemd did not come up ({state})")
        self.exec(
            f"printf 'Port {self.ssh_port}\\n' >/etc/ssh/sshd_config.d/20-port.conf"
            " && systemctl start ssh.service"
        )
        # Fixture nodes in the real layout: kfd (a dynamic major, 235 here) and DRM's major 226.
        self.exec(
            "mknod -m 0666 /dev/kfd c 235 0 && mkdir -p /dev/dri"
            " && mknod -m 0666 /dev/dri/renderD128 c 226 128"
        )
        # A fixture driver: this machine loads no amdgpu, so /sys/module/amdgpu/version is
        # absent and the role and the checks ask modinfo (first in sudo's secure_path), which
        # answers as an installed amdgpu-dkms 6.16.6 (AMD GPU Driver 30.20.1) does.
        self.exec(
            "printf '%s\\n' '#!/bin/sh' '[ \"$*\" = \"-F version amdgpu\" ] || exit 1'"
            " 'echo 6.16.6' >/usr/local/sbin/modinfo && chmod 0755 /usr/local/sbin/modinfo"
        )

    def serve_node_exporter(self, port: int) -> None:
        """Debian's node exporter on 127.0.0.1:`port`, its textfile collector alone reading the
        package's folder (/var/lib/prometheus/node-exporter: the gate timer's default)."""
        args = (f"--web.listen-address=127.0.0.1:{port} --collector.disable-defaults "
                "--collector.textfile")  # fmt: skip
        self.exec(f"printf 'ARGS=\"%s\"\\n' '{args}' >/etc/default/prometheus-node-exporter"
                  " && systemctl start prometheus-node-exporter")  # fmt: skip

    def remove(self) -> None:
        sh("docker", "rm", "-f", self.container, check=False)


def recap(output: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP counts per host: {'host-a': {'ok': 9, 'changed': 0, ...}}."""
    return {
        m.group(1): {
            "ok": int(m.group(2)),
            "changed": int(m.group(3)),
            "unreachable": int(m.group(4)),
            "failed": int(m.group(5)),
        }
        for m in _RECAP.finditer(output)
    }

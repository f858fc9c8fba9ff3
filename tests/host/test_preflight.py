"""Preflight host checks: a host is ready for a rollout (they run again in acceptance).

Every expectation comes from the arch profile (through facts.HostFacts): an arch with no
device nodes, kernel arguments or sysctls has nothing to check there, and says so.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest
from facts import HostFacts
from probes import bundle_manifest, container_inspect, docker, image_arch, problem, read_json

pytestmark = pytest.mark.preflight

SITE = "run site.yml for this host"


def _nodes(host: Any, folder: str, name: str) -> list[tuple[str, str, str, str]]:
    """(path, file type, group, octal mode) of the entries of `folder` matching glob `name`."""
    found = host.run(
        f"find {shlex.quote(folder)} -maxdepth 1 -name {shlex.quote(name)} "
        "-exec stat -c '%n|%F|%G|%a' {} +"
    )
    return [tuple(line.split("|")) for line in found.stdout.splitlines() if line]  # type: ignore[misc]


def test_device_nodes(host: Any, facts: HostFacts) -> None:
    """The profile's device nodes exist, with the group and mode its udev rules give them."""
    nodes = facts["accel_host_device_nodes"]
    if not nodes:
        pytest.skip(f"the {facts.arch} profile has no device nodes")
    wrong = []
    for node in nodes:
        path = Path(node["path"])
        present = _nodes(host, str(path.parent), path.name)
        kind = "directory" if node["kind"] == "dir" else "character special file"
        if node["required"] and not any(found[1] == kind for found in present):
            wrong.append(f"{node['path']} is missing ({node['purpose']})")
    for folder in facts["accel_host_node_dirs"]:
        for rule in facts["accel_host_node_modes"]:
            for path, _, group, mode in _nodes(host, folder, rule["name"]):
                want_group, want_mode = rule.get("group"), rule.get("mode")
                if want_group and group != want_group:
                    wrong.append(f"{path} has group {group}, not {want_group}")
                if want_mode and int(mode, 8) != int(want_mode, 8):
                    wrong.append(f"{path} has mode {int(mode, 8):04o}, not {want_mode}")
    if wrong:
        problem(
            "; ".join(wrong),
            f"load the accelerator driver if a node is missing, else {SITE} (udev rules)",
        )


def test_service_user_groups(host: Any, facts: HostFacts) -> None:
    groups = facts["accel_host_device_groups"]
    if not groups:
        pytest.skip(f"the {facts.arch} profile needs no device groups")
    user = facts["accel_host_service_user"]
    if not host.user(user).exists:
        problem(f"service user {user} does not exist", SITE)
    missing = sorted(set(groups) - set(host.user(user).groups))
    if missing:
        problem(f"service user {user} is not in {', '.join(missing)}", SITE)


def test_kernel_command_line(host: Any, facts: HostFacts) -> None:
    wanted = facts["accel_host_kernel_cmdline"]
    if not wanted:
        pytest.skip(f"the {facts.arch} profile sets no kernel arguments")
    running = host.file("/proc/cmdline").content_string.split()
    missing = [arg for arg in wanted if arg not in running]
    if not missing:
        return
    marker = host.file(f"{facts.state_dir}/reboot-required")
    if marker.exists:
        pytest.xfail(
            f"reboot pending: the running kernel lacks {' '.join(missing)} ({marker.path}: "
            f"{marker.content_string.strip()}); reboot the host, or run site.yml with "
            "sglx_reboot_ok=true"
        )
    problem(f"the running kernel lacks {' '.join(missing)} and no reboot is recorded", SITE)


def _proc_sys_read_only(host: Any) -> bool:
    for line in host.file("/proc/self/mounts").content_string.splitlines():
        fields = line.split()
        if len(fields) > 3 and fields[1] == "/proc/sys":
            return "ro" in fields[3].split(",")
    return False


def test_sysctl(host: Any, facts: HostFacts) -> None:
    wanted = facts["accel_host_sysctl"]
    if not wanted:
        pytest.skip(f"the {facts.arch} profile sets no sysctl")
    persisted = host.file(facts["accel_host_sysctl_file"])
    text = persisted.content_string if persisted.exists else ""
    lines = {line.replace(" ", "") for line in text.splitlines()}
    unpersisted = [f"{k}={v}" for k, v in wanted.items() if f"{k}={v}" not in lines]
    if unpersisted:
        problem(f"{persisted.path} does not persist {', '.join(unpersisted)}", SITE)
    live = {k: host.run(f"sysctl -n {shlex.quote(k)}").stdout.strip() for k in wanted}
    differ = [f"{k} is {live[k]}, not {v}" for k, v in wanted.items() if live[k] != str(v)]
    if not differ:
        return
    if _proc_sys_read_only(host):
        pytest.xfail(
            f"persisted in {persisted.path} but not in effect: {'; '.join(differ)}. /proc/sys is "
            "read-only on this host (a container shares its machine's kernel): set it there"
        )
    problem("; ".join(differ), f"sysctl --system (or {SITE})")


def test_service_environment_file(host: Any, facts: HostFacts) -> None:
    """The host-tuning variables (GPU_MAX_HW_QUEUES) the unit hands the server."""
    wanted = facts["accel_host_service_env"]
    if not wanted:
        pytest.skip(f"the {facts.arch} profile sets no host-tuning variable")
    file = host.file(facts["accel_host_env_file"])
    have = dict(
        line.split("=", 1)
        for line in (file.content_string if file.exists else "").splitlines()
        if "=" in line and not line.startswith("#")
    )
    wrong = [
        f"{k}={have.get(k, '(unset)')}, not {v}" for k, v in wanted.items() if have.get(k) != str(v)
    ]
    if wrong:
        problem(f"{file.path}: {'; '.join(wrong)}", SITE)


def test_container_engine(host: Any) -> None:
    done = docker(host, "version", "--format", "{{.Server.Version}}")
    if done.rc != 0:
        problem(
            f"the container engine does not answer ({(done.stderr or done.stdout).strip()[:160]})",
            "start it (systemctl start docker), or run site.yml (container_runtime)",
        )


def _free_bytes(host: Any, path: str) -> int:
    done = host.run(f"df -P -B1 {shlex.quote(path)} | tail -n1")
    return int(done.stdout.split()[3])


def _existing_parent(host: Any, path: str) -> str:
    while path not in ("", "/") and not host.file(path).exists:
        path = str(Path(path).parent)
    return path or "/"


def test_disk_covers_bundle(host: Any, facts: HostFacts, bundle_dir: Path | None) -> None:
    """The bundle's folder and the engine's data root have room for what is not there yet."""
    if bundle_dir is None:
        pytest.skip("no bundle given (--bundle DIR): nothing to size")
    manifest, _ = bundle_manifest(bundle_dir)
    target = str(facts.vars.get("sglx_bundle_path") or f"/srv/sglx/bundles/{bundle_dir.name}")
    needs: dict[str, int] = {}
    if not host.file(f"{target}/bundle.json").exists:
        where = _existing_parent(host, target)
        needs[where] = needs.get(where, 0) + sum(f["size"] for f in manifest["files"])
    if docker(host, "image", "inspect", manifest["image"]["id"]).rc != 0:
        root = (
            docker(host, "info", "--format", "{{.DockerRootDir}}").stdout.strip()
            or "/var/lib/docker"
        )
        needs[root] = needs.get(root, 0) + int(manifest["image"]["size"])
    short = [
        f"{path} has {free / 2**30:.1f} GiB free, needs {need / 2**30:.1f} GiB"
        for path, need in needs.items()
        if (free := _free_bytes(host, path)) < need
    ]
    if short:
        problem("; ".join(short), "free space there (sglx image prune, docker image prune)")


def _version_floor(host: Any, facts: HostFacts, key: str) -> None:
    floor = facts[key]
    if not floor.get("min_version"):
        pytest.skip(f"the {facts.arch} profile pins no minimum ({floor.get('note') or 'none'})")
    file = host.file(floor["version_file"])
    if not file.exists:
        problem(
            f"{floor['version_file']} is missing: the driver is not loaded",
            "load the driver, or install it",
        )
    found = file.content_string.strip()
    from packaging.version import InvalidVersion, Version

    try:
        low = Version(found) < Version(floor["min_version"])
    except InvalidVersion:
        problem(f"{file.path} reads {found!r}, not a version", "check the driver installation")
    if low:
        problem(
            f"{file.path} is {found}, below the minimum {floor['min_version']}",
            floor.get("note") or "upgrade it",
        )


def test_driver_minimum(host: Any, facts: HostFacts) -> None:
    _version_floor(host, facts, "accel_host_driver")


def test_firmware_minimum(host: Any, facts: HostFacts) -> None:
    _version_floor(host, facts, "accel_host_firmware")


def _image_on_host(host: Any, facts: HostFacts, bundle_dir: Path | None) -> str:
    """The bundle's image (it must be for this arch), else the deployed one if it is; skips
    when neither is on the host yet."""
    if bundle_dir is not None:
        manifest = bundle_manifest(bundle_dir)[0]
        if manifest["arch"] != facts.arch:
            problem(
                f"the bundle is for arch {manifest['arch']}, this host is {facts.arch}",
                "check the bundle against the inventory group",
            )
        image = str(manifest["image"]["id"])
        if image_arch(host, image) is None:
            pytest.skip("the bundle's image is not on this host yet (the rollout loads it)")
        return image
    image = str(
        (read_json(host, str(facts["sglang_service_state_file"])) or {}).get("image_id", "")
    )
    arch = image_arch(host, image) if image else None
    if arch is None:
        pytest.skip("no sglx image on this host yet (nothing to run sglx-preflight in)")
    if arch != facts.arch:
        pytest.skip(
            f"the image deployed here is a {arch} image, not {facts.arch} (acceptance "
            "checks what runs; --bundle names the image to try)"
        )
    return image


def _verdict_of_running_server(host: Any, facts: HostFacts) -> str | None:
    """The verdict sglx-serve's own preflight printed in the running server's log: it runs on
    this host, in the image, with the service's devices and environment, at every start (and
    stops the server when it fails). None when no server runs or it has no verdict yet."""
    inspect = container_inspect(host, facts)
    if inspect is None or not inspect["State"]["Running"]:
        return None
    verdicts = "grep -m1 -E '^preflight (passed|failed)'"
    done = host.run(f"docker logs {shlex.quote(facts.container)} 2>&1 | {verdicts}")
    return done.stdout.strip() or None


def test_image_preflight(
    host: Any, facts: HostFacts, bundle_dir: Path | None, request: pytest.FixtureRequest
) -> None:
    """sglx-preflight in the image, with the service's devices and groups: device init and
    configuration on this host. In acceptance, the running server's own preflight answers
    (no second container); before a rollout, or with no verdict yet, a fresh run does."""
    if request.config.getoption("--sglx-mode") == "acceptance":
        verdict = _verdict_of_running_server(host, facts)
        if verdict == "preflight passed":
            return
    image = _image_on_host(host, facts, bundle_dir)
    args = ["run", "--rm", "--network", "none", "--entrypoint", "sglx-preflight"]
    for device in facts["sglang_service_devices"]:
        for path in host.run(f"ls -d {device['path']} 2>/dev/null").stdout.split():
            args += ["--device", path]
    for group in facts["sglang_service_groups"]:
        gid = host.group(group).gid if host.group(group).exists else group
        args += ["--group-add", str(gid)]
    env_file = facts["accel_host_env_file"]
    if host.file(env_file).exists:
        args += ["--env-file", env_file]
    done = docker(host, *args, image, "--json")
    try:
        report = json.loads(done.stdout)
    except ValueError:
        problem(
            f"sglx-preflight in {image[:19]} did not answer (exit {done.rc}): "
            f"{(done.stderr or done.stdout).strip()[-200:]}",
            "see the image's sglx-preflight --debug",
        )
    if done.rc != 0:
        failed = [
            f"{c.get('check')}: {c.get('detail', '')} ({c.get('fix') or 'no fix named'})"
            for c in report.get("data", {}).get("checks", [])
            if c.get("status") == "fail"
        ]
        problem(
            f"sglx-preflight in {image[:19]} fails: {'; '.join(failed) or report.get('errors')}",
            "fix what it names (docs/reference/preflight.md)",
        )

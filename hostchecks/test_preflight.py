"""Preflight host checks: a host is ready for a rollout (they run again in acceptance).

Every expectation comes from the arch profile (through facts.HostFacts): an arch with no
device nodes, kernel arguments or sysctls has nothing to check there, and says so.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import vendor
from facts import HostFacts, host_versions
from probes import (
    bundle_image_ids,
    bundle_manifest,
    container_inspect,
    deployed_image_ids,
    docker,
    held_image,
    image_arch,
    problem,
    read_json,
)

from sglx_core.engines import engine_from, names_tested
from sglx_core.errors import SglxError
from sglx_core.gate.tools import amd_smi, amd_smi_partition, rccl_tests, rvs, xpu_smi
from sglx_core.gate.tools.ecc import ECC_READS
from sglx_core.gate.tools.result import ToolResult
from sglx_core.untrusted import parse_json

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
    """The profile's arguments, and modprobe.blacklist= of the modules the site loads after
    boot (accel_host_load_after_boot): what the role's drop-in appends."""
    wanted = facts.kernel_cmdline
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


def test_kernel_modules(host: Any, facts: HostFacts) -> None:
    """The profile's modules are loaded, by the kernel at boot or, for those the site loads
    after boot (accel_host_load_after_boot: blacklisted on the command line), by the role's
    unit: /sys/module answers for both, and the unit must be there to do it at every boot."""
    modules = facts["accel_host_modules"]
    if not modules:
        pytest.skip(f"the {facts.arch} profile loads no kernel module")
    late, unit = facts.late_modules, str(facts["accel_host_after_boot_unit"])
    wrong = []
    if late:
        enabled = host.run(f"systemctl is-enabled {shlex.quote(unit)}")
        if enabled.stdout.strip() != "enabled":
            said = (enabled.stdout or enabled.stderr).strip()[:120] or f"exit {enabled.rc}"
            wrong.append(
                f"{unit}, which loads {', '.join(late)} after boot, is not enabled ({said})"
            )
    missing = []
    for module in modules:
        if host.file(f"/sys/module/{module.replace('-', '_')}").exists:
            continue
        if module in late:
            missing.append(
                f"{module} is not loaded: it is blacklisted at boot and {unit} loads it "
                f"(systemctl status {unit}; journalctl -b -u {unit})"
            )
        else:
            missing.append(f"{module} is not loaded")
    fix = (
        f"install the vendor's driver package, then {SITE} (it loads the modules and writes "
        "what loads them at boot)"
    )
    if wrong:
        problem("; ".join(wrong + missing), fix)
    if missing and _in_container(host):
        pytest.xfail(
            f"{'; '.join(missing)}. This host is a container: its modules are those of the "
            "machine that runs it, which must load them"
        )
    if missing:
        problem("; ".join(missing), fix)


def _in_container(host: Any) -> bool:
    """A container shares the kernel of the machine that runs it (and its /sys/module)."""
    if host.file("/.dockerenv").exists or host.file("/run/.containerenv").exists:
        return True
    return bool(host.run("systemd-detect-virt --container --quiet").rc == 0)


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


def test_container_engine(host: Any, facts: HostFacts) -> None:
    """The engine answers, and is one sglx was tested on (product, version and image store,
    sglx_core.engines), unless the inventory accepts another (`sglx_engine_untested_ok`)."""
    done = docker(host, "version", "--format", "{{json .Server}}")
    if done.rc != 0:
        problem(
            f"the container engine does not answer ({(done.stderr or done.stdout).strip()[:160]})",
            "start it (systemctl start docker), or run site.yml (container_runtime)",
        )
    info = docker(host, "info", "--format", "{{json .DriverStatus}}")
    try:
        server = parse_json(done.stdout, path=Path("docker version"), what="engine version")
        status = parse_json(info.stdout, path=Path("docker info"), what="driver status")
    except SglxError as exc:
        problem(exc.message, "check the engine with `docker version` and `docker info`")
    engine = engine_from(server if isinstance(server, dict) else {}, status or ())
    if not engine.tested() and not facts.vars.get("sglx_engine_untested_ok"):
        problem(
            f"{engine.describe()} is not an engine sglx was tested on ({names_tested()})",
            "use a tested engine (docs/reference/engines.md), or set sglx_engine_untested_ok: "
            "true for the host once its rollout passed the serving gate",
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
    where, text = _reported_version(host, floor)
    # The role's parser (facts.host_versions): the dotted number a banner states, else the text.
    found = host_versions().version_in(text) or text.strip()[:80]
    from packaging.version import InvalidVersion, Version

    try:
        low = Version(found) < Version(floor["min_version"])
    except InvalidVersion:
        problem(f"{where} reads {found!r}, not a version", "check the driver installation")
    if low:
        problem(
            f"{where} is {found}, below the minimum {floor['min_version']}",
            floor.get("note") or "upgrade it",
        )


def _reported_version(host: Any, floor: dict[str, str]) -> tuple[str, str]:
    """(where, text) of the installed version, read as the role's preflight reads it: the
    version file, else (a driver floor naming its module) `modinfo -F version MODULE`, which
    answers for a driver installed but not loaded yet, e.g. blacklisted at boot."""
    file = host.file(floor["version_file"])
    if file.exists:
        return file.path, file.content_string
    module = floor.get("module") or ""
    if not module:
        problem(
            f"{floor['version_file']} is missing: the driver is not loaded",
            "load the driver, or install it",
        )
    where = (
        f"{floor['version_file']} is absent (the driver is not loaded, or declares no "
        f"version) and `modinfo -F version {module}`"
    )
    text = host.run(f"modinfo -F version {shlex.quote(module)}").stdout.strip()
    if not text:
        problem(
            f"{where} reads nothing (no such module installed, or the kernel's own driver, which "
            "declares no version)",
            floor.get("note") or "install the vendor's driver",
        )
    return where, text


def test_driver_minimum(host: Any, facts: HostFacts) -> None:
    _version_floor(host, facts, "accel_host_driver")


# The vendor tools a floor can name (host.*.tool) and the role variable holding each one's path.
TOOL_PATHS = {"xpu-smi": "accel_host_xpu_smi"}


def _tool_floor(host: Any, facts: HostFacts, floor: dict[str, str]) -> None:
    """A floor no file reports, read from the vendor tool's report (`xpu-smi -q`) and judged
    by the role's own parser and wording (filter_plugins/sglx_host_versions.py). A host
    without the tool is skipped as not checked, as the role's preflight reports it."""
    versions = host_versions()
    tool = floor["tool"]
    path = str(facts[TOOL_PATHS[tool]]) if tool in TOOL_PATHS else tool
    if not host.file(path).exists:
        pytest.skip(
            f"not checked: {path} is not on this host, so the firmware floor "
            f"{floor['min_version']} cannot be read (install the vendor's {tool}, or set "
            f"{TOOL_PATHS.get(tool, 'its path')} to where it is)"
        )
    # Bounded on the host: at most the parser's MAX_CHARS come back, and a hung tool is stopped.
    done = host.run(
        f'{{ timeout 120 {shlex.quote(path)} -q; echo "sglx-rc=$?" >&2; }} '
        f"| head -c {versions.MAX_CHARS}"
    )
    status = re.search(r"sglx-rc=(\d+)\s*$", done.stderr)
    verdict = versions.firmware_verdict(
        done.stdout,
        floor["min_version"],
        tool,
        status.group(1) if status else done.rc,
        done.stderr[: status.start()] if status else done.stderr,
        floor.get("note"),
    )
    if not verdict["ok"]:
        problem(verdict["detail"], verdict["fix"])


def test_firmware_minimum(host: Any, facts: HostFacts) -> None:
    floor = facts["accel_host_firmware"]
    if floor.get("min_version") and floor.get("tool"):
        _tool_floor(host, facts, floor)
    else:
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
        held = held_image(host, bundle_image_ids(manifest))
        if held is None or image_arch(host, held) is None:
            pytest.skip("the bundle's image is not on this host yet (the rollout loads it)")
        return held
    deployed = read_json(host, str(facts["sglang_service_state_file"]))
    image = held_image(host, deployed_image_ids(deployed)) or ""
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


# The vendor's own tools (the profile's gate.vendor; hostchecks/vendor.py): each check runs only
# where the profile names its tool and the host has it. A tool that is absent is skipped as not
# run, never passed. Built and tested on fixtures (tests/data/vendor), not run on hardware.


def test_vendor_amd_smi_idle(host: Any, facts: HostFacts, record_property: Any) -> None:
    """Every GPU idle before a rollout: 0 % GFX activity, temperatures under the limit."""
    settings = vendor.settings(facts, "amd-smi")
    path = vendor.locate(host, facts, "amd-smi")
    vendor.devices_free(host, facts, "the idle check")
    out = vendor.run(
        host, path, ["metric", "-u", "-t", "--json"], settings.timeout_s, merge_stderr=False
    )
    readings = vendor.parse(
        out, lambda data: amd_smi.parse_metric_json(data, require=("usage", "temperature"))
    )
    result = amd_smi.check_idle(
        readings,
        max_temp_c=vendor.temperature_limit(settings),
        max_gfx_activity=settings.idle.max_utilization_pct,
    )
    vendor.judge(
        [result, *vendor.counted(host, facts, "amd-smi", len(readings))],
        [out],
        record_property,
        "stop what runs on the GPUs (`amd-smi process`), check the host's cooling and "
        "let the GPUs cool, then check again",
    )


def test_vendor_amd_smi_ecc(host: Any, facts: HostFacts, record_property: Any) -> None:
    """No uncorrectable ECC error on any GPU (correctable ones are reported)."""
    settings = vendor.settings(facts, "amd-smi")
    path = vendor.locate(host, facts, "amd-smi")
    read = ECC_READS["amd-smi"]
    out = vendor.run(host, path, list(read.args), settings.timeout_s, merge_stderr=False)
    readings = vendor.parse(out, read.parse)
    vendor.judge(
        [read.check(readings), *vendor.counted(host, facts, "amd-smi", len(readings))],
        [out],
        record_property,
        "take the host out of service and have the GPU checked (`amd-smi bad-pages`, "
        "the vendor's RMA process); an N/A count needs a driver with RAS enabled",
    )


def test_vendor_amd_smi_partitions(host: Any, facts: HostFacts, record_property: Any) -> None:
    """Every GPU in the profile's compute and memory partition modes (SPX/NPS1 for TP8)."""
    settings = vendor.settings(facts, "amd-smi")
    want = settings.partitions
    if want.compute is None or want.memory is None:
        pytest.skip(f"the {facts.arch} profile expects no partition mode (gate.vendor.partitions)")
    path = vendor.locate(host, facts, "amd-smi")
    out = vendor.run(
        host, path, ["static", "--partition", "--json"], settings.timeout_s, merge_stderr=False
    )
    parts = vendor.parse(out, amd_smi_partition.parse_partition_json)
    result = amd_smi_partition.check_partitions(parts, compute=want.compute, memory=want.memory)
    vendor.judge(
        [result, *vendor.counted(host, facts, "amd-smi", len(parts))],
        [out],
        record_property,
        f"set the modes with `amd-smi set -C {want.compute}` and `amd-smi set -M "
        f"{want.memory}` (sudo; a memory mode change reloads amdgpu), with no process "
        "on the GPUs",
    )


def test_vendor_rvs(host: Any, facts: HostFacts, record_property: Any) -> None:
    """The profile's ROCm Validation Suite runs pass by AMD's acceptance criteria."""
    settings = vendor.settings(facts, "rvs")
    path = vendor.locate(host, facts, "rvs")
    vendor.devices_free(host, facts, "the RVS stress run")
    results: list[ToolResult] = []
    outputs: list[vendor.Output] = []
    confs = [(test.module, f"{settings.rvs.conf_dir}/{test.conf}") for test in settings.rvs.tests]
    missing = [conf for _, conf in confs if not host.file(conf).exists]
    if missing:  # named before any stress run starts
        problem(
            f"rvs is installed without the conf files {', '.join(missing)}",
            "install the rocm-validation-suite package of the host's ROCm release, or "
            "set gate.vendor.rvs.conf_dir to where its conf files are",
        )
    for module, conf in confs:
        out = vendor.run(host, path, ["-c", conf], settings.rvs.timeout_s, merge_stderr=True)
        report = vendor.parse(out, rvs.parse_rvs)
        results.append(rvs.check_rvs(report, modules=(module,)))
        outputs.append(out)
    vendor.judge(
        results,
        outputs,
        record_property,
        "run the failing conf by hand (`rvs -c CONF -d 3`) and follow AMD's system "
        "acceptance guide for the module; a GPU that fails again goes to the vendor",
    )


def test_vendor_rccl_all_reduce(host: Any, facts: HostFacts, record_property: Any) -> None:
    """rccl-tests' all_reduce_perf over the host's GPUs reaches AMD's bus bandwidth floor and
    returns no wrong element."""
    settings = vendor.settings(facts, "rccl-tests")
    path = vendor.locate(host, facts, "rccl-tests")
    vendor.devices_free(host, facts, "the all_reduce_perf run")
    rccl = settings.rccl_tests
    out = vendor.run(host, path, list(rccl.args), rccl.timeout_s, merge_stderr=False)
    report = vendor.parse(out, rccl_tests.parse_all_reduce)
    result = rccl_tests.check_all_reduce(
        report, min_busbw_gbps=rccl.min_busbw_gbps or 0.0, min_size_bytes=rccl.min_size_bytes
    )
    vendor.judge(
        [result],
        [out],
        record_property,
        "check the xGMI links and PCIe settings (ACS off, IOMMU passthrough: AMD's "
        "RCCL benchmarking guide), then run all_reduce_perf by hand",
    )


def _xpu_smi_query(host: Any, facts: HostFacts, idle: bool) -> tuple[vendor.Output, list[Any]]:
    """`xpu-smi -q` read into per-card readings (idle: only while no server holds the cards)."""
    settings = vendor.settings(facts, "xpu-smi")
    path = vendor.locate(host, facts, "xpu-smi")
    if idle:
        vendor.devices_free(host, facts, "the idle check")
    read = ECC_READS["xpu-smi"]  # `-q` carries the idle figures too
    out = vendor.run(host, path, list(read.args), settings.timeout_s, merge_stderr=False)
    return out, vendor.parse(out, read.parse)


def test_vendor_xpu_smi_idle(host: Any, facts: HostFacts, record_property: Any) -> None:
    """Every XPU idle before a rollout: 0 % utilization (temperature where the profile sets a
    limit)."""
    out, readings = _xpu_smi_query(host, facts, idle=True)
    settings = facts.profile.gate.vendor
    result = xpu_smi.check_idle(
        readings,
        max_temp_c=vendor.temperature_limit(settings),
        max_utilization=settings.idle.max_utilization_pct,
    )
    vendor.judge(
        [result, *vendor.counted(host, facts, "xpu-smi", len(readings))],
        [out],
        record_property,
        "stop what runs on the cards (`xpu-smi` lists their processes), check the host's "
        "cooling, then check again",
    )


def test_vendor_xpu_smi_ecc(host: Any, facts: HostFacts, record_property: Any) -> None:
    """No uncorrectable ECC error on any XPU, and ECC enabled where xpu-smi shows the mode."""
    out, readings = _xpu_smi_query(host, facts, idle=False)
    counted = vendor.counted(host, facts, "xpu-smi", len(readings))
    vendor.judge(
        [ECC_READS["xpu-smi"].check(readings), *counted],
        [out],
        record_property,
        "take the host out of service and have the card checked by the vendor; enable "
        "ECC where it is off",
    )

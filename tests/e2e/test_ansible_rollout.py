"""From bare test hosts to a checked fleet, with real ansible-playbook over SSH and the real
host checks (`sglx hosts check`, testinfra over the same inventory):

site.yml (idempotent, check mode), preflight checks, rollout.yml of the cpu bundle (idempotent),
acceptance checks (the serving gate's golden numerics among them), three breaks on one host
that the checks name and a playbook repairs, a host serving other numbers that the gate fails
and the rollout rolls back, a failed upgrade that is rolled back (its delta bundle copied
from the control node and staged on both hosts before the first restart, so that the serial
batches hold no copy), a serving group, and staging from a site registry by digest.

The hosts share this machine's engine (see helpers/test_hosts.py). Consequences the test
names: a bind mount's source is a path of this machine, so each host's node-local JIT cache
root is a folder of the run that the host sees at the same path (`sglang_service_jit_cache_root`);
the image of a bundle is "already loaded" on every host once it is in the engine, so
the install step is checked by its verification report on each host (install.sh hashed every
file there) and by the image id each host's unit runs; and a delta's parent layers are always
there (the first version's image, which both hosts run), so a delta on a host without them is
not met here: tests/integration/test_bundle_delta.py refuses one on the real engine, and
tests/unit/ansible/test_ansible_bundle_delta.py through bundle_install. The hosts are configured
with gfx942's variables on fixture device nodes (preflight checks them as gfx942 hosts), while
the server they run is the cpu bundle's (no GPU here), so rollout and acceptance use the cpu
profile.

The second bundle version is the cpu image plus one LABEL and one small file (`docker build`,
seconds: one new layer, standing in for a plugin-only fix), bundled as an upgrade is: a delta
over the first bundle (`sglx bundle create --since`), whose archive carries the new layer, the
image config and manifest, and takes every other layer from the first bundle's image. The
failed-upgrade test records both bundles' bytes and asserts that the delta is under 1% of the
full bundle. Once bundled, that image is removed from the engine, so host-a's install.sh loads
the delta over the first version's layers, into the image id the build gave it (checked). The
cpu chain (image, bundle) and then that second version are made, one after the other, in a
thread from the fleet's start: site.yml and the preflight checks need only the hosts, and the
upgrade does not wait for the saves (a delta's create still streams the whole `docker save`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.bundles import import_tiny_image
from helpers.child_env import child_environment
from helpers.engine_fixtures import (
    build_cpu_image,
    free_port,
    has_image,
    make_cpu_bundle,
    remove_images,
    reserved_port,
)
from helpers.prometheus_server import Prometheus, prometheus
from helpers.run_shared import shared_folder
from helpers.server import http
from helpers.site_registry import site_registry
from helpers.test_hosts import SshHost, build_host_image, recap, sh

pytestmark = [pytest.mark.e2e, pytest.mark.docker, pytest.mark.slow]

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent


# A server argument that a naive unit would split, unquote or expand (`%h`, `$HOME`); inert
# (sglang reads --download-dir only to fetch a model from a hub). Issue 21, item 3.
ODD_ARG = "/tmp/sglx e2e %h $HOME \"dq\" 'sq' back\\slash ;"


class Fleet:
    def __init__(
        self,
        work: Path,
        hosts: list[SshHost],
        key: Path,
        ports: dict[str, int],
        exporter_ports: dict[str, int],
    ):
        self.work, self.hosts, self.key, self.ports = work, hosts, key, ports
        self.exporter_ports = exporter_ports  # each host's node exporter (the gate's series)
        self.inventories: dict[str, Path] = {}
        self.state: dict[str, Any] = {}
        self.watching = ExitStack()  # the real Prometheus scraping the fleet, while it runs

    def inventory(
        self,
        name: str,
        arch: str,
        host_vars: dict[str, dict[str, Any]],
        groups: dict[str, list[str]] | None = None,
    ) -> Path:
        folder = self.work / f"inventory-{name}"
        (folder / "group_vars" / "sglx").mkdir(parents=True)
        rendered = folder / "group_vars" / "sglx" / "sglx_profile.yml"
        sh(str(BIN / "sglx"), "ansible", "vars", "--arch", arch, "--out", str(rendered))
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
                # The test hosts share this machine's two cores: one benchmarks at a time.
                "sglang_service_gate_speed_throttle": 1,
                # Every version of the fleet runs with it, so hosts differ only where a test
                # makes them differ (test_rollout_serves_on_both_hosts_idempotently reads it).
                "sglang_service_args": ["--download-dir", ODD_ARG],
                # The serving gate on a timer (issue 41), installed by every rollout; its period
                # so long that no run starts by itself during the suite (one is started by hand).
                "sglang_service_gate_timer": True,
                "sglang_service_gate_timer_minutes": 600,
                "sglang_service_gate_node_exporter_port": self.exporter_ports[host.name],
                # The engine mounts this machine's path: the host sees it at the same one.
                "sglang_service_jit_cache_root": str(jit_root(self.work, host)),
                **host_vars.get(host.name, {}),
            }
        # The session's cpu bundle is made without create's scan (its archive is scanned once
        # on its own, scan_cpu_bundle), and so are the upgrade's delta and the registry's tiny
        # bundle: the site accepts an unscanned bundle, as it must say (issue 37 item 4). In
        # `all`, so that the registry's seed play on the implicit localhost reads it too.
        inventory: dict[str, Any] = {
            "all": {"vars": {"sglx_bundle_no_scan": True}},
            "sglx": {"hosts": hosts},
        }
        for group, members in (groups or {}).items():
            inventory[group] = {"hosts": {member: {} for member in members}}
        (folder / "hosts.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
        self.inventories[name] = folder / "hosts.yml"
        return folder / "hosts.yml"

    def play(self, inventory: Path, playbook: str, *extra: str) -> tuple[int, str]:
        name = f"{Path(playbook).stem}-{len(list(self.work.glob('*.log')))}"
        tasks = self.work / "ansible-junit" / name
        started = time.monotonic()
        done = subprocess.run(
            [str(BIN / "ansible-playbook"), "-i", str(inventory), playbook, *extra],
            cwd=ANSIBLE,
            capture_output=True,
            text=True,
            timeout=1200,
            check=False,
            env=child_environment(ANSIBLE_CONFIG=str(ANSIBLE / "ansible.cfg"),
                                  ANSIBLE_NOCOLOR="1",
                                  # one line per message, so the test can match whole sentences
                                  ANSIBLE_CALLBACK_RESULT_FORMAT="json",
                                  # each task's seconds per host, for timing()
                                  ANSIBLE_CALLBACKS_ENABLED="ansible.builtin.junit",
                                  JUNIT_OUTPUT_DIR=str(tasks),
                                  JUNIT_HIDE_TASK_ARGUMENTS="true"),
        )  # fmt: skip
        (self.work / f"{name}.log").write_text(done.stdout + done.stderr)  # a failure in full
        self.timing(name, time.monotonic() - started, slowest_tasks(tasks))
        return done.returncode, done.stdout + done.stderr

    def timing(self, what: str, seconds: float, detail: Sequence[str] = ()) -> None:
        """One line per playbook run and host check in timings.txt (in $SGLX_TEST_REPORTS
        when set, else the work folder): where the e2e's minutes go."""
        self.note(f"{seconds:7.1f} s  {what}", detail)

    def note(self, line: str, detail: Sequence[str] = ()) -> None:
        """A line (and its indented detail) of timings.txt: timings, and the bundles' sizes."""
        folder = Path(os.environ.get("SGLX_TEST_REPORTS") or self.work)
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / "e2e-ansible-timings.txt").open("a") as out:
            out.write(f"{line}\n" + "".join(f"          {d}\n" for d in detail))

    def watch(self, inventory: Path) -> Prometheus:
        """monitoring.yml writes the fleet's targets, the job and the rules (role
        sglx_prometheus, on the control node: this machine), and a real Prometheus scrapes
        the hosts with them until `unwatch` or the fleet's end."""
        config = self.work / "prometheus-config"
        code, out = self.play(inventory, "monitoring.yml",
                              "-e", f"sglx_prometheus_config_dir={config}")  # fmt: skip
        assert code == 0, out
        folder = self.work / f"prometheus-{len(list(self.work.glob('prometheus-[0-9]*')))}"
        return self.watching.enter_context(
            prometheus(folder, config / "sglx.scrape.yml", config / "rules" / "sglx.rules.yml")
        )

    def unwatch(self) -> None:
        self.watching.close()

    def check(self, name: str, inventory: Path, mode: str, *extra: str) -> tuple[int, dict]:
        """`sglx hosts check` as an operator runs it; its JUnit report is kept under
        $SGLX_TEST_REPORTS (CI prints it), else in the work folder."""
        reports = Path(os.environ.get("SGLX_TEST_REPORTS") or self.work)
        reports.mkdir(parents=True, exist_ok=True)
        junit = reports / f"hosts-{name}.xml"
        started = time.monotonic()
        done = subprocess.run(
            [str(BIN / "sglx"), "hosts", "check", "-i", str(inventory), "--mode", mode,
             "--junitxml", str(junit), "--json", *extra],
            capture_output=True, text=True, timeout=600, check=False, env=child_environment(),
        )  # fmt: skip
        self.timing(f"hosts check {name} ({mode})", time.monotonic() - started)
        envelope = json.loads(done.stdout)
        envelope["junit"] = junit
        assert done.returncode == envelope["exit_code"], done.stderr
        return done.returncode, envelope


def jit_root(work: Path, host: SshHost) -> Path:
    """The host's root of the node-local JIT cache folders: a folder of this machine (whose
    paths the shared engine mounts), mounted into the host at the same path."""
    return work / f"jit-{host.name}"


def slowest_tasks(folder: Path, count: int = 6) -> list[str]:
    """The slowest tasks of one playbook run, from ansible-core's junit callback (one file per
    run; a testcase per task and host, with its seconds)."""
    cases = [
        (float(case.get("time") or 0), case.get("name") or "?")
        for report in sorted(folder.glob("*.xml"))
        for case in ET.parse(report).getroot().iter("testcase")
    ]
    cases.sort(reverse=True)
    return [f"{seconds:6.1f} s  {name[:110]}" for seconds, name in cases[:count]]


BOTH = ("-e", "sglx_rollout_serial=2")
# Where the upgrade's bundle is copied to on each host (inside the host, not a shared folder).
ON_HOST_V2 = "/srv/sglx/bundles/v2"
SERVING_CHECKS = (
    "bundle_image_present", "service_active", "running_server_environment",
    "running_container_shares_the_device_init_lock", "running_container_mounts_its_jit_cache",
    "health_and_completion", "served_numerics", "served_speed",
    "group_runs_the_same", "image_preflight", "serving_profile_selected", "metrics_served",
)  # fmt: skip
# Weights cut short, config.json untouched: the second half of every matrix of the demo model's
# last layer zeroed, as a conversion that stopped early leaves it. The server starts and
# answers; its numbers drift far past the tolerance (measured: float16, top-1 agreement 0.09,
# max |Δ logprob| 0.81 against 0.03).
TRUNCATED_LAYER = "model.layers.1."
# The speed break's host: a site floor no host of this machine reaches (a healthy host served
# 978 and 1009 output tok/s on the gate's benchmark, quiet; 41.5 to 118 under the suite's load),
# so its gate fails twice (a failing run is measured again before it counts) however busy the
# machine is. Until issue 37's time budget, host-b also ran at half a core: that made the break
# real slowness, but cost the suite some three minutes (a start to healthy of 100 s, twice, and
# two benchmarks at 16 tok/s); the gate's judgement (floor, second measurement, rollback) is the
# same either way. A docker option (--cpus 1.5: no real limit on 2 cores) and a server argument
# still travel with the host's new version and leave with its rollback. Only host-b's new
# version has the floor, and a rollback is not benchmarked (the version it restores keeps its
# record). Two hosts have no median to be an outlier of (issue 37): the floor judges them.
SLOW_FLOOR = 100000
# No host here reaches the floor, so a host serving at its full speed fails it: its two
# benchmark runs cost the suite no more than any other host's. The extra run option (no limit
# on a machine of two cores) marks the unit the rollback must take back.
SLOW_HOST = {
    "sglang_service_extra_run_options": ["--cpus", "2"],
    "sglang_service_gate_speed_floors": {"min_output_tok_s": SLOW_FLOOR},
}


def failures(envelope: dict) -> set[tuple[str, str]]:
    return {(c["host"], c["check"]) for c in envelope["data"]["checks"] if c["outcome"] == "failed"}


def outcomes(envelope: dict, host: str) -> dict[str, str]:
    return {c["check"]: c["outcome"] for c in envelope["data"]["checks"] if c["host"] == host}


def message(envelope: dict, host: str, check: str) -> str:
    (found,) = [c for c in envelope["data"]["checks"] if (c["host"], c["check"]) == (host, check)]
    return f"{found['message']} Fix: {found['fix']}"


@pytest.fixture(scope="module")
def fleet(
    docker: Any,
    run_id: str,
    tmp_path_factory: pytest.TempPathFactory,
    request: Any,
) -> Iterator[Fleet]:
    """Two test hosts that see the run's temp folders (the session's cpu bundle, this module's
    bundles) at the same paths as here; SGLX_TEST_CPU_BASE=REF reuses a built cpu base
    (development only).

    The hosts need only the base: the cpu image and its bundle are built in a thread while
    site.yml and preflight run, then the upgrade's second version (see the module doc)."""
    config = request.config
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
    # The servers' and node exporters' ports: below the ephemeral range, so that no test
    # running beside the e2e takes one while its server restarts.
    fleet = Fleet(work, hosts, key, {h.name: reserved_port() for h in hosts},
                  {h.name: reserved_port() for h in hosts})  # fmt: skip
    # Images a test adds (the upgrade's v2): removed after the servers that may still run them.
    added_images: list[str] = []
    making = ThreadPoolExecutor(max_workers=1)
    try:
        # One after the other, beside the tests (one worker: in the order submitted): the
        # chain (wheels, image, bundle: the rollout waits for it through the cpu_bundle
        # fixture), then the second version, a delta over that bundle.
        making.submit(make_cpu_bundle, config, tmp_path_factory, run_id)
        v2_tag = f"sglx-test/cpu-v2:{run_id}"
        added_images.append(v2_tag)  # host-a's server still runs it at the end
        v2 = making.submit(second_version, config, tmp_path_factory, run_id, v2_tag, bundles / "v2")
        build_host_image(base, image, work, key.with_suffix(".pub"))
        shared = shared_folder(config)
        for host in hosts:
            jit = jit_root(work, host)
            jit.mkdir()
            host.start(image, ["-v", f"{shared}:{shared}:ro", "-v", f"{jit}:{jit}"])
            host.serve_node_exporter(fleet.exporter_ports[host.name])
        fleet.state["added_images"] = added_images
        fleet.state["v2"] = v2
        yield fleet
    finally:
        fleet.unwatch()
        making.shutdown(wait=True)
        for host in hosts:
            sh("docker", "rm", "-f", host.container + "-server", check=False)
            host.remove()
        sh("docker", "rmi", "-f", image, *added_images, check=False)
        shutil.rmtree(bundles, ignore_errors=True)


def second_version(
    config: pytest.Config,
    tmp_path_factory: pytest.TempPathFactory,
    run_id: str,
    tag: str,
    out: Path,
) -> tuple[Path, str]:
    """The cpu image plus one LABEL and one small file (one new layer), bundled as a delta over
    the session's cpu bundle (`--since`; no scan: the integration tests scan the cpu image),
    then removed from the engine, so that the upgrade loads it from the delta. Its bundle
    folder and image id.

    The first bundle is made before it by the same one-worker thread; asking for it here
    returns it (helpers/run_shared.once), or fails with why it was not made."""
    v1 = make_cpu_bundle(config, tmp_path_factory, run_id)["path"]
    assert (v1 / "bundle.json").is_file(), v1
    source = build_cpu_image(config, tmp_path_factory, run_id)["tag"]
    context = out.with_name(out.name + "-context")
    context.mkdir()
    (context / "plugin-fix.txt").write_text("a plugin-only fix stands in here\n" * 1024)
    (context / "Dockerfile").write_text(
        f"FROM {source}\nLABEL io.sglx.test.version=2\n"
        "COPY plugin-fix.txt /opt/sglx-test/plugin-fix.txt\n"
    )
    sh("docker", "build", "-q", "-t", tag, str(context))
    sh(str(BIN / "sglx"), "bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(out),
       "--since", str(v1), "--no-scan", "-q")  # fmt: skip
    image_id = str(json.loads((out / "bundle.json").read_text())["image"]["id"])
    sh("docker", "rmi", tag)  # its layers but the new one stay: the first version's image's
    return out, image_id


def bundle_bytes(folder: Path) -> int:
    """Every file of a bundle folder: what is carried into the site."""
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def digest_of(folder: Path) -> str:
    return "sha256:" + sh("sha256sum", str(folder / "bundle.json")).stdout.split()[0]


def served(fleet: Fleet, host: SshHost) -> str:
    status, body = http(
        f"http://127.0.0.1:{fleet.ports[host.name]}/v1/completions",
        {"model": "demo", "prompt": "Hello", "max_tokens": 4, "temperature": 0},
        timeout=120,
    )
    assert status == 200, body
    return str(body["choices"][0]["text"])


def served_metrics(fleet: Fleet, host: SshHost) -> dict[str, list[dict[str, str]]]:
    """The server's /metrics (the run spec's path): each family's samples' labels."""
    from prometheus_client.parser import text_string_to_metric_families

    status, text = http(f"http://127.0.0.1:{fleet.ports[host.name]}/metrics", None, timeout=30)
    assert status == 200, text
    return {
        f.name: [dict(s.labels) for s in f.samples] for f in text_string_to_metric_families(text)
    }


def wait_healthy(fleet: Fleet, host: SshHost, timeout: float = 420) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if http(f"http://127.0.0.1:{fleet.ports[host.name]}/health", None, timeout=5)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(2)
    raise AssertionError(f"{host.name}: the server did not come back within {timeout} s")


def running_image(host: SshHost) -> str:
    return sh(
        "docker", "inspect", "--format", "{{.Image}}", host.container + "-server"
    ).stdout.strip()


_ARGV_PROBE = (
    "import json, os\n"
    "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
    "    argv = open(f'/proc/{pid}/cmdline', 'rb').read().split(b'\\0')[:-1]\n"
    "    if b'sglang.launch_server' in argv:\n"
    "        print(json.dumps([a.decode() for a in argv]))\n"
    "        break\n"
)


def server_argv(host: SshHost) -> list[str]:
    """The sglang server process's argv, read from /proc in its container."""
    out = sh("docker", "exec", host.container + "-server", "python3", "-c", _ARGV_PROBE).stdout
    return list(json.loads(out))


def test_site_configures_hosts_idempotently(fleet: Fleet) -> None:
    a, b = fleet.hosts
    site_inv = fleet.inventory("site", "gfx942", {})
    code, out = fleet.play(site_inv, "site.yml")
    assert code == 0, out
    args = "pci=realloc=off pci=bfsort iommu=pt numa_balancing=disable"  # AMD's acceptance list
    assert f"reboot required for kernel arguments {args}" in out
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
            f'GRUB_CMDLINE_LINUX="${{GRUB_CMDLINE_LINUX}} {args}"'
        )
        assert host.exec("cat /var/lib/sglx/reboot-required").strip() == (
            f"kernel command line lacks: {args}"
        )
        # Not rebooted: the container's init (pid 1) is the one it started with.
        assert sh("docker", "inspect", "--format", "{{.RestartCount}} {{.State.Running}}",
                  host.container).stdout.split() == ["0", "true"]  # fmt: skip
        assert "GPU_MAX_HW_QUEUES=2" in host.exec("cat /etc/sglx/accel.env")
        assert "sglx hard memlock unlimited" in host.exec("cat /etc/security/limits.d/90-sglx.conf")


def test_preflight_checks_pass_as_gfx942_hosts(fleet: Fleet) -> None:
    code, report = fleet.check("preflight", fleet.inventories["site"], "preflight")
    assert code == 0, report
    for host in ("host-a", "host-b"):
        seen = outcomes(report, host)
        assert seen["device_nodes"] == "passed"
        assert seen["service_user_groups"] == "passed"
        assert seen["container_engine"] == "passed"
        assert seen["service_environment_file"] == "passed"
        # Recorded by site.yml and not performed: reported as pending, not as passed.
        assert seen["kernel_command_line"] == "pending"
        assert "reboot pending" in message(report, host, "kernel_command_line")
        # A container host shares this machine's kernel; its /proc/sys is read-only.
        assert seen["sysctl"] in {"passed", "pending"}
        # ... and its modules: amdgpu is not loaded on this machine.
        assert seen["kernel_modules"] == "pending"
        # The fixture's modinfo answers for the not loaded driver (test_hosts.py).
        assert seen["driver_minimum"] == "passed"
        assert seen["image_preflight"] == "skipped"  # no sglx image on the host yet
    cases = ET.parse(report["junit"]).getroot().iter("testcase")
    assert {c.get("name") for c in cases} >= {
        "test_device_nodes[ansible://host-a]", "test_device_nodes[ansible://host-b]"}  # fmt: skip


def test_rollout_serves_on_both_hosts_idempotently(
    fleet: Fleet, cpu_bundle: dict[str, Any]
) -> None:
    """The session's cpu bundle (conftest.cpu_bundle, made by `sglx bundle create` with the
    scan; test_bundle_cpu round-trips the same one) is verified, then rolled out."""
    a, b = fleet.hosts
    v1 = cpu_bundle["path"]
    fleet.state["v1"], fleet.state["v1_id"] = v1, cpu_bundle["image_id"]
    v1_id = cpu_bundle["image_id"]
    v1_digest = "sha256:" + hashlib.sha256((Path(v1) / "bundle.json").read_bytes()).hexdigest()
    # In the site, before the rollout (test_bundle_cpu verifies it with the scan re-run).
    sh(str(BIN / "sglx"), "bundle", "verify", str(v1), "--no-scan", "-q")
    roll_inv = fleet.inventory("roll", "cpu", {})  # with ODD_ARG, as every inventory
    # Both hosts in one batch (sglx_rollout_serial=2), here and in the re-runs and repairs:
    # what the serial default guards, a failing host stopping the next batch, is tested by the
    # upgrade below.
    code, out = fleet.play(roll_inv, "rollout.yml", "-e", f"sglx_bundle_path={v1}", *BOTH)
    assert code == 0, out
    for host in (a, b):
        assert served(fleet, host)
        assert running_image(host) == fleet.state["v1_id"]
        # Metrics on by default (issue 41): sglang's series and sglx's at the same route.
        metrics = served_metrics(fleet, host)
        assert {
            "sglang:num_running_reqs",
            "sglang:prompt_tokens",
            "sglx_server_start_time_seconds",
        } <= set(metrics), sorted(metrics)
        ((info,),) = [metrics["sglx_info"]]
        assert (info["arch"], info["model"]) == ("cpu", "demo"), info
        # and what runs, as the unit's environment names it: the image and the bundle
        assert (info["image_id"], info["bundle_digest"]) == (v1_id, v1_digest), info
        argv = server_argv(host)  # the odd argument arrives as one word, nothing expanded
        assert argv[argv.index("--download-dir") + 1 :][:1] == [ODD_ARG], argv
        assert argv.count("--download-dir") == 1, argv
        log = host.exec("cat /var/lib/sglx/bundles/*.log")
        assert "all files match" in log  # install.sh verified every file on this host
        # The shared engine had the image already, so neither host loaded it again.
        assert "the engine already has image" in log
    # The serving gate on a timer (issue 41): waiting on both hosts; a run started by hand
    # judges host-a's served numbers and writes the node exporter's textfile and the record.
    for host in (a, b):
        assert host.exec("systemctl is-active sglx-server-gate.timer").strip() == "active"
    a.exec("systemctl start sglx-server-gate.service")
    record = json.loads(a.exec("cat /var/lib/sglx/gate-timer.json"))
    assert record["passed"] and record["checks"]["numerics"]["passed"], record
    prom = a.exec("cat /var/lib/prometheus/node-exporter/sglx_gate.prom")
    assert 'sglx_gate_check_passed{check="numerics"} 1.0' in prom, prom
    assert "sglx-gate: host-a: numerics passed" in a.exec("journalctl -u sglx-server-gate")
    # Its remediation acting through systemd, on a unit of its own (the server is left alone):
    # a failing run restarts it once, the next is rate limited, and `stop` stops it.
    b.exec("printf '[Service]\\nExecStart=/bin/sleep infinity\\n' "
           ">/etc/systemd/system/sglx-dummy.service && systemctl daemon-reload "
           "&& systemctl start sglx-dummy")  # fmt: skip
    tick = ("python3 /usr/local/libexec/sglx/sglx-gate-tick --container "
            f"{b.container}-server --url http://127.0.0.1:1 --host host-b --unit "
            "sglx-dummy.service --textfile /tmp/gate/sglx_gate.prom --record /tmp/gate/gate.json "
            "--remediation")  # fmt: skip
    try:
        pid = b.exec("systemctl show -p MainPID --value sglx-dummy").strip()
        said = b.exec(f"{tick} restart || true")
        assert "host-b: health FAILED" in said and "remediation (restart): restart" in said, said
        assert b.exec("systemctl show -p MainPID --value sglx-dummy").strip() not in ("0", pid)
        said = b.exec(f"{tick} restart || true")
        assert "rate limited" in said, said
        actions = json.loads(b.exec("cat /tmp/gate/gate.json"))["actions"]
        assert [x["action"] for x in actions] == ["restart"], actions
        said = b.exec(f"{tick} stop || true")
        assert "remediation (stop): stop" in said, said
        assert b.exec("systemctl is-active sglx-dummy || true").strip() == "inactive"
    finally:
        b.exec("systemctl stop sglx-dummy; rm -rf /etc/systemd/system/sglx-dummy.service "
               "/tmp/gate; systemctl daemon-reload", check=False)  # fmt: skip
    code, again = fleet.play(roll_inv, "rollout.yml", "-e", f"sglx_bundle_path={v1}", *BOTH)
    assert code == 0, again
    # (localhost: the play that seeds a site registry, skipped without one.)
    changed = {h: r["changed"] for h, r in recap(again).items()}
    assert changed == {"host-a": 0, "host-b": 0, "localhost": 0}, again
    assert f"host-a: unchanged: runs bundle {digest_of(v1)}" in again


def test_acceptance_checks_pass(fleet: Fleet) -> None:
    code, report = fleet.check(
        "acceptance", fleet.inventories["roll"], "acceptance", "--bundle", str(fleet.state["v1"])
    )
    assert code == 0, report
    for host in ("host-a", "host-b"):
        seen = outcomes(report, host)
        for check in SERVING_CHECKS:
            assert seen[check] == "passed", (host, check, report)
        # The serving profile each host's sglx-serve chose, reported by acceptance.
        chosen = [
            c["message"]
            for c in report["data"]["checks"]
            if (c["host"], c["check"]) == (host, "serving_profile_selected")
        ]
        assert chosen == ["serving profile cpu-host"], report
        # The serving gate's numbers per host: the served dtype and how far from the golden file.
        (numbers,) = [
            c["message"]
            for c in report["data"]["checks"]
            if (c["host"], c["check"]) == (host, "served_numerics")
        ]
        assert re.fullmatch(r"float16: top-1 1\.000, mean \|Δ\| \S+, max \|Δ\| \S+ over 6 "
                            r"prompts", numbers), numbers  # fmt: skip
        # And its speed: the record of its gate's benchmark. Two hosts have no median to be an
        # outlier of (issue 37): the fleet is judged by its floors, and the detail says so.
        (speed,) = [
            c["message"]
            for c in report["data"]["checks"]
            if (c["host"], c["check"]) == (host, "served_speed")
        ]
        assert re.match(r"[0-9.]+ output tok/s \(a fleet of 2: judged by the floors only\), "
                        r"TTFT p50/p99 ", speed), speed  # fmt: skip
        fleet.note(f"acceptance speed {host}: {speed}")
    watched_by_prometheus(fleet)


def watched_by_prometheus(fleet: Fleet) -> None:
    """Issue 41: monitoring.yml's targets, job and rules in a real Prometheus, scraping both
    hosts as the site's would: each target up with its labels, the rules' recordings made, and
    every query of the dashboard answered with series (none names one nothing produces).
    Prometheus runs on until the stopped-service break has fired its alert."""
    from sglx.grafana_dashboard import dashboard_queries

    prom = fleet.watch(fleet.inventories["roll"])
    fleet.state["prometheus"] = prom

    def both_up() -> bool:
        return sorted(s["metric"]["host"] for s in prom.query('up{job="sglx"} == 1')) == [
            "host-a",
            "host-b",
        ]

    fleet.note(f"prometheus: both hosts scraped {prom.wait_for('scrape of both', both_up):.1f} s "
               "after it answered")  # fmt: skip
    for sample in prom.query('up{job="sglx"}'):
        labels = sample["metric"]
        assert (labels["arch"], labels["fleet"], labels["nodes"]) == ("cpu", "cpu", "1"), labels
        assert labels["instance"] == f"127.0.0.1:{fleet.ports[labels['host']]}", labels
    # The rules' recordings over sglang's series, under sglang's names (the job's relabelling:
    # Prometheus 2.42 gets them as sglang_NAME, role sglx_prometheus), count both hosts.
    prom.wait_for("fleet count of 2", lambda: [s["value"][1] for s in
                  prom.query("fleet:sglx_servers:count")] == ["2"])  # fmt: skip
    for query in dashboard_queries():
        chosen = query.replace("$fleet", "cpu").replace("$host", ".*")
        prom.wait_for(f"series for the dashboard's {chosen}", lambda q=chosen: prom.query(q), 30)


@pytest.mark.breaks
def test_a_stopped_service_is_named_and_rollout_restarts_it(fleet: Fleet) -> None:
    _, b = fleet.hosts
    stopped = time.time()  # the server stops answering before systemctl stop returns
    b.exec("systemctl stop sglx-server")
    code, report = fleet.check("break-service", fleet.inventories["roll"], "acceptance")
    assert code == 1
    assert failures(report) == {("host-b", "service_active")}, report
    assert "not active" in message(report, "host-b", "service_active")
    prom = fleet.state.get("prometheus")
    if prom:  # the real Prometheus (test_acceptance_checks_pass) names host-b as down
        down = [("SglxServerDown", "host-b")]
        prom.wait_for("SglxServerDown for host-b", lambda: [
            (a["labels"]["alertname"], a["labels"]["host"]) for a in prom.alerts()
        ] == down)  # fmt: skip
        (alert,) = prom.alerts()
        active = datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", alert["activeAt"]))
        fleet.note(f"prometheus: SglxServerDown for host-b {alert['state']} "
                   f"{active.timestamp() - stopped:.1f} s after its server stopped (the rule "
                   f"waits 2m to fire; promtool's cases fire it)")  # fmt: skip
        fleet.unwatch()
    code, out = fleet.play(fleet.inventories["roll"], "rollout.yml",
                           "-e", f"sglx_bundle_path={fleet.state['v1']}", *BOTH)  # fmt: skip
    assert code == 0, out
    assert recap(out)["host-a"]["changed"] == 0
    code, report = fleet.check("repaired-service", fleet.inventories["roll"], "acceptance")
    assert code == 0, report


@pytest.mark.breaks
def test_a_device_mode_change_is_named_and_site_restores_it(fleet: Fleet) -> None:
    _, b = fleet.hosts
    b.exec("chmod 0666 /dev/kfd")
    code, report = fleet.check("break-device", fleet.inventories["site"], "preflight")
    assert code == 1
    assert failures(report) == {("host-b", "device_nodes")}, report
    assert "/dev/kfd has mode 0666, not 0660" in message(report, "host-b", "device_nodes")
    code, out = fleet.play(fleet.inventories["site"], "site.yml")
    assert code == 0, out
    assert b.exec("stat -c '%a' /dev/kfd").strip() == "660"
    code, report = fleet.check("repaired-device", fleet.inventories["site"], "preflight")
    assert code == 0, report


@pytest.mark.breaks
def test_a_hand_changed_server_flag_is_named_and_rollout_restores_it(fleet: Fleet) -> None:
    _, b = fleet.hosts
    unit = "/etc/systemd/system/sglx-server.service"
    b.exec(f"sed -i '/^  sha256:/ s|$| --max-running-requests 7|' {unit}"
           " && systemctl daemon-reload && systemctl restart sglx-server")  # fmt: skip
    assert "--max-running-requests 7" in b.exec(f"grep -A0 '^  sha256:' {unit}")
    wait_healthy(fleet, b)
    code, report = fleet.check("break-flag", fleet.inventories["roll"], "acceptance")
    assert code == 1
    expected = {("host-b", "group_runs_the_same"), ("host-b", "served_speed")}
    assert failures(report) == expected, report
    said = message(report, "host-b", "group_runs_the_same")
    assert "arg:max_running_requests: '7' here" in said  # what the server compared
    # The speed the gate measured was of the server before the hand edit: not what runs now.
    said = message(report, "host-b", "served_speed")
    assert "the gate did not measure what this host serves" in said, said
    code, out = fleet.play(fleet.inventories["roll"], "rollout.yml",
                           "-e", f"sglx_bundle_path={fleet.state['v1']}", *BOTH)  # fmt: skip
    assert code == 0, out
    assert "host-b: updated" in out and recap(out)["host-a"]["changed"] == 0
    code, report = fleet.check("repaired-flag", fleet.inventories["roll"], "acceptance")
    assert code == 0, report


@pytest.mark.breaks
def test_hosts_serving_other_numbers_or_too_slowly_fail_the_gate_and_are_rolled_back(
    fleet: Fleet,
) -> None:
    """Issue 25's numerics and speed breaks, judged as issue 37 asks, in one rollout whose batch
    holds both hosts (each host's gate judges it alone; one rollout costs the suite's two cores
    one server start less than two):

    - host-a serves its model from a site folder (sglang_service_model_dir) whose weights were
      cut short in conversion, config.json untouched. Its server starts and answers /health and
      a completion (the health module passes before the replay runs), yet the gate's
      golden-numerics replay fails it, naming the host and the prompt.
    - host-b serves under a site floor no host here reaches (SLOW_HOST).
      It starts and serves the right numbers, but its gate's benchmark falls below the site's
      floor, twice (a failing run is measured again before it counts): the gate names host-b
      with both runs. Two hosts have no median, so no outlier is named.

    Each host is rolled back; acceptance then reads both hosts' records (their numbers in the
    JSON report). Rolled out with the replay off, host-a serves the cut weights, and acceptance
    fails served_numerics alone: every configuration check passes, group_runs_the_same too (the
    rank fingerprint reads config.json, not the weights)."""
    a, b = fleet.hosts
    v1, v1_id = fleet.state["v1"], fleet.state["v1_id"]
    model = truncated_model(fleet.work, v1_id)
    cut = {"sglang_service_model_dir": str(model)}
    both = fleet.inventory("cut-and-slow", "cpu", {"host-a": cut, "host-b": SLOW_HOST})
    try:
        code, out = fleet.play(both, "rollout.yml", "-e", f"sglx_bundle_path={v1}", *BOTH)
        assert code != 0, out
        assert "host-a: rolled_back" in out and "host-b: rolled_back" in out, out
        drift = re.search(r"host-a: the served numbers fail the golden numerics \(host host-a: "
                          r"prompt '([a-z-]+)': served numbers drift from the reference at "
                          r"continuation tokens [0-9]", out)  # fmt: skip
        assert drift, out
        slow = re.search(r"host-b: the server fails the speed gate \(host-b: ([0-9.]+) output "
                         rf"tok/s is below the floor {SLOW_FLOOR} \(measured twice: ([0-9.]+), "
                         r"then ([0-9.]+) output tok/s\)\)", out)  # fmt: skip
        assert slow, out
        assert "): an outlier" not in out  # no outlier finding (the task names say the word)
        assert running_image(a) == v1_id and str(model) not in a.exec("systemctl cat sglx-server")
        assert running_image(b) == v1_id and "--cpus" not in b.exec("systemctl cat sglx-server")
        assert served(fleet, a) and served(fleet, b)
        code, report = fleet.check("after-numerics-and-slow", fleet.inventories["roll"],
                                   "acceptance")  # fmt: skip
        assert code == 0, report
        for host in ("host-a", "host-b"):
            (check,) = [c for c in report["data"]["checks"]
                        if (c["host"], c["check"]) == (host, "served_speed")]  # fmt: skip
            assert re.match(r"[0-9.]+ output tok/s \(", check["message"]), check
        twice = f"{slow.group(2)}, then {slow.group(3)}"
        fleet.note(f"speed break: host-b served {twice} output tok/s (floor {SLOW_FLOOR})")
        # The same folder, rolled out with the replay off on host-a: it serves, healthy. Its
        # metrics are off too (the restart is one the break needs anyway): a host's own choice,
        # which group_runs_the_same does not count as a difference. Its speed gate is off (the
        # break above judged speed; a benchmark here would cost the suite half a minute).
        cut = {**cut, "sglang_service_metrics": False, "sglang_service_gate_speed": False}
        # Its gate timer remediates by a restart (issue 41): drift_fires_and_restarts_once.
        ungated = {"host-a": {**cut, "sglang_service_gate_numerics": False,
                              "sglang_service_gate_remediation": "restart"}}  # fmt: skip
        ungated_inventory = fleet.inventory("cut-ungated", "cpu", ungated)
        code, out = fleet.play(ungated_inventory, "rollout.yml",
                               "-e", f"sglx_bundle_path={v1}", *BOTH)  # fmt: skip
        assert code == 0, out
        code, report = fleet.check(
            "break-numerics", fleet.inventory("cut", "cpu", {"host-a": cut}), "acceptance"
        )
        assert code == 1
        assert failures(report) == {("host-a", "served_numerics")}, report
        said = message(report, "host-a", "served_numerics")
        assert f"host host-a: prompt '{drift.group(1)}': served numbers drift" in said, said
        seen = outcomes(report, "host-a")
        configuration = set(SERVING_CHECKS) - {"served_numerics", "metrics_served", "served_speed"}
        assert all(seen[c] == "passed" for c in configuration), report
        # sglang_service_metrics: false: SGLX_METRICS=0 reached the server, which serves no
        # metrics route, and acceptance says so instead of failing; likewise the speed gate off
        assert (seen["metrics_served"], seen["served_speed"]) == ("skipped", "skipped"), report
        assert http(f"http://127.0.0.1:{fleet.ports['host-a']}/metrics", None, 30)[0] == 404
        assert "SGLX_METRICS=0" in a.exec("cat /etc/sglx/sglx-server.env")
        drift_fires_and_restarts_once(fleet, ungated_inventory, drift.group(1))
    except BaseException:  # host-a back on the image's own model, for the tests after this one
        fleet.play(fleet.inventories["roll"], "rollout.yml", "-e", f"sglx_bundle_path={v1}", *BOTH)
        raise
    # Passed: host-a stays on the cut folder, ungated; the failed upgrade after this test moves
    # it to the second version (its inventory names no model folder), a restart saved.


def drift_fires_and_restarts_once(fleet: Fleet, inventory: Path, prompt: str) -> None:
    """Issue 41 on the fleet as it is: host-a serves the cut weights and its gate timer's
    policy is `restart`. A real Prometheus scrapes both hosts' node exporters (job sglx-gate,
    monitoring.yml). host-a's timed run fails the numerics, restarts the server once and
    SglxNumericsDrift fires for host-a alone; the next run, the rate limit spent, only alerts."""
    a, _ = fleet.hosts
    prom = fleet.watch(inventory)
    scraped = lambda: sorted(s["metric"]["host"] for s in prom.query('up{job="sglx-gate"} == 1'))  # noqa: E731
    prom.wait_for("scrape of both node exporters", lambda: scraped() == ["host-a", "host-b"])
    started = a.exec("systemctl show -p ExecMainStartTimestampMonotonic --value sglx-server")
    a.exec("systemctl start sglx-server-gate.service")  # returns when the run has ended
    record = json.loads(a.exec("cat /var/lib/sglx/gate-timer.json"))
    judged = record["finished_at"]  # the checks' end; the series land, then the restart
    assert record["remediation"] == "restart", record
    assert f"prompt '{prompt}': served numbers drift" in record["checks"]["numerics"]["message"]
    assert [x["action"] for x in record["actions"]] == ["restart"], record
    again = a.exec("systemctl show -p ExecMainStartTimestampMonotonic --value sglx-server")
    assert again != started, (started, again)  # systemd started the server anew
    firing = [("SglxNumericsDrift", "host-a", "firing")]
    prom.wait_for("SglxNumericsDrift firing for host-a", lambda: [
        (x["labels"]["alertname"], x["labels"].get("host"), x["state"]) for x in prom.alerts()
    ] == firing)  # fmt: skip
    (alert,) = prom.alerts()
    active = datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", alert["activeAt"]))
    latency = active.timestamp() - judged
    fleet.note(f"prometheus: SglxNumericsDrift for host-a active {latency:.1f} s after its "
               "timed run judged (scrape, evaluation every 1 s; the rule waits 0m)")  # fmt: skip
    a.exec("systemctl start sglx-server-gate.service")
    record = json.loads(a.exec("cat /var/lib/sglx/gate-timer.json"))
    assert "rate limited" in record["remediation"], record
    assert [x["action"] for x in record["actions"]] == ["restart"], record
    journal = a.exec("journalctl -u sglx-server-gate -o cat")
    assert "host-a: remediation (restart): restart" in journal, journal
    assert "host-a: remediation (restart): alert (restarted 1 times" in journal, journal
    fleet.unwatch()
    # Out of service until the next rollout (the failed upgrade: its own restart), so the one
    # the gate began does not take the suite's cores from it.
    a.exec("systemctl stop sglx-server")


def truncated_model(work: Path, image: str) -> Path:
    """The image's model copied to a folder the hosts see (under the run's temp folder), the
    second half of each matrix of TRUNCATED_LAYER zeroed: a conversion cut short."""
    from safetensors.torch import load_file, save_file

    folder = work / "truncated-model"
    container = sh("docker", "create", image).stdout.strip()
    try:
        sh("docker", "cp", f"{container}:/models/model", str(folder))
    finally:
        sh("docker", "rm", "-f", container, check=False)
    (weights,) = folder.glob("*.safetensors")
    tensors = load_file(weights)
    cut = [
        name for name in tensors if name.startswith(TRUNCATED_LAYER) and tensors[name].dim() == 2
    ]
    assert cut, sorted(tensors)
    for name in cut:
        flat = tensors[name].reshape(-1).clone()
        flat[flat.numel() // 2 :] = 0
        tensors[name] = flat.reshape(tensors[name].shape)
    save_file(tensors, weights, metadata={"format": "pt"})
    for path in (folder, *folder.rglob("*")):  # the server runs as uid 1000
        path.chmod(0o755 if path.is_dir() else 0o644)
    return folder


def test_a_failed_upgrade_is_rolled_back(fleet: Fleet) -> None:
    """A second bundle version, a delta over the first (made since the fleet started, see
    `fleet`); host-b's model is broken, so its health gate fails: the rollout stops, host-b runs
    the first version again and serves, host-a serves the new one, loaded from the delta."""
    a, b = fleet.hosts
    v1, v1_id = fleet.state["v1"], fleet.state["v1_id"]
    v2, v2_id = fleet.state["v2"].result(timeout=1200)
    try:
        full, delta = bundle_bytes(v1), bundle_bytes(v2)
        fleet.note(f"bundle bytes: v1 (full) {full:,}, v2 (delta over v1) {delta:,}: "
                   f"{100 * delta / full:.4f} % of v1")  # fmt: skip
        image = json.loads((v2 / "bundle.json").read_text())["image"]
        assert image["parent"]["digest"] == digest_of(v1), image["parent"]
        assert image["parent"]["image_id"] == v1_id, image["parent"]
        b.exec("mkdir -p /srv/broken-model && echo '{not json' >/srv/broken-model/config.json")
        # The gate fails at the first crash, one second after it (site settings): what it
        # proves is the same as after three crashes, at a third of the server starts.
        broken = {
            "host-b": {
                "sglang_service_model_dir": "/srv/broken-model",
                "sglang_service_health_max_restarts": 0,
                "sglang_service_restart_sec": 1,
            }
        }
        # Copied from the control node this time: staged on both hosts (copy, verify, load)
        # before the first restart; the serial batches then hold no copy, verify or load.
        code, out = fleet.play(fleet.inventory("v2", "cpu", broken), "rollout.yml",
                               "-e", f"sglx_bundle_src={v2}",
                               "-e", f"sglx_bundle_path={ON_HOST_V2}")  # fmt: skip
        assert code != 0, out
        staging, serial = out.split("PLAY [Roll the bundle out]", 1)
        assert "PLAY [Stage the bundle on every host" in staging, out
        for host in ("host-a", "host-b"):
            assert f"{host}: staged: bundle {digest_of(v2)} loaded (image {v2_id})" in staging, out
            # The summary's bytes copied to each host: every file of the delta, once.
            line = rf"{host}: \w+: runs bundle [^\n]*; copied [^\n]* \({delta} bytes\)"
            assert re.search(line, serial), out
        assert "bundle_install :" not in serial and "Copy the bundle" not in serial, serial
        assert f"host-a: updated: runs bundle {digest_of(v2)}" in out
        assert f"host-b: rolled_back: runs bundle {digest_of(v1)}" in out
        assert "restarted" in out and "the server crashes on start" in out
        assert "rollout stopped: host-b failed the health gate" in out
        assert running_image(a) == v2_id
        assert running_image(b) == v1_id
        assert served(fleet, a) and served(fleet, b)
        # The checks see the split: host-b runs another image and bundle than host-a.
        code, report = fleet.check("after-rollback", fleet.inventories["v2"], "acceptance")
        assert code == 1
        assert failures(report) == {("host-b", "group_runs_the_same")}, report
        said = message(report, "host-b", "group_runs_the_same")
        assert f"image: '{v1_id}' here, '{v2_id}' on the others" in said
        # A host loaded the delta over the first version's layers (both staged at once on one
        # engine, so either may have found it loaded); the archive carried the new layer alone.
        record = f"/var/lib/sglx/bundles/{digest_of(v2).replace(':', '-')}.log"
        logs = a.exec(f"cat {record}") + b.exec(f"cat {record}")
        assert f"loading {image['ref']} from 1 chunks" in logs, logs
        *below, top = (layer["carried"] for layer in image["layers"])
        assert top and not any(below), image["layers"]
        assert delta < full / 100, (delta, full)  # issue 26: a plugin-only change, under 1 %
    finally:
        shutil.rmtree(v2, ignore_errors=True)


def group_nodes(fleet: Fleet, dist: int) -> dict[str, dict[str, Any]]:
    """Both hosts as the serving group `pair`, `--tp 2` over `--nnodes 2`, rendezvous on `dist`."""
    return {
        host.name: {
            "sglang_service_group": "pair",
            "sglang_service_group_address": "127.0.0.1",
            "sglang_service_group_port": dist,
            "sglang_service_args": ["--tp", "2"],
            # The two hosts share this machine's two cores: one each (a per-node value).
            "sglang_service_extra_env": {"SGLANG_CPU_OMP_THREADS_BIND": str(rank)},
        }
        for rank, host in enumerate(fleet.hosts)
    }


PAIR = {"pair": ["host-a", "host-b"]}


def test_a_serving_group_rolls_out_as_one_server(fleet: Fleet) -> None:
    """Both hosts as one serving group (inventory group `pair`): rollout.yml takes them as one
    batch, the collective smoke runs on both nodes before the server starts, host-a is node
    rank 0 and answers completions, and acceptance passes. The tests after it start from it."""
    a, b = fleet.hosts
    v1 = fleet.state["v1"]
    # The group's rendezvous, the smoke's after it and the ports sglang derives from it
    # (server_args.py: dist_init_port + 1 on), reused by the tests after this one.
    dist = reserved_port(span=12)
    inventory = fleet.inventory("pair", "cpu", group_nodes(fleet, dist), groups=PAIR)
    fleet.state["pair"] = dist
    code, out = fleet.play(inventory, "rollout.yml", "-e", f"sglx_bundle_path={v1}")
    assert code == 0, out
    assert f"host-a: updated: runs bundle {digest_of(v1)}" in out
    assert f"host-b: updated: runs bundle {digest_of(v1)}" in out
    # One batch of both nodes, even at the default serial of one host.
    assert out.count("PLAY [Roll the bundle out]") == 1, out
    assert re.search(r"All-reduce over the group's devices[^\n]*\n(ok: \[host-[ab]\]\n){2}", out)
    unit = b.exec("cat /etc/systemd/system/sglx-server.service")
    assert f"--nnodes 2 --node-rank 1 --dist-init-addr 127.0.0.1:{dist} --random-seed" in unit
    assert "--network host" in unit
    assert served(fleet, a)
    code, report = fleet.check("pair", inventory, "acceptance", "--bundle", str(v1))
    assert code == 0, report
    for host in ("host-a", "host-b"):
        assert outcomes(report, host)["serving_group_forms"] == "passed"
        assert outcomes(report, host)["group_runs_the_same"] == "passed"


@pytest.mark.breaks
def test_a_serving_group_whose_node_never_joins_the_collective_is_rolled_back(
    fleet: Fleet,
) -> None:
    """Issue 25's collective break: the `pair` group (as the test before left it), host-b given
    another sglang_service_group_port (group.yml builds --dist-init-addr, and the collective
    smoke its rendezvous port, from rank 0's address and each host's own port), so host-b's
    collective is blocked. Before the unit is written, the smoke on host-a (node rank 0) names
    rank 1 on host-b as never arrived, within its timeout, and host-b names the master it could
    not reach; the rollout rolls both nodes back to the group they ran, which serves again."""
    a = fleet.hosts[0]
    v1, dist = fleet.state["v1"], fleet.state["pair"]
    # host-b's group port; its smoke's rendezvous is the port after it, the one found free.
    elsewhere, timeout = free_port() - 1, 15
    blocked = {
        name: {**node, "sglang_service_gate_collective_timeout": timeout}
        for name, node in group_nodes(fleet, dist).items()
    }
    blocked["host-b"]["sglang_service_group_port"] = elsewhere
    broken = fleet.inventory("pair-collective-blocked", "cpu", blocked, groups=PAIR)
    code, out = fleet.play(broken, "rollout.yml", "-e", f"sglx_bundle_path={v1}")
    try:
        assert code != 0, out
        assert (f"host-a (node rank 0 of serving group host-a, host-b): the collective smoke "
                f"fails (rank 1 of node 1 (host-b) never arrived at the rendezvous "
                f"127.0.0.1:{dist + 1} within {timeout} s)") in out, out  # fmt: skip
        assert (f"rank 1 on node 1 (host-b) could not reach the master "
                f"127.0.0.1:{elsewhere + 1} (node 0, host-a)") in out, out  # fmt: skip
        assert "host-a: rolled_back" in out and "host-b: rolled_back" in out, out
        # Within the timeout: the smoke's task took its one phase and the container's start.
        runs = sorted((fleet.work / "ansible-junit").iterdir(), key=lambda d: d.stat().st_mtime)
        smoke = [
            float(case.get("time") or 0)
            for report in runs[-1].glob("*.xml")
            for case in ET.parse(report).getroot().iter("testcase")
            if "All-reduce over the group's devices" in (case.get("name") or "")
        ]
        assert smoke and max(smoke) < timeout + 60, smoke
        # Both nodes run the group's previous units again, and it serves through rank 0.
        for host in fleet.hosts:
            unit = host.exec("cat /etc/systemd/system/sglx-server.service")
            assert f"--dist-init-addr 127.0.0.1:{dist} " in unit, unit
        assert served(fleet, a)
    except AssertionError:  # the group as it was, for the test after this one
        fleet.play(fleet.inventories["pair"], "rollout.yml", "-e", f"sglx_bundle_path={v1}")
        raise


def test_a_serving_groups_communication_is_logged_for_one_restart(fleet: Fleet) -> None:
    """Seed 000's first step for a multi-card hang (issue 40 item 10): comm-debug.yml restarts
    the `pair` group's nodes together with the profile's comm_debug variables, fetches each
    node's log since that start to the control node (c10d's log at DETAIL in it), and restarts
    them as they were: the environment file byte for byte, and acceptance passes, the running
    server's environment included."""
    import tarfile

    a = fleet.hosts[0]
    dest = fleet.work / "comm-debug"
    env_file = "cat /etc/sglx/sglx-server.env"
    before = {host.name: host.exec(env_file) for host in fleet.hosts}
    code, out = fleet.play(fleet.inventories["pair"], "comm-debug.yml",
                           "-e", f"sglang_service_comm_debug_dest={dest}")  # fmt: skip
    assert code == 0, out
    for host in fleet.hosts:
        assert (f"{host.name}: answered /health with TORCH_CPP_LOG_LEVEL, "
                "TORCH_DISTRIBUTED_DEBUG; its log:") in out, out  # fmt: skip
        (archive,) = dest.glob(f"{host.name}-*.tar.gz")
        with tarfile.open(archive) as tar:
            member = tar.extractfile("server.log")
            assert member is not None
            log = member.read().decode(errors="replace")
        assert "[c10d] The debug level is set to DETAIL." in log, log[-3000:]
        assert host.exec(env_file) == before[host.name]
    assert served(fleet, a)
    code, report = fleet.check("pair-after-comm-debug", fleet.inventories["pair"], "acceptance")
    assert code == 0, report


def test_a_serving_groups_hand_changed_node_is_named(fleet: Fleet) -> None:
    """The `pair` group serving: host-b's server flag is changed by hand, the nodes' rank check
    refuses to start the group, and acceptance names host-b and the flag."""
    b = fleet.hosts[1]
    unit_path = "/etc/systemd/system/sglx-server.service"
    b.exec(f"sed -i '/^  sha256:/ s|$| --max-running-requests 7|' {unit_path}"
           " && systemctl daemon-reload && systemctl restart sglx-server")  # fmt: skip
    journal = "journalctl -u sglx-server -o cat --no-pager"
    deadline = time.monotonic() + 420
    while "config_refused" not in b.exec(journal, check=False):
        assert time.monotonic() < deadline, b.exec(f"{journal} -n 80")
        time.sleep(1)
    code, report = fleet.check("pair-hand-changed", fleet.inventories["pair"], "acceptance")
    assert code == 1
    assert ("host-b", "serving_group_forms") in failures(report), report
    assert ("host-a", "serving_group_forms") not in failures(report), report
    said = message(report, "host-b", "serving_group_forms")
    assert "arg:max_running_requests: '7' here" in said, said


def test_staging_pulls_from_a_site_registry_by_digest(
    fleet: Fleet, docker: Any, run_id: str
) -> None:
    """Issue 26: rollout.yml with a site registry (role sglx_registry: Debian's docker-registry
    on 127.0.0.1, tests/helpers/site_registry.py). The seed play pushes the bundle's image from
    the control node once; both hosts stage by pulling it by digest, and the control node copies
    them only the bundle's manifest files. Staging alone (`--tags sglx_rollout_stage`): the
    image is a tiny one (tests/helpers/bundles.py), which serves nothing.

    What one shared engine hides: the engine built the image, so it is removed first; the first
    host's pull then fetches its layer from the registry, and the other host's finds it (two
    machines would each fetch it); had the image stayed, the pulls would fetch no byte at all."""
    tag = f"sglx-test/registry-e2e:{run_id}"
    work = fleet.work / "registry"
    bundle = work / "bundle"
    image_id = import_tiny_image(docker, tag, blob_bytes=500_000)
    try:
        sh(str(BIN / "sglx"), "bundle", "create", "--arch", "cpu", "--image", tag,
           "--out", str(bundle), "--no-scan", "-q")  # fmt: skip
        remove_images(docker, image_id)
        assert not has_image(docker, image_id)
        with site_registry(work) as registry:
            code, out = fleet.play(
                fleet.inventory("registry", "cpu", {}), "rollout.yml",
                "--tags", "sglx_rollout_stage",
                "-e", f"sglx_bundle_src={bundle}", "-e", "sglx_bundle_path=/srv/sglx/bundles/tiny",
                "-e", json.dumps(registry.vars),
            )  # fmt: skip
            assert code == 0, out
            assert re.search(r"seeded \S+@sha256:[0-9a-f]{64} \(\S+\): pushed 1 of 1 layers", out)
            manifest_files = sum((bundle / f).stat().st_size for f in ("bundle.json", "SHA256SUMS"))
            for host in fleet.hosts:
                line = f"{host.name}: staged: bundle {digest_of(bundle)} loaded (image {image_id})"
                assert line in out, out
                listed = host.exec("ls /srv/sglx/bundles/tiny").split()
                assert sorted(listed) == ["SHA256SUMS", "bundle.json"], listed
            assert out.count(f"{manifest_files / 1024:.1f} KiB copied") == 2, out
            assert has_image(docker, image_id)
    finally:
        remove_images(docker, image_id)
        shutil.rmtree(work, ignore_errors=True)

"""AMD's host baseline (issue 22, item 3): the kernel arguments, the amdgpu floor read from the
version file or, while the driver is not loaded, from `modinfo -F version amdgpu`, and the
site's opt-in to load amdgpu after boot (modprobe.blacklist=amdgpu plus a systemd unit).

The role side runs for real: ansible-playbook over fixture hosts of this machine (local
connection) runs accel_host's preflight and renders its boot templates (GRUB drop-in,
modules-load.d, the after-boot unit) into a folder. The check side runs the host checks'
functions (hostchecks/test_preflight.py) over testinfra's local backend. Each fixture host gets
a `modinfo` (and `systemctl`) stand-in on PATH printing what a host with that driver prints;
this machine has no amdgpu. Built and tested on fixtures, not run on hardware.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import testinfra
import yaml

from sglx.ansible_vars import render_vars
from sglx_core.profile import load_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hostchecks"))

import test_preflight as checks  # the host checks' module: never collected from here
from facts import host_facts

ANSIBLE = Path(__file__).resolve().parents[3] / "ansible"
ROLE = ANSIBLE / "roles" / "accel_host"
BIN = Path(sys.executable).parent
TEMPLATES = {"grub.cfg.j2": "grub.cfg", "modules.conf.j2": "modules.conf",
             "load-modules.service.j2": "load-modules.service"}  # fmt: skip

PLAY = """
- hosts: all
  gather_facts: false
  environment:
    PATH: "{{ fake_bin }}:{{ lookup('ansible.builtin.env', 'PATH') }}"
  tasks:
    - ansible.builtin.include_role:
        name: accel_host
        tasks_from: preflight
        public: true
    - ansible.builtin.file:
        path: "{{ out }}/{{ inventory_hostname }}"
        state: directory
        mode: "0755"
    - ansible.builtin.template:
        src: "{{ role }}/templates/{{ item.key }}"
        dest: "{{ out }}/{{ inventory_hostname }}/{{ item.value }}"
        mode: "0644"
      loop: "{{ templates | dict2items }}"
"""

pytestmark = pytest.mark.skipif(
    Path("/sys/module/amdgpu/version").exists(),
    reason="this machine runs amdgpu: the fixtures stand for hosts whose driver is not loaded",
)


def fake_tools(folder: Path, modinfo: str | None, systemctl: str = "") -> Path:
    """A bin folder whose `modinfo -F version amdgpu` prints `modinfo` (None: no such module,
    exit 1) and whose `systemctl is-enabled UNIT` prints `systemctl`."""
    folder.mkdir(parents=True)
    said = "exit 1" if modinfo is None else f"printf '%s\\n' '{modinfo}'"
    (folder / "modinfo").write_text(
        f'#!/bin/sh\n[ "$*" = "-F version amdgpu" ] || exit 2\n{said}\n'
    )
    (folder / "systemctl").write_text(
        f"#!/bin/sh\n[ \"$1\" = is-enabled ] || exit 2\necho '{systemctl or 'disabled'}'\n"
        f"[ '{systemctl}' = enabled ]\n"
    )
    for tool in ("modinfo", "systemctl"):
        (folder / tool).chmod(0o755)
    return folder


def version_file(work: Path, version: str) -> Path:
    """A stand-in for /sys/module/amdgpu/version, as a loaded amdgpu-dkms writes it."""
    path = work / "sys-module-amdgpu-version"
    path.write_text(version + "\n")
    return path


def amd_host(arch: str = "gfx942", **site: Any) -> dict[str, Any]:
    """The arch's rendered variables as an inventory gives them, on a host of this machine
    (no /dev/kfd here: the device node assertion is not what these tests are about)."""
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        **render_vars(load_profile(arch)),
        "accel_host_device_nodes": [],
        **site,
    }


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], str]:
    work = tmp_path_factory.mktemp("accel-host")
    hosts = {
        # driver 30.20.1 (amdgpu-dkms 6.16.6), loaded by the kernel at boot
        "mi300x-boot": amd_host(fake_bin=str(fake_tools(work / "b1", "6.16.6"))),
        # 31.50 (a Linux 7.x base); the site loads amdgpu after boot ("yes": Ansible's bool)
        "mi355x-late": amd_host(
            "gfx950",
            accel_host_load_after_boot="yes",
            fake_bin=str(fake_tools(work / "b2", "7.0.3")),
        ),
        # a 6.4.x driver: below the floor AMD pairs with ROCm 10.0.0
        "mi300x-old": amd_host(fake_bin=str(fake_tools(work / "b3", "6.12.12"))),
        # a loaded driver answers in its version file, and modinfo is not asked
        "mi300x-loaded": amd_host(
            accel_host_driver={
                **render_vars(load_profile("gfx942"))["accel_host_driver"],
                "version_file": str(version_file(work, "6.12.12")),
            },
            fake_bin=str(fake_tools(work / "b6", "9.9.9")),
        ),
        # the distribution kernel's own amdgpu: modinfo prints no version
        "mi300x-inbox": amd_host(fake_bin=str(fake_tools(work / "b4", ""))),
        # a profile with nothing to load after boot, and a site that asks for it anyway
        "cpu-late": {
            **amd_host("cpu"),
            "accel_host_load_after_boot": True,
            "fake_bin": str(fake_tools(work / "b5", None)),
        },
    }
    (work / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    (work / "play.yml").write_text(PLAY)
    (work / "templates.json").write_text(json.dumps({"templates": TEMPLATES}))
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(work / "inventory.yml"), str(work / "play.yml"),
         "-e", f"out={work / 'out'}", "-e", f"role={ROLE}", "-e", f"@{work / 'templates.json'}"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
    )  # fmt: skip
    return work / "out", hosts, done.stdout + done.stderr


def failure(out: str, host: str) -> str:
    for line in out.splitlines():
        if line.startswith(f"fatal: [{host}]: FAILED! => "):
            return str(json.loads(line.split(" => ", 1)[1])["msg"])
    raise AssertionError(f"{host} did not fail:\n{out}")


def grub_args(folder: Path) -> list[str]:
    (line,) = [x for x in (folder / "grub.cfg").read_text().splitlines() if x.startswith("GRUB_")]
    found = re.fullmatch(r'GRUB_CMDLINE_LINUX="\$\{GRUB_CMDLINE_LINUX\} (.*)"', line)
    assert found, line
    return found.group(1).split()


def module_lines(folder: Path) -> list[str]:
    text = (folder / "modules.conf").read_text()
    return [x for x in text.splitlines() if x and not x.startswith("#")]


# --- the role ---------------------------------------------------------------------------------


def test_kernel_arguments_are_amds_and_the_checks_expect_the_same(rendered: Any) -> None:
    out, hosts, log = rendered
    args = grub_args(out / "mi300x-boot")
    assert args == ["pci=realloc=off", "pci=bfsort", "iommu=pt", "numa_balancing=disable"], log
    assert host_facts("mi300x-boot", hosts["mi300x-boot"], None).kernel_cmdline == args
    assert module_lines(out / "mi300x-boot") == ["amdgpu"]


def test_after_boot_blacklists_amdgpu_and_a_unit_loads_it(rendered: Any) -> None:
    out, hosts, log = rendered
    folder = out / "mi355x-late"
    args = grub_args(folder)
    assert args[-1] == "modprobe.blacklist=amdgpu", log
    facts = host_facts("mi355x-late", hosts["mi355x-late"], None)
    assert facts.kernel_cmdline == args and facts.late_modules == ["amdgpu"]
    # modules-load.d leaves amdgpu to the unit (it would only log the blacklist otherwise)
    assert module_lines(folder) == []
    unit = (folder / "load-modules.service").read_text()
    assert "ExecStart=/sbin/modprobe -a amdgpu\n" in unit
    assert "Before=docker.service\n" in unit and "WantedBy=multi-user.target\n" in unit
    assert "Type=oneshot\n" in unit and "RemainAfterExit=yes\n" in unit
    analyze = shutil.which("systemd-analyze")
    if analyze and Path("/sbin/modprobe").exists():  # verify checks that the executable exists
        done = subprocess.run([analyze, "verify", "--man=no", str(folder / "load-modules.service")],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert "load-modules.service" not in done.stderr, done.stderr


def test_preflight_reads_the_driver_from_modinfo_when_it_is_not_loaded(rendered: Any) -> None:
    out, _, log = rendered
    # 6.16.6 and 7.0.3 meet the floor 6.14.14: preflight passed, the templates were written
    assert (out / "mi300x-boot" / "grub.cfg").is_file(), log
    assert (out / "mi355x-late" / "grub.cfg").is_file(), log
    old = failure(log, "mi300x-old")
    assert old.startswith("the driver must be 6.14.14 or newer (AMD GPU Driver 30.10")
    assert (
        "/sys/module/amdgpu/version is absent (the driver is not loaded, or declares no "
        "version) and `modinfo -F version amdgpu` reads '6.12.12': install a newer driver"
    ) in old
    loaded = failure(log, "mi300x-loaded")
    assert loaded.endswith("sys-module-amdgpu-version reads '6.12.12': install a newer driver "
                           "from the vendor's offline package")  # fmt: skip
    inbox = failure(log, "mi300x-inbox")
    assert (
        "`modinfo -F version amdgpu` reads '' (no such module installed, or the kernel's own "
        "driver, which declares no version)" in inbox
    )


def test_preflight_refuses_after_boot_where_the_profile_offers_no_module(rendered: Any) -> None:
    _, _, log = rendered
    assert failure(log, "cpu-late") == (
        "accel_host_load_after_boot is true, but the cpu profile names no module that may be "
        "loaded after boot (host.after_boot): set accel_host_load_after_boot false"
    )


# --- the host checks ----------------------------------------------------------------------------


def _checks_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, modinfo: str | None,
               systemctl: str = "", **site: Any) -> tuple[Any, Any]:  # fmt: skip
    monkeypatch.setenv("PATH", f"{fake_tools(tmp_path / 'bin', modinfo, systemctl)}:"
                               f"{os.environ['PATH']}")  # fmt: skip
    facts = host_facts("mi300x", {"sglx_arch": "gfx942", **site}, None)
    return testinfra.get_host("local://"), facts


def test_driver_check_reads_modinfo_as_the_role_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, facts = _checks_on(tmp_path, monkeypatch, "6.16.6")
    checks.test_driver_minimum(host, facts)  # passes: 6.16.6 >= 6.14.14


@pytest.mark.parametrize(
    ("modinfo", "said"),
    [
        ("6.12.12", "`modinfo -F version amdgpu` is 6.12.12, below the minimum 6.14.14. "
                    "Fix: AMD GPU Driver 30.10"),
        ("", "`modinfo -F version amdgpu` reads nothing (no such module installed, or the "
             "kernel's own driver, which declares no version). Fix: AMD GPU Driver 30.10"),
        (None, "reads nothing (no such module installed"),
    ],
)  # fmt: skip
def test_driver_check_names_what_modinfo_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, modinfo: str | None, said: str
) -> None:
    host, facts = _checks_on(tmp_path, monkeypatch, modinfo)
    with pytest.raises(pytest.fail.Exception) as failed:
        checks.test_driver_minimum(host, facts)
    assert str(failed.value).startswith("/sys/module/amdgpu/version is absent (the driver is not")
    assert said in str(failed.value)


def test_module_check_names_the_unit_that_loads_amdgpu_after_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, facts = _checks_on(
        tmp_path, monkeypatch, "6.16.6", "disabled", accel_host_load_after_boot=True
    )
    with pytest.raises(pytest.fail.Exception) as failed:
        checks.test_kernel_modules(host, facts)
    assert str(failed.value) == (
        "sglx-load-modules.service, which loads amdgpu after boot, is not enabled (disabled); "
        "amdgpu is not loaded: it is blacklisted at boot and sglx-load-modules.service loads it "
        "(systemctl status sglx-load-modules.service; journalctl -b -u "
        "sglx-load-modules.service). Fix: install the vendor's driver package, then run site.yml "
        "for this host (it loads the modules and writes what loads them at boot)"
    )


def test_module_check_passes_a_module_loaded_after_boot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # /sys/module/<name> is the one thing that tells: "kernel" is there on every Linux, and a
    # module the unit loaded after boot is there the same way.
    host, facts = _checks_on(
        tmp_path, monkeypatch, "6.16.6", "enabled", accel_host_load_after_boot=True
    )
    late = {**facts.vars, "accel_host_modules": ["kernel"],
            "accel_host_after_boot_modules": ["kernel"]}  # fmt: skip
    checks.test_kernel_modules(host, type(facts)(facts.name, facts.arch, late, facts.profile))


def test_a_module_nothing_loaded_fails_or_is_pending_on_a_container_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host, facts = _checks_on(tmp_path, monkeypatch, "6.16.6")
    said = "amdgpu is not loaded"
    if checks._in_container(host):  # this machine: its kernel is the one that runs it
        with pytest.raises(pytest.xfail.Exception, match=f"^{said}. This host is a container"):
            checks.test_kernel_modules(host, facts)
    else:
        with pytest.raises(pytest.fail.Exception, match=f"^{said}. Fix: install the vendor's"):
            checks.test_kernel_modules(host, facts)

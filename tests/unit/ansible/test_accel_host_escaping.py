"""The accel_host role applied with hostile inventory values (issue 37 item 2): every template
and command goes through the escaping filters of role sglx_escape, commands take argv lists.

Before: `$(...)` in a kernel argument ran when update-grub sourced the GRUB drop-in; a space in
a sysctl value added arguments to `sysctl -w` (`vm.x: "1 kernel.core_pattern=|/prog"` set
core_pattern); a key `-p/FILE` and a module `-C DIR` were options; a newline added udev `RUN+=`
rules, `LD_PRELOAD=` to the server's env file, and limits.d lines; a multi-value sysctl
(net.ipv4.ip_local_port_range) broke the task.

The whole role runs for real (ansible-playbook, local connection, one fixture host per case)
with every file it writes under a temporary folder, and stand-ins for the commands that would
change this machine (sysctl, modprobe, update-grub, udevadm) first on PATH: each logs the argv
it was given, one argument a line, and the fake sysctl keeps the values written. So the test
reads the files as they landed and the arguments as they crossed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.ansible_play import ansible_playbook

from sglx.ansible_vars import render_vars
from sglx_core.profile import load_profile

FAKE_SYSCTL = """#!/bin/sh
# -n KEY: the value kept (the kernel's tab between words), else 0; -w KEY=VALUE: keep it
printf '%s\\n' "--- sysctl" "$@" >>"$FAKE_LOG"
if [ "$1" = -n ]; then
  f="$FAKE_STATE/$2"; if [ -f "$f" ]; then tr ' ' '\\t' <"$f"; else echo 0; fi; exit 0
fi
if [ "$1" = -w ] && [ $# -eq 2 ]; then
  key=${2%%=*}; printf '%s\\n' "${2#*=}" >"$FAKE_STATE/$key"; exit 0
fi
exit 2
"""
FAKE_LOGGER = """#!/bin/sh
printf '%s\\n' "--- $(basename "$0")" "$@" >>"$FAKE_LOG"
"""
# modprobe finds no such module, as on this machine: the role says so and changes nothing.
FAKE_MODPROBE = FAKE_LOGGER + "exit 1\n"
PORT_RANGE = "net.ipv4.ip_local_port_range"


def host(work: Path, name: str, **site: Any) -> dict[str, Any]:
    """A fixture host of this machine: the cpu profile's variables, every file of the role under
    work/name, the fake tools first on PATH."""
    root = work / name
    (root / "state").mkdir(parents=True)
    return {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        **render_vars(load_profile("cpu")),
        "accel_host_create_user": False,
        "accel_host_udev_rules_file": str(root / "70-sglx.rules"),
        "accel_host_sysctl_file": str(root / "90-sglx.conf"),
        "accel_host_grub_dropin": str(root / "grub.d" / "90-sglx.cfg"),
        "accel_host_modules_file": str(root / "modules-load.d" / "sglx.conf"),
        "accel_host_env_file": str(root / "sglx" / "accel.env"),
        "accel_host_limits_file": str(root / "limits.d" / "90-sglx.conf"),
        "accel_host_state_dir": str(root / "var"),
        "fake_env": {"FAKE_LOG": str(root / "calls.log"), "FAKE_STATE": str(root / "state")},
        **site,
    }


PLAY = [
    {
        "hosts": "all",
        "gather_facts": False,
        "environment": "{{ fake_env }}",
        "roles": [{"role": "accel_host"}],
    }
]

# Each hostile value and the words its refusal must hold (the variable it came from).
HOSTILE: dict[str, tuple[dict[str, Any], str]] = {
    "grub-command": (
        {"accel_host_kernel_cmdline": ["iommu=pt", "x=$(touch /tmp/sglx-pwned)"]},
        "a kernel argument (accel_host_kernel_cmdline): 'x=$(touch /tmp/sglx-pwned)' is not one",
    ),
    "grub-quote": (
        {"accel_host_kernel_cmdline": ['x" GRUB_X="y']},
        "a kernel argument (accel_host_kernel_cmdline)",
    ),
    "sysctl-option-key": (
        {"accel_host_sysctl": {"-p/etc/passwd": "1"}},
        "a sysctl name (accel_host_sysctl): '-p/etc/passwd' is not a dotted name",
    ),
    "modprobe-option": (
        {"accel_host_modules": ["-C", "/tmp"]},
        "a kernel module (accel_host_modules, accel_host_after_boot_modules): '-C'",
    ),
    "udev-newline": (
        {"accel_host_udev_rules": ['KERNEL=="kfd", MODE="0660"\nRUN+="/bin/sh -c id"']},
        "accel_host_udev_rules[0] holds a control character",
    ),
    "env-newline": (
        {"accel_host_service_env": {"HSA_X": "1\nLD_PRELOAD=/tmp/evil.so"}},
        "accel_host_service_env.HSA_X holds a control character",
    ),
    "env-name": (
        {"accel_host_service_env": {"LD_PRELOAD=/tmp/evil.so #": "1"}},
        "is no variable name",
    ),
    "limits-newline": (
        {"accel_host_limits": {"memlock": "unlimited\n* hard core 0"}},
        "accel_host_limits.memlock holds a control character",
    ),
    "limits-space": (
        {"accel_host_limits": {"memlock": "unlimited * hard core"}},
        "a field of the limits file (accel_host_limits, accel_host_service_user)",
    ),
    "unit-newline": (
        {
            "accel_host_load_after_boot": True,
            "accel_host_after_boot_modules": ["amdgpu"],
            "accel_host_after_boot_unit": "x.service\n",
        },
        "accel_host_after_boot_unit holds a control character",
    ),
}
LEGIT = {
    "accel_host_kernel_cmdline": ["iommu=pt", "amd_iommu=on", "pci=realloc=off"],
    # A multi-value sysctl (the kernel prints it with a tab), and a value with a space that must
    # stay one value: sysctl gets ONE argument and core_pattern is never named on its own.
    "accel_host_sysctl": {
        PORT_RANGE: "32768 60999",
        "vm.max_map_count": "262144",
        "vm.x": "1 kernel.core_pattern=|/prog",
    },
    "accel_host_modules": ["sglx_test_mod"],
    "accel_host_udev_rules": ['KERNEL=="kfd", GROUP="render", MODE="0660"'],
    "accel_host_service_env": {"HSA_X": 'a b $c "d" %e'},
}


def fake_bin(work: Path) -> Path:
    folder = work / "bin"
    folder.mkdir()
    (folder / "sysctl").write_text(FAKE_SYSCTL)
    for tool in ("update-grub", "udevadm"):
        (folder / tool).write_text(FAKE_LOGGER)
    (folder / "modprobe").write_text(FAKE_MODPROBE)
    for tool in folder.iterdir():
        tool.chmod(0o755)
    return folder


def calls(root: Path) -> list[list[str]]:
    """The commands the fake tools were given: one argv (tool first) each."""
    log = root / "calls.log"
    if not log.exists():
        return []
    found: list[list[str]] = []
    for line in log.read_text().splitlines():
        if line.startswith("--- "):
            found.append([line[4:]])
        else:
            found[-1].append(line)
    return found


def failure(out: str, host: str) -> str:
    for line in out.splitlines():
        if line.startswith(f"fatal: [{host}]: FAILED! => "):
            return str(json.loads(line.split(" => ", 1)[1])["msg"])
    raise AssertionError(f"{host} did not fail:\n{out}")


@pytest.fixture(scope="module")
def applied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    work = tmp_path_factory.mktemp("accel-host-escaping")
    tools = fake_bin(work)
    hosts = {name: host(work, name, **site) for name, (site, _) in HOSTILE.items()}
    hosts["legit"] = host(work, "legit", **LEGIT)
    (work / "legit" / "state" / PORT_RANGE).write_text("32768 60999\n")  # as the kernel has it
    first = ansible_playbook(work, PLAY, hosts, path=str(tools))
    again = ansible_playbook(work, PLAY, {"legit": hosts["legit"]}, path=str(tools))
    return work, first.stdout + first.stderr, again.stdout + again.stderr


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_value_is_refused_naming_its_variable_and_nothing_is_written(
    applied: tuple[Path, str, str], case: str
) -> None:
    work, out, _ = applied
    said = failure(out, case)
    assert HOSTILE[case][1] in said, said
    root = work / case
    written = [p.name for p in root.rglob("*") if p.is_file() and p.parent.name != "state"]
    assert written == [], written  # preflight refused before any file or command
    assert calls(root) == []
    assert not Path("/tmp/sglx-pwned").exists()


def test_legitimate_values_land_as_written_and_cross_as_one_argument_each(
    applied: tuple[Path, str, str],
) -> None:
    work, out, again = applied
    root = work / "legit"
    assert "fatal: [legit]" not in out, out
    grub = (root / "grub.d" / "90-sglx.cfg").read_text()
    assert (
        'GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX} iommu=pt amd_iommu=on pci=realloc=off"' in grub
    )
    sysctl_conf = (root / "90-sglx.conf").read_text()
    assert f"{PORT_RANGE} = 32768 60999\n" in sysctl_conf
    assert "vm.x = 1 kernel.core_pattern=|/prog\n" in sysctl_conf
    writes = [argv[1:] for argv in calls(root) if argv[:2] == ["sysctl", "-w"]]
    # The port range already held its words (printed with a tab): not written again.
    assert sorted(writes) == [
        ["-w", "vm.max_map_count=262144"],
        ["-w", "vm.x=1 kernel.core_pattern=|/prog"],
    ], writes
    assert ["modprobe", "sglx_test_mod"] in calls(root)
    assert (root / "sglx" / "accel.env").read_text().splitlines()[-1] == 'HSA_X=a b $c "d" %e'
    assert (root / "70-sglx.rules").read_text().splitlines()[-1] == (
        'KERNEL=="kfd", GROUP="render", MODE="0660"'
    )
    # A second run changes nothing: the sysctls now read back what was written.
    recap = [line for line in again.splitlines() if line.startswith("legit ")]
    assert recap and "changed=0" in recap[-1], again

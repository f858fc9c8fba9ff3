"""Kunlun's firmware floor (1.48, read with `xpu-smi -q`) on fixture hosts of this machine:
`sglx hosts check` (real pytest, testinfra, local connection) and accel_host's preflight
(real ansible-playbook) over the same three hosts, each with its own xpu-smi stand-in printing
the real `xpu-smi -q` layout (helpers/xpu_smi.py): one whose cards are all at or above the
floor, one with a card at 1.40, and one without xpu-smi. Both read the host through the role's
filter plugin (filter_plugins/sglx_host_versions.py), so both say the same thing.

The other Kunlun checks (device nodes, kernel command line, the driver's /proc/kunlun/version)
fail on this machine, which has no Kunlun card; only the firmware check's outcome is asserted.
Built and tested on fixtures, not run on hardware.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.xpu_smi import fake_xpu_smi, xpu_smi_q

from sglx.ansible_vars import render_vars
from sglx_core.profile import load_profile

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent
BELOW = (
    "the firmware of 1 of 2 card(s) is below the floor 1.48: "
    "00000000:02:00.0 (P800 OAM, KL3) has 1.40"
)


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("kunlun-fw")
    hosts = {
        "p800-current": str(fake_xpu_smi(work / "current", xpu_smi_q(["1.54", "1.48"]))),
        "p800-old": str(fake_xpu_smi(work / "old", xpu_smi_q(["1.54", "1.40"]))),
        "p800-no-tool": str(work / "absent" / "xpu-smi"),
    }
    inventory = work / "hosts.yml"
    common = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sglx_arch": "kunlun",
        # no sglx server here: an isolated state file, so the image checks skip
        "sglang_service_state_file": str(work / "deployed.json"),
    }
    inventory.write_text(yaml.safe_dump({"sglx": {"hosts": {
        name: {**common, "accel_host_xpu_smi": tool} for name, tool in hosts.items()
    }}}))  # fmt: skip
    return inventory


def test_hosts_check_passes_the_current_firmware_and_names_the_old(inventory: Path) -> None:
    done = subprocess.run(
        [str(BIN / "sglx"), "hosts", "check", "--no-sudo", "--json", "-i", str(inventory),
         "--workers", "2"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    envelope = json.loads(done.stdout)
    outcome = {
        (c["host"], c["check"]): c for c in envelope["data"]["checks"]
    }  # fmt: skip
    assert outcome["p800-current", "firmware_minimum"]["outcome"] == "passed", envelope
    assert outcome["p800-old", "firmware_minimum"]["outcome"] == "failed"
    not_checked = outcome["p800-no-tool", "firmware_minimum"]
    assert not_checked["outcome"] == "skipped"
    assert "not checked: " in not_checked["message"] and "absent/xpu-smi" in not_checked["message"]
    (finding,) = [f for f in envelope["findings"] if f["code"] == "host_firmware_minimum"]
    assert finding["message"] == f"p800-old: firmware_minimum: {BELOW}."
    assert finding["hint"].startswith("update the card firmware to 1.48 or newer (FastDeploy's")


def test_the_role_preflight_says_the_same(inventory: Path, tmp_path: Path) -> None:
    profile = {
        **render_vars(load_profile("kunlun")),
        # This machine has no card nor driver: no device nodes to find, and the driver floor
        # read from a stand-in for /proc/kunlun/version through the same parser.
        "accel_host_device_nodes": [],
        "accel_host_driver": {
            "min_version": "5.0.21.26",
            "version_file": str(tmp_path / "kunlun-version"),
            "note": "FastDeploy's P800 requirement",
        },
    }
    (tmp_path / "kunlun-version").write_text("KUNLUN XPU driver (gcc 9.4.0) 5.0.21.38\n")
    (tmp_path / "vars.yml").write_text(yaml.safe_dump(profile))
    (tmp_path / "play.yml").write_text(yaml.safe_dump([{
        "hosts": "sglx", "gather_facts": False,
        "tasks": [{"name": "Preflight", "ansible.builtin.include_role": {
            "name": "accel_host", "tasks_from": "preflight"}}],
    }]))  # fmt: skip
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(tmp_path / "play.yml"),
         "-e", f"@{tmp_path / 'vars.yml'}"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 2, out[-3000:] + done.stderr
    failed = [line for line in out.splitlines() if line.startswith("fatal: [")]
    assert len(failed) == 1 and failed[0].startswith("fatal: [p800-old]: FAILED! => "), out
    said = json.loads(failed[0].split(" => ", 1)[1])["msg"]
    assert said.startswith(f"{BELOW}: update the card firmware to 1.48 or newer")
    assert "firmware floor 1.48 not checked: " in out and "absent/xpu-smi is not on" in out
    recap = out[out.index("PLAY RECAP") :]
    for host in ("p800-current", "p800-no-tool"):
        assert f"{host}" in recap and "failed=0" in recap.split(host, 1)[1].splitlines()[0]

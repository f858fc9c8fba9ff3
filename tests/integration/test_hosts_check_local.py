"""`sglx hosts check` end to end on this machine (an inventory of one local host): real pytest,
testinfra's Ansible backend, pytest-xdist workers and the JUnit report read back. The e2e test
runs the same command over SSH against configured test hosts (tests/e2e)."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.docker  # the engine check asks the real engine

SGLX = str(Path(sys.executable).parent / "sglx")


def _inventory(tmp_path: Path, **host_vars: object) -> Path:
    inventory = tmp_path / "hosts.yml"
    local = {"ansible_connection": "local", **host_vars}
    inventory.write_text(yaml.safe_dump({"sglx": {"hosts": {"localhost": local}}}))
    return inventory


def _check(*args: str) -> tuple[int, dict, str]:
    done = subprocess.run(
        [SGLX, "hosts", "check", "--no-sudo", "--json", *args],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    return done.returncode, json.loads(done.stdout), done.stderr


def test_preflight_of_a_cpu_host_passes_and_writes_junit(tmp_path: Path) -> None:
    junit = tmp_path / "report" / "hosts.xml"
    junit.parent.mkdir()
    code, envelope, _ = _check(
        "-i", str(_inventory(tmp_path, sglx_arch="cpu")), "--junitxml", str(junit)
    )
    assert code == 0, envelope
    seen = {c["check"]: c["outcome"] for c in envelope["data"]["checks"]}
    assert seen["container_engine"] == "passed"
    # The cpu profile has no device nodes, kernel arguments or sysctls: skipped, not passed.
    assert seen["device_nodes"] == seen["kernel_command_line"] == seen["sysctl"] == "skipped"
    assert not any(c["mode"] == "acceptance" for c in envelope["data"]["checks"])
    names = {case.get("name") for case in ET.parse(junit).getroot().iter("testcase")}
    assert "test_container_engine[ansible://localhost]" in names
    assert not list(junit.parent.glob(".*.tmp"))


def test_acceptance_names_the_failing_checks_and_their_fixes(tmp_path: Path) -> None:
    # An isolated state file and unit name: this machine runs no sglx server.
    inventory = _inventory(
        tmp_path, sglx_arch="cpu", sglang_service_name="sglx-none",
        sglang_service_container="sglx-none", sglang_service_state_file=str(tmp_path / "d.json"),
    )  # fmt: skip
    code, envelope, _ = _check("-i", str(inventory), "--mode", "acceptance")
    assert code == 1
    found = {f["code"]: f for f in envelope["findings"]}
    assert set(found) == {"host_bundle_image_present", "host_service_active"}
    assert found["host_service_active"]["message"].startswith("localhost: service_active: ")
    assert "systemctl enable --now sglx-none" in found["host_service_active"]["hint"]
    # Checks that need the running server are skipped, not failed a second time.
    seen = {c["check"]: c["outcome"] for c in envelope["data"]["checks"]}
    assert seen["running_server_environment"] == seen["health_and_completion"] == "skipped"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--limit", "nowhere"], "no host of"),
        (["--arch", "nosuch"], "unknown arch 'nosuch'"),
        ([], "no arch for localhost"),
    ],
)
def test_what_cannot_be_checked_is_exit_2_with_the_fix(
    tmp_path: Path, args: list[str], words: str
) -> None:
    code, envelope, _ = _check("-i", str(_inventory(tmp_path)), *args)
    assert code == 2
    (error,) = envelope["errors"]
    assert words in error["message"] and error["hint"]


def test_a_missing_inventory_is_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [SGLX, "hosts", "check", "-i", str(tmp_path / "none.yml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith(f"sglx: error: inventory {tmp_path / 'none.yml'} does not exist")
    assert "Traceback" not in done.stderr

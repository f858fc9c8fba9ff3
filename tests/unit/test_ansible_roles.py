"""The Ansible roles: defaults and argument_specs list the same keys; the playbooks parse."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
ROLES = sorted(p.name for p in (ANSIBLE / "roles").iterdir())
BIN = Path(sys.executable).parent


def specs(role: str) -> dict[str, dict]:
    doc = yaml.safe_load((ANSIBLE / "roles" / role / "meta" / "argument_specs.yml").read_text())
    return doc["argument_specs"]


def test_the_four_roles_exist() -> None:
    assert ROLES == ["accel_host", "bundle_install", "container_runtime", "sglang_service"]


@pytest.mark.parametrize("role", ROLES)
def test_defaults_and_argument_specs_list_the_same_keys(role: str) -> None:
    defaults = yaml.safe_load((ANSIBLE / "roles" / role / "defaults" / "main.yml").read_text())
    options = specs(role)["main"]["options"]
    assert sorted(defaults) == sorted(options)
    for name, value in defaults.items():
        assert name.startswith(role + "_"), f"{name} lacks the role prefix {role}_"
        assert options[name]["default"] == value, name
        assert "type" in options[name] and options[name]["description"], name


@pytest.mark.parametrize("role", ROLES)
def test_every_entry_point_validates_the_same_options(role: str) -> None:
    entries = specs(role)
    for name, entry in entries.items():
        assert sorted(entry["options"]) == sorted(entries["main"]["options"]), name
        assert (ANSIBLE / "roles" / role / "tasks" / f"{name}.yml").is_file(), name


@pytest.mark.parametrize("role", ROLES)
def test_preflight_only_asserts_and_reads(role: str) -> None:
    tasks = yaml.safe_load((ANSIBLE / "roles" / role / "tasks" / "preflight.yml").read_text())
    readers = {
        "ansible.builtin.assert",
        "ansible.builtin.find",
        "ansible.builtin.stat",
        "ansible.builtin.slurp",
        "ansible.builtin.getent",
        "ansible.builtin.debug",
        "ansible.builtin.command",
    }
    for task in tasks:
        module = next(k for k in task if k.startswith("ansible.builtin."))
        assert module in readers, f"{task['name']}: {module} changes the host"
        if module != "ansible.builtin.assert" and module != "ansible.builtin.debug":
            assert task.get("check_mode") is False or module == "ansible.builtin.getent", task


@pytest.mark.parametrize("playbook", ["site.yml", "rollout.yml", "bundle.yml"])
def test_playbooks_pass_syntax_check(playbook: str) -> None:
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "--syntax-check", playbook],
        cwd=ANSIBLE,
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg")},
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr

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


def _tasks(path: Path) -> list[dict]:
    """A task file's tasks, with the files it imports read in their place."""
    found = []
    for task in yaml.safe_load(path.read_text()):
        if "ansible.builtin.import_tasks" in task:
            found += _tasks(path.parent / task["ansible.builtin.import_tasks"])
        else:
            found.append(task)
    return found


@pytest.mark.parametrize("role", ROLES)
def test_preflight_only_asserts_and_reads(role: str) -> None:
    tasks = _tasks(ANSIBLE / "roles" / role / "tasks" / "preflight.yml")
    readers = {
        "ansible.builtin.assert",
        "ansible.builtin.find",
        "ansible.builtin.stat",
        "ansible.builtin.slurp",
        "ansible.builtin.getent",
        "ansible.builtin.debug",
        "ansible.builtin.command",
        "ansible.builtin.set_fact",
    }
    for task in tasks:
        module = next(k for k in task if k.startswith("ansible.builtin."))
        assert module in readers, f"{task['name']}: {module} changes the host"
        if module.removeprefix("ansible.builtin.") not in {"assert", "debug", "set_fact"}:
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

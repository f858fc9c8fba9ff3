"""The Ansible roles: defaults and argument_specs list the same keys; a role's README documents
its variables and the facts it exports; a role or playbook reaches another role only through
that role's documented entry points, never its internals; the playbooks parse."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ANSIBLE = Path(__file__).resolve().parents[3] / "ansible"
ROLES = sorted(p.name for p in (ANSIBLE / "roles").iterdir() if (p / "tasks").is_dir())
# Roles with no tasks and no variables, which others depend on for their plugins.
PLUGIN_ROLES = sorted(p.name for p in (ANSIBLE / "roles").iterdir() if not (p / "tasks").is_dir())
BIN = Path(sys.executable).parent


def specs(role: str) -> dict[str, dict]:
    doc = yaml.safe_load((ANSIBLE / "roles" / role / "meta" / "argument_specs.yml").read_text())
    return doc["argument_specs"]


def test_the_seven_roles_exist() -> None:
    assert ROLES == [
        "accel_host",
        "bundle_install",
        "container_runtime",
        "sglang_service",
        "sglx_prometheus",
        "sglx_registry",
        "sglx_rollout",
    ]
    assert PLUGIN_ROLES == ["sglx_escape"]


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


# Every role with tasks has a README.md (style.md, Ansible) that documents each variable and
# exported fact; a new role is held to it from its first commit.
WITH_README = ROLES


def _task_files(role: str) -> list[Path]:
    return sorted((ANSIBLE / "roles" / role / "tasks").glob("*.yml"))


def _walk(tasks: list[dict]) -> Iterator[dict]:
    """Every task of a task list, those inside blocks (block, rescue, always) included."""
    for task in tasks or []:
        yield task
        for part in ("block", "rescue", "always"):
            yield from _walk(task.get(part, []))


def exported_facts(role: str) -> set[str]:
    """Facts the role sets (set_fact, register) without the internal `__` prefix."""
    names: set[str] = set()
    for path in _task_files(role):
        for task in _walk(yaml.safe_load(path.read_text())):
            names.update(task.get("ansible.builtin.set_fact") or {})
            if "register" in task:
                names.add(task["register"])
    return {name for name in names if not name.startswith("_")}


@pytest.mark.parametrize("role", WITH_README)
def test_the_readme_documents_every_variable_and_exported_fact(role: str) -> None:
    readme = (ANSIBLE / "roles" / role / "README.md").read_text()
    defaults = yaml.safe_load((ANSIBLE / "roles" / role / "defaults" / "main.yml").read_text())
    headings = set(re.findall(r"^### `?([a-z0-9_]+)`?$", readme, flags=re.MULTILINE))
    assert sorted(set(defaults) - headings) == [], "variables without a ### heading"
    exported = readme.split("## Exported facts", 1)[1].split("\n## ", 1)[0]
    missing = sorted(f for f in exported_facts(role) if f"`{f}`" not in exported)
    assert missing == [], "facts set but not listed under ## Exported facts"


def _role_calls(path: Path) -> Iterator[tuple[str, str]]:
    """(role, entry point) of every include_role and import_role in a task file or playbook."""
    doc = yaml.safe_load(path.read_text()) or []
    plays = [p for p in doc if "hosts" in p] or [{"tasks": doc}]
    for play in plays:
        for role in play.get("roles", []):
            yield role["role"], "main"
        for task in _walk(play.get("tasks", [])):
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                if key in task:
                    yield task[key]["name"], task[key].get("tasks_from", "main")


PLAYBOOKS = [
    "site.yml",
    "rollout.yml",
    "bundle.yml",
    "registry.yml",
    "registry-gc.yml",
    "comm-debug.yml",
    "monitoring.yml",
]
CALLERS = [
    *(ANSIBLE / name for name in PLAYBOOKS),
    *(path for role in ROLES for path in _task_files(role)),
]


@pytest.mark.parametrize("path", CALLERS, ids=lambda p: str(p.relative_to(ANSIBLE)))
def test_roles_are_reached_only_through_documented_entry_points(path: Path) -> None:
    parts = path.relative_to(ANSIBLE).parts
    own = parts[1] if parts[0] == "roles" else ""  # a role may use its own internals
    for role, entry in _role_calls(path):
        if role != own:
            assert entry in specs(role), f"{role}: tasks_from {entry} is no entry point"
    text = path.read_text()
    for role in ROLES:
        if role != own:
            assert f"__{role}_" not in text, f"{path.name} reads {role}'s internals (__{role}_*)"


@pytest.mark.parametrize("playbook", PLAYBOOKS)
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

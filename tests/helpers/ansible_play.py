"""ansible-playbook on this machine for the tests: the repository's ansible.cfg and roles,
results as JSON (a `fatal: [HOST] => {...}` line parses), and an inventory of local hosts."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent


def ansible_playbook(
    work: Path,
    plays: list[dict[str, Any]],
    hosts: dict[str, dict[str, Any]],
    *args: str,
    path: str = "",
) -> subprocess.CompletedProcess[str]:
    """`plays` over the inventory `hosts` (names and their variables), `args` added to the
    command line, `path` first on PATH. The play and inventory files are new ones in `work`."""
    work.mkdir(parents=True, exist_ok=True)
    play = Path(tempfile.mkstemp(suffix=".yml", dir=work)[1])
    play.write_text(yaml.safe_dump(plays, sort_keys=False))
    inventory = Path(tempfile.mkstemp(suffix=".yml", dir=work)[1])
    inventory.write_text(yaml.safe_dump({"all": {"hosts": hosts}}))
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(inventory), str(play),
         "-e", f"ansible_python_interpreter={sys.executable}", *args],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_STDOUT_CALLBACK": "default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
             "PATH": ":".join(filter(None, [path, os.environ["PATH"]]))},
    )  # fmt: skip


def rollout_playbook(
    work: Path,
    hosts: dict[str, dict[str, Any]],
    *args: str,
    groups: dict[str, list[str]] | None = None,
) -> tuple[int, str]:
    """The repository's own rollout.yml over `hosts` run locally (`ansible_connection: local`,
    without become) in the group `sglx`, with `groups` under it; `args` added (tags, extra
    vars). Its exit code and all it printed."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory: dict[str, Any] = {
        "sglx": {
            "hosts": {name: {**local, **v} for name, v in hosts.items()},
            "children": {g: {"hosts": {h: {} for h in members}}
                         for g, members in (groups or {}).items()},
        }
    }  # fmt: skip
    work.mkdir(parents=True, exist_ok=True)
    (work / "hosts.yml").write_text(yaml.safe_dump(inventory))
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(work / "hosts.yml"), "rollout.yml",
         "-e", "ansible_become=false", *args],
        cwd=ANSIBLE, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
             "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr

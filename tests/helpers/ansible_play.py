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

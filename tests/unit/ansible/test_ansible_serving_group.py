"""What sglang_service makes of a serving group (tasks/group.yml), run by the real
ansible-playbook over a local inventory: node ranks in inventory order, the dist-init
address of the first host, one --random-seed for every node, the host network and each
node's own port."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ANSIBLE = Path(__file__).resolve().parents[3] / "ansible"
BIN = Path(sys.executable).parent

PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: sglang_service
        tasks_from: group
    - ansible.builtin.copy:
        content: "{{ {'rank': sglang_service_node_rank, 'network': __sglang_service_network_mode,
                      'args': __sglang_service_server_args} | to_json }}"
        dest: "{{ out }}/{{ inventory_hostname }}.json"
        mode: "0644"
      delegate_to: localhost
"""


def run(tmp_path: Path, inventory: dict[str, Any]) -> tuple[int, str, dict[str, dict]]:
    (tmp_path / "inventory.yml").write_text(yaml.safe_dump(inventory, sort_keys=False))
    (tmp_path / "play.yml").write_text(PLAY)
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(tmp_path / "inventory.yml"),
         str(tmp_path / "play.yml"), "-e", f"out={tmp_path}"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    found = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("*.json")}
    for node in found.values():
        node["rank"] = int(node["rank"])
    return done.returncode, done.stdout + done.stderr, found


def local(**more: Any) -> dict[str, Any]:
    return {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, **more}


def test_nodes_get_ranks_in_inventory_order_and_one_seed(tmp_path: Path) -> None:
    inventory = {
        "all": {
            "vars": {**local(), "sglang_service_network": "bridge", "sglang_service_port": 30000},
            "hosts": {
                "standalone": {},
                "alone-on-host": {
                    "sglang_service_network": "host",
                    "sglang_service_host_port": 30002,
                },
                "node-b": {"ansible_host": "10.0.0.2", "sglang_service_host_port": 30001},
                "node-a": {"ansible_host": "10.0.0.1"},
            },
        },
        "pair": {
            "vars": {"sglang_service_group": "pair", "sglang_service_args": ["--tp", "16"]},
            "hosts": {"node-a": {}, "node-b": {}},
        },
    }
    code, out, found = run(tmp_path, inventory)
    assert code == 0, out
    assert found["standalone"] == {"rank": 0, "network": "bridge", "args": []}
    # Alone on the host network, a host port other than the profile's is the server's own.
    assert found["alone-on-host"] == {"rank": 0, "network": "host", "args": ["--port", "30002"]}
    seed = found["node-a"]["args"][-3]
    assert found["node-a"] == {
        "rank": 0,
        "network": "host",
        "args": ["--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:29500",
                 "--random-seed", seed, "--tp", "16"],
    }  # fmt: skip
    # Its own port on the host network (the profile's is the default); the same seed.
    assert found["node-b"] == {
        "rank": 1,
        "network": "host",
        "args": ["--port", "30001", "--nnodes", "2", "--node-rank", "1",
                 "--dist-init-addr", "10.0.0.1:29500", "--random-seed", seed, "--tp", "16"],
    }  # fmt: skip
    assert seed.isdigit()


@pytest.mark.parametrize("group", ["pairs", "other"])
def test_a_group_that_does_not_hold_the_host_is_refused(tmp_path: Path, group: str) -> None:
    inventory = {
        "all": {"vars": local(), "hosts": {"node-a": {"sglang_service_group": group}}},
        "other": {"hosts": {"node-b": local()}},
    }
    code, out, _ = run(tmp_path, inventory)
    assert code != 0
    assert f"sglang_service_group is {group}, but node-a is not a host" in out, out

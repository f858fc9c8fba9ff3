"""The driver and image pairs that passed the serving gate (seed S0-49), run by the real
ansible-playbook over a local inventory: the gate's record names the driver's version beside the
image (sglang_service tasks/record.yml), the host keeps every validated pair once, newest last;
a driver that reads another version than the record is a change the plan counts as pending
(tasks/driver.yml), so the rollout runs the gate again on that host, with rollback.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from helpers.ansible_play import ansible_playbook
from helpers.test_hosts import recap

IMAGE, OTHER = "sha256:" + "a" * 64, "sha256:" + "b" * 64
BUNDLE = "sha256:" + "c" * 64


def _include(tasks_from: str) -> dict[str, Any]:
    return {"ansible.builtin.include_role": {"name": "sglang_service", "tasks_from": tasks_from}}


def plays(facts: Path) -> list[dict[str, Any]]:
    """The plan's driver reading (its facts written to `facts`), then the gate's record."""
    keep = {
        "ansible.builtin.copy": {
            "dest": str(facts),
            "content": "{{ {'version': sglang_service_driver_version, "
            "'changed': sglang_service_driver_changed, "
            "'validated': sglang_service_driver_validated} | to_json }}",
            "mode": "0644",
        }
    }
    return [
        {"hosts": "all", "gather_facts": False, "tasks": [_include("driver"), keep]},
        {"hosts": "all", "gather_facts": False, "tasks": [_include("record")]},
    ]


pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role writes root-owned records")


def test_the_gate_records_its_driver_and_a_new_driver_is_pending(tmp_path: Path) -> None:
    version = tmp_path / "sys" / "module" / "amdgpu" / "version"
    version.parent.mkdir(parents=True)
    version.write_text("6.14.14\n")
    state, validated = tmp_path / "deployed.json", tmp_path / "validated.json"
    host = {
        "ansible_connection": "local",
        "sglang_service_driver_version_file": str(version),
        "sglang_service_state_file": str(state),
        "sglang_service_validated_file": str(validated),
        "sglang_service_validated_keep": 2,
        "sglang_service_image": IMAGE,
        "sglang_service_bundle_digest": BUNDLE,
        "sglang_service_tuned_digest": "",
        "sglang_service_name": "sglx-server",
    }
    facts = tmp_path / "facts.json"

    def run(**changes: Any) -> tuple[dict[str, Any], str]:
        done = ansible_playbook(tmp_path / "plays", plays(facts), {"node": {**host, **changes}})
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(facts.read_text()), done.stdout

    seen, _ = run()
    assert seen == {"version": "6.14.14", "changed": False, "validated": ""}  # no record yet
    assert json.loads(state.read_text())["driver_version"] == "6.14.14"
    pairs = [{"image_id": IMAGE, "bundle_digest": BUNDLE, "driver_version": "6.14.14"}]
    assert json.loads(validated.read_text()) == pairs
    seen, out = run()
    assert seen["changed"] is False
    assert recap(out)["node"]["changed"] == 1  # only the facts file above; no record rewritten
    # The site upgraded the driver: the plan sees another version than the gate passed with.
    version.write_text("6.16.6\n")
    seen, _ = run()
    assert seen == {"version": "6.16.6", "changed": True, "validated": "6.14.14"}
    # The gate passed again (the play above recorded it): both pairs kept, newest last.
    assert [p["driver_version"] for p in json.loads(validated.read_text())] == ["6.14.14", "6.16.6"]
    run(sglang_service_image=OTHER)
    kept = json.loads(validated.read_text())
    assert [(p["image_id"], p["driver_version"]) for p in kept] == [
        (IMAGE, "6.16.6"),
        (OTHER, "6.16.6"),
    ]  # sglang_service_validated_keep: 2
    # A driver not loaded, or an arch without a version file (cpu, whose e2e rollouts record
    # driver_version ''), gives '' and nothing to compare (tasks/driver.yml).

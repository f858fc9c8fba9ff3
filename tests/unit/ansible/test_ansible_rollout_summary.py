"""rollout.yml's first and last plays (the sglx_rollout role's entry points `batches` and
`summary`), run by the real ansible-playbook over a local inventory with
`--tags sglx_rollout_batches,sglx_rollout_summary`, so no host is changed: the summary lines
the e2e matches, read through sglang_service's entry point `deployed` from each host's
sglang_service_state_file, and the failure when a host was rolled back. The middle play
(install, health gate, rollback) needs hosts with an engine: tests/e2e/test_ansible_rollout.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers.ansible_play import rollout_playbook

DIGEST = "sha256:" + "a" * 64
IMAGE = "sha256:" + "b" * 64


def play(tmp_path: Path, hosts: dict[str, dict[str, Any]], *extra: str) -> tuple[int, str]:
    return rollout_playbook(tmp_path, hosts, *extra)


def test_the_summary_names_each_hosts_outcome_and_bundle(tmp_path: Path) -> None:
    record = tmp_path / "a-deployed.json"
    record.write_text(json.dumps({"bundle_digest": DIGEST, "image_id": IMAGE, "unit": "u"}))
    hosts = {
        "host-a": {"sglang_service_state_file": str(record), "sglx_rollout_outcome": "updated"},
        "host-b": {"sglang_service_state_file": str(tmp_path / "none.json")},
    }
    code, out = play(tmp_path, hosts, "--tags", "sglx_rollout_batches,sglx_rollout_summary")
    assert code == 0, out
    assert f"host-a: updated: runs bundle {DIGEST} (image {IMAGE})" in out, out
    assert "host-b: not reached: runs bundle none (image none)" in out, out


def test_a_rolled_back_host_fails_the_rollout_naming_it(tmp_path: Path) -> None:
    record = tmp_path / "b-deployed.json"
    record.write_text(json.dumps({"bundle_digest": DIGEST, "image_id": IMAGE, "unit": "u"}))
    failed = "sha256:" + "c" * 64
    hosts = {
        "host-a": {"sglang_service_state_file": str(record), "sglx_rollout_outcome": "unchanged"},
        "host-b": {
            "sglang_service_state_file": str(record),
            "sglx_rollout_outcome": "rolled_back",
            "bundle_install_digest": failed,
            "sglx_rollout_error": "the server crashes on start",
        },
    }
    code, out = play(tmp_path, hosts, "--tags", "sglx_rollout_summary")
    assert code != 0, out
    assert f"host-a: unchanged: runs bundle {DIGEST}" in out, out
    assert (
        f"host-b: rolled_back: runs bundle {DIGEST} (image {IMAGE}); bundle {failed} failed: "
        "the server crashes on start"
    ) in out, out
    assert "rollout stopped: host-b failed the health gate" in out, out


def test_a_rollout_without_a_bundle_is_refused_naming_the_variable(tmp_path: Path) -> None:
    code, out = play(tmp_path, {"host-a": {}}, "--tags", "sglx_rollout_preflight")
    assert code != 0, out
    assert "sglx_rollout_bundle_path is empty: pass -e sglx_bundle_path=DIR" in out, out

"""monitoring.yml (role sglx_prometheus, fed by sglang_service's entry point scrape_target), run
by the real ansible-playbook over an inventory of hosts it never connects to: the targets file
holds one target group per host that serves metrics, the job and the rules pass the real
promtool, a second run changes nothing, and a rules file promtool refuses never lands. The e2e
(tests/e2e/test_ansible_rollout.py) scrapes a fleet with them in a real Prometheus."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.test_hosts import recap

ANSIBLE = Path(__file__).resolve().parents[3] / "ansible"
BIN = Path(sys.executable).parent
PROFILE = ANSIBLE / "inventory" / "example" / "group_vars" / "cpu" / "sglx_profile.yml"

needs_promtool = pytest.mark.skipif(
    shutil.which("promtool") is None, reason="promtool (Debian's prometheus) is not installed"
)


def inventory(tmp_path: Path) -> Path:
    """Five hosts: one on its own port, one publishing on an address, a serving group of two
    (rank 1 runs no HTTP server nor gate timer), one with metrics off; host-b's node exporter
    on a port of its own, quiet's gate series taken by the site's own node job (port 0)."""
    folder = tmp_path / "inventory"
    (folder / "group_vars" / "sglx").mkdir(parents=True)
    shutil.copy(PROFILE, folder / "group_vars" / "sglx" / "sglx_profile.yml")
    hosts = {
        "host-a": {"ansible_host": "10.0.0.1", "sglang_service_host_port": 31001},
        "host-b": {
            "ansible_host": "10.0.0.2",
            "sglang_service_publish_address": "127.0.0.1",
            "sglang_service_gate_node_exporter_port": 9911,
        },
        "node-0": {"ansible_host": "10.0.0.3", "sglang_service_fleet": "big-model"},
        "node-1": {"ansible_host": "10.0.0.4", "sglang_service_fleet": "big-model"},
        "quiet": {
            "ansible_host": "10.0.0.5",
            "sglang_service_metrics": False,
            "sglang_service_gate_node_exporter_port": 0,
        },
    }
    document = {
        "all": {"vars": {"ansible_python_interpreter": sys.executable}},
        "sglx": {"hosts": hosts},
        "pair": {
            "vars": {"sglang_service_group": "pair"},
            "hosts": {"node-0": {}, "node-1": {}},
        },
    }
    (folder / "hosts.yml").write_text(yaml.safe_dump(document, sort_keys=False))
    return folder / "hosts.yml"


def play(hosts: Path, prometheus: Path, *extra: str) -> tuple[int, str]:
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(hosts), "monitoring.yml",
         "-e", f"sglx_prometheus_config_dir={prometheus}", *extra],
        cwd=ANSIBLE, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def by_host(targets: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {group["labels"]["host"]: group for group in targets}


@needs_promtool
def test_targets_job_and_rules_land_checked_and_idempotent(tmp_path: Path) -> None:
    hosts, prometheus = inventory(tmp_path), tmp_path / "prometheus"
    code, out = play(hosts, prometheus)
    assert code == 0, out
    targets = by_host(json.loads((prometheus / "file_sd" / "sglx.json").read_text()))
    # node-1 (rank 1 of pair) and quiet (metrics off) serve no metrics route
    assert sorted(targets) == ["host-a", "host-b", "node-0"], targets
    assert targets["host-a"]["targets"] == ["10.0.0.1:31001"]
    assert targets["host-b"]["targets"] == ["127.0.0.1:30000"]
    assert targets["node-0"]["labels"] == {
        "__metrics_path__": "/metrics",
        "host": "node-0",
        "arch": "cpu",
        "fleet": "big-model",
        "serving_group": "pair",
        "nodes": "2",
    }
    assert targets["host-a"]["labels"]["fleet"] == "cpu"  # the arch, unless the site says
    # The gate timer's node exporters (on by default; rank 0 only; quiet's port is 0).
    gate = by_host(json.loads((prometheus / "file_sd" / "sglx-gate.json").read_text()))
    assert sorted(gate) == ["host-a", "host-b", "node-0"], gate
    assert (gate["host-a"]["targets"], gate["host-b"]["targets"]) == (
        ["10.0.0.1:9100"], ["127.0.0.1:9911"])  # fmt: skip
    assert gate["node-0"]["labels"] == {
        "host": "node-0", "arch": "cpu", "fleet": "big-model", "serving_group": "pair"}  # fmt: skip
    (job, gate_job) = yaml.safe_load((prometheus / "sglx.scrape.yml").read_text())
    assert (job["job_name"], gate_job["job_name"]) == ("sglx", "sglx-gate"), job
    assert gate_job["file_sd_configs"] == [
        {"files": [str(prometheus / "file_sd" / "sglx-gate.json")]}]  # fmt: skip
    # only the gate's and the communication share's series: the site's own node job keeps the rest
    (keep,) = gate_job["metric_relabel_configs"]
    assert (keep["source_labels"], keep["regex"], keep["action"]) == (
        ["__name__"], "sglx_(gate|comm_share)_.+", "keep")  # fmt: skip
    assert job["file_sd_configs"] == [{"files": [str(prometheus / "file_sd" / "sglx.json")]}]
    # sglang's names, which Prometheus 2.x receives escaped (sglang_NAME), put back
    (relabel,) = job["metric_relabel_configs"]
    assert (relabel["regex"], relabel["replacement"]) == ("sglang_(.+)", "sglang:$1"), relabel
    shipped = (ANSIBLE / "prometheus" / "sglx.rules.yml").read_bytes()
    assert (prometheus / "rules" / "sglx.rules.yml").read_bytes() == shipped
    # The site's prometheus.yml with the job pasted in and the rules listed: promtool checks
    # the configuration, the rules and the targets file together.
    config = {
        "rule_files": [str(prometheus / "rules" / "sglx.rules.yml")],
        "scrape_configs": [job, gate_job],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    checked = subprocess.run(["promtool", "check", "config", str(tmp_path / "prometheus.yml")],
                             capture_output=True, text=True, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr

    code, again = play(hosts, prometheus)
    assert code == 0, again
    assert recap(again)["localhost"]["changed"] == 0, again
    code, checked_mode = play(hosts, prometheus, "--check", "--diff")
    assert code == 0, checked_mode
    assert recap(checked_mode)["localhost"]["changed"] == 0, checked_mode
    # A rules file promtool refuses never replaces the one there.
    broken = tmp_path / "broken.rules.yml"
    broken.write_text("groups:\n  - name: x\n    rules:\n      - alert: A\n        expr: up ==\n")
    code, out = play(hosts, prometheus, "-e", f"sglx_prometheus_rules_src={broken}")
    assert code != 0, out
    assert "failed to validate" in out, out
    assert (prometheus / "rules" / "sglx.rules.yml").read_bytes() == shipped


def test_a_missing_promtool_is_named_with_the_fix(tmp_path: Path) -> None:
    hosts, prometheus = inventory(tmp_path), tmp_path / "prometheus"
    code, out = play(hosts, prometheus, "-e", "sglx_prometheus_promtool=/nonexistent/promtool")
    assert code != 0, out
    assert "/nonexistent/promtool is not on this host" in out, out
    assert "sglx_prometheus_promtool to" in out, out
    assert not (prometheus / "rules").exists()

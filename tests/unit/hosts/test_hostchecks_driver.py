"""The acceptance check `driver_validated_with_the_image` (hostchecks/test_acceptance.py) on
this machine as the host (testinfra's local backend): the driver's version file against the
version the last passed gate recorded (seed S0-49). A gfx942 host's facts, its version file
and record moved to files of the test."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import testinfra
from _pytest.outcomes import Failed, Skipped

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hostchecks"))

import test_acceptance as checks  # the host checks' module: never collected from here
from facts import HostFacts, host_facts


def facts_for(version: Path, state: Path) -> HostFacts:
    found = host_facts("node", {"sglx_arch": "gfx942"}, None)
    driver = {**found.vars["accel_host_driver"], "version_file": str(version)}
    return HostFacts(
        found.name,
        found.arch,
        {**found.vars, "accel_host_driver": driver, "sglang_service_state_file": str(state)},
        found.profile,
    )


def test_an_upgraded_driver_is_named_until_the_gate_passes_with_it(tmp_path: Path) -> None:
    version, state = tmp_path / "version", tmp_path / "deployed.json"
    host, facts = testinfra.get_host("local://"), facts_for(version, state)
    check = checks.test_driver_validated_with_the_image
    state.write_text(json.dumps({"image_id": "sha256:" + "a" * 64, "driver_version": "6.14.14"}))
    version.write_text("6.14.14\n")
    check(host, facts)  # the pair the gate passed with
    version.write_text("6.16.6\n")
    with pytest.raises(Failed) as failed:
        check(host, facts)
    said = str(failed.value)
    assert "the driver reads '6.16.6'" in said and "last passed here with '6.14.14'" in said
    assert "Fix: run rollout.yml for this host: it runs the serving gate again" in said
    # Not judged: no driver loaded, a record from before the field, an arch without a file.
    version.unlink()
    with pytest.raises(Skipped, match="the driver is not loaded"):
        check(host, facts)
    version.write_text("6.16.6\n")
    state.write_text(json.dumps({"image_id": "sha256:" + "a" * 64}))
    with pytest.raises(Skipped, match="names no driver"):
        check(host, facts)
    cpu = host_facts("node", {"sglx_arch": "cpu"}, None)
    with pytest.raises(Skipped, match="names no driver version file"):
        check(host, cpu)

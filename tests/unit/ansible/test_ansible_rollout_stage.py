"""rollout.yml's staging play (the sglx_rollout role's entry point `stage`), run by the real
ansible-playbook over a local inventory with `--tags sglx_rollout_stage,sglx_rollout_summary`:
every host stages before any batch, a host that cannot be staged is named with why, left out
with the other nodes of its serving group, and the others go on under max_fail_percentage.

A host stages here without an engine: its install record names the bundle as installed and its
`bundle_install_docker` is a script that prints every image id asked for, so bundle_install
finds the image held and runs no install.sh (the copy, verify and load on real hosts:
tests/e2e/test_ansible_rollout.py).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from helpers.ansible_play import rollout_playbook
from helpers.bundles import hand_bundle

IMAGE = "sha256:" + "0" * 64  # hand_bundle's image id


def installed_bundle(tmp_path: Path) -> tuple[Path, Path]:
    """A bundle folder and a state folder whose record says it is installed."""
    archive = tmp_path / "image.tar"
    archive.write_bytes(os.urandom(4096))
    bundle = hand_bundle(tmp_path / "bundle", archive, {"install.sh": b"#!/bin/sh\nexit 9\n"}, 4096)
    digest = hashlib.sha256((bundle / "bundle.json").read_bytes()).hexdigest()
    state = tmp_path / "state"
    state.mkdir()
    (state / f"sha256-{digest}.json").write_text(json.dumps({
        "format": "sglx-install-record", "version": 1, "bundle_digest": f"sha256:{digest}",
        "image_id": IMAGE, "installed_at": "2026-12-03T00:00:00Z",
    }))  # fmt: skip
    return bundle, state


def play(
    tmp_path: Path, hosts: dict[str, dict[str, Any]], groups: dict[str, list[str]], *extra: str
) -> tuple[int, str]:
    tags = ("--tags", "sglx_rollout_stage,sglx_rollout_summary")
    return rollout_playbook(tmp_path, hosts, *tags, *extra, groups=groups)


def fleet(tmp_path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, list[str]]]:
    """host-a stages; host-b has no bundle; host-c and host-d serve one group, and host-d has
    no bundle."""
    bundle, state = installed_bundle(tmp_path)
    holding = tmp_path / "docker"
    holding.write_text('#!/bin/sh\nfor a; do id=$a; done; echo "$id"\n')
    holding.chmod(0o755)
    good = {
        "sglx_bundle_path": str(bundle),
        "bundle_install_state_dir": str(state),
        "bundle_install_docker": str(holding),
    }
    missing = {**good, "sglx_bundle_path": str(tmp_path / "nowhere")}
    hosts = {
        "host-a": good,
        "host-b": missing,
        "host-c": {**good, "sglang_service_group": "pair"},
        "host-d": {**missing, "sglang_service_group": "pair"},
    }
    return hosts, {"pair": ["host-c", "host-d"]}


def test_a_host_that_fails_staging_is_left_out_with_its_group_and_named(tmp_path: Path) -> None:
    hosts, groups = fleet(tmp_path)
    code, out = play(tmp_path, hosts, groups, "-e", "sglx_rollout_max_fail_percentage=75")
    assert code != 0, out  # the rollout is incomplete
    assert "host-a: staged: bundle sha256:" in out, out
    assert f"(image {IMAGE}), 0 Bytes copied" in out, out
    assert f"host-b: not staged: {tmp_path}/nowhere/bundle.json not found on host-b" in out, out
    left_out = "left out of the rollout: a node of its serving group pair is not staged (host-d)"
    assert f"host-c is {left_out}" in out, out
    assert "host-c: staged: bundle sha256:" in out and "copied; left out: a node of its" in out, out
    # The batches are sized again over the hosts that staged: host-a alone goes on.
    rollout = out[out.index("PLAY [Roll the bundle out]") : out.index("PLAY [Summarise")]
    assert "[host-a]" in rollout and "host-c" not in rollout, rollout
    # The summary names the hosts left out, and that they still run their previous version.
    assert "host-b: not_staged: left out, still on its previous version: " in out, out
    assert "rollout incomplete: host-b, host-c, host-d could not be staged" in out, out
    assert "host-c: not_staged: left out, still on its previous version: a node of its" in out
    assert 'host-a: not reached: runs bundle none (image none); copied 0 Bytes (0 bytes)",' in out


def test_with_no_failure_tolerated_one_host_not_staged_stops_the_rollout(tmp_path: Path) -> None:
    hosts, groups = fleet(tmp_path)
    code, out = play(tmp_path, hosts, groups)
    assert code != 0, out
    # Every host tried, and the staging was printed, before the rollout stopped.
    assert "host-a: staged: bundle sha256:" in out, out
    assert "host-d: not staged: " in out, out
    assert "NO MORE HOSTS LEFT" in out, out
    assert "Summarise the rollout" not in out, out

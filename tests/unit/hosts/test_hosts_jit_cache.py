"""The acceptance check `running_container_mounts_its_jit_cache` (issue 27) on this machine as
the host (testinfra's local backend), a fake `docker` answering the container's inspect: the
running image's folder under the root, the container user's with mode 0700, mounted at the
profile's target, passes; each way it can be wrong is named with the fix."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import testinfra

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hostchecks"))

import test_acceptance as checks  # the host checks' module: never collected from here
from facts import host_facts

IMAGE = "sha256:" + "ef" * 32


def fake_docker(folder: Path, mounts: list[dict[str, str]]) -> Path:
    """`docker inspect --type container NAME`: a running container of IMAGE with `mounts`."""
    folder.mkdir(exist_ok=True)
    inspect = [{"Image": IMAGE, "State": {"Running": True}, "Mounts": mounts}]
    (folder / "docker").write_text(f"#!/bin/sh\ncat <<'EOF'\n{json.dumps(inspect)}\nEOF\n")
    (folder / "docker").chmod(0o755)
    return folder


def check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> None:
    mounts = [{"Type": "bind", "Source": source, "Destination": "/var/cache/sglx"}]
    monkeypatch.setenv("PATH", f"{fake_docker(tmp_path / 'bin', mounts)}:{os.environ['PATH']}")
    site: dict[str, Any] = {"sglx_arch": "cpu", "sglang_service_jit_cache_root": str(tmp_path)}
    checks.test_running_container_mounts_its_jit_cache(
        testinfra.get_host("local://"), host_facts("node", site, None)
    )


def failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, source: str) -> str:
    with pytest.raises(pytest.fail.Exception) as failed:
        check(tmp_path, monkeypatch, source)
    said = str(failed.value)
    assert "Fix: run rollout.yml for this host (it creates the folder" in said
    return said


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the folder to uid 1000 needs root")
def test_the_private_mounted_folder_passes_and_each_fault_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / IMAGE.removeprefix("sha256:")
    said = failure(tmp_path, monkeypatch, str(folder))
    assert f"sglx-server: {folder} does not exist" in said
    folder.mkdir(mode=0o700)
    os.chown(folder, 1000, -1)
    check(tmp_path, monkeypatch, str(folder))  # passes
    folder.chmod(0o755)
    os.chown(folder, 0, -1)
    said = failure(tmp_path, monkeypatch, "/var/cache/sglx/jit/elsewhere")
    assert f"{folder} is owned by uid 0, not 1000" in said
    assert f"{folder} has mode 0755, not 0700" in said
    assert f"{folder} is not mounted at /var/cache/sglx (/var/cache/sglx/jit/elsewhere is)" in said

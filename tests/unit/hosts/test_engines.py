"""The engines sglx names and was tested on (sglx_core.engines), and the preflight check
`container_engine` (hostchecks/test_preflight.py) on this machine as the host (testinfra's local
backend) with a `docker` first on PATH that answers as another engine would."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import testinfra
from _pytest.outcomes import Failed

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hostchecks"))

import test_preflight as checks  # the host checks' module: never collected from here
from facts import HostFacts, host_facts

from sglx_core.engines import engine_from, names_tested, store_of

CONTAINERD = [["driver-type", "io.containerd.snapshotter.v1"]]
OVERLAY2 = [["Backing Filesystem", "extfs"], ["Supports d_type", "true"]]


def test_an_engine_is_named_by_product_version_and_store() -> None:
    docker = engine_from(
        {"Version": "28.5.2+dfsg4", "Components": [{"Name": "Engine"}]}, CONTAINERD
    )
    assert docker.describe() == "Docker 28.5.2+dfsg4 (containerd image store)"
    assert docker.tested() and docker.containerd_store
    podman = engine_from({"Version": "5.8.6", "Components": [{"Name": "Podman Engine"}]}, None)
    assert podman.describe() == "podman 5.8.6 (classic image store)" and not podman.tested()
    assert engine_from({"Version": "29.0.1"}, CONTAINERD).tested() is False
    assert engine_from({"Version": "20.10.24+dfsg1"}, OVERLAY2).tested()
    assert store_of([["driver-type"], "x", None]) == "classic"  # odd shapes are no store
    # whatever answers on the socket: a version that is no version is never echoed
    odd = engine_from({"Version": "28.5\x1b[2J\nbundle verified", "Components": 7}, True)
    assert odd.describe() == "Docker ? (classic image store)" and not odd.tested()


def fake_engine(folder: Path, version: str, status: list[list[str]]) -> Path:
    folder.mkdir()
    server = json.dumps({"Version": version, "Components": [{"Name": "Engine"}]})
    (folder / "docker").write_text(
        "#!/bin/sh\n"
        f"[ \"$1\" = version ] && {{ echo '{server}'; exit 0; }}\n"
        f"[ \"$1\" = info ] && {{ echo '{json.dumps(status)}'; exit 0; }}\n"
        "exit 1\n"
    )
    (folder / "docker").chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("version", "status", "verdict"),
    [
        ("28.5.2+dfsg4", CONTAINERD, None),
        ("20.10.24+dfsg1", OVERLAY2, None),
        ("29.1.0", CONTAINERD, "Docker 29.1.0 (containerd image store) is not an engine"),
        ("27.3.1", OVERLAY2, "Docker 27.3.1 (classic image store) is not an engine"),
    ],
)
def test_the_preflight_names_an_engine_it_was_not_tested_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, version: str, status: list[list[str]],
    verdict: str | None,
) -> None:  # fmt: skip
    monkeypatch.setenv("PATH", f"{fake_engine(tmp_path / 'bin', version, status)}:/usr/bin:/bin")
    host, facts = testinfra.get_host("local://"), host_facts("node", {"sglx_arch": "cpu"}, None)
    if verdict is None:
        checks.test_container_engine(host, facts)
        return
    with pytest.raises(Failed) as failed:
        checks.test_container_engine(host, facts)
    assert verdict in str(failed.value) and names_tested() in str(failed.value)
    assert "sglx_engine_untested_ok" in str(failed.value)
    accepted = HostFacts(facts.name, facts.arch, {**facts.vars, "sglx_engine_untested_ok": True},
                         facts.profile)  # fmt: skip
    checks.test_container_engine(host, accepted)

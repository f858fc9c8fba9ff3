"""The collective smoke's part of the profile and of the sglang_service role: gate.collective,
its rendering into sglang_service_collective, and the filters tasks/collective.yml uses."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from ansible.errors import AnsibleFilterError
from pydantic import ValidationError

from sglx.ansible_vars import render_vars
from sglx_core.profile import load_profile
from sglx_core.profile.schema import GateCollective

ROLE = Path(__file__).resolve().parents[3] / "ansible" / "roles" / "sglang_service"


def _plugin() -> ModuleType:
    path = ROLE / "filter_plugins" / "sglx_collective.py"
    spec = importlib.util.spec_from_file_location("sglx_collective", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


filters = _plugin()


@pytest.mark.parametrize(
    ("args", "nnodes", "expected"),
    [
        ([], 1, 1),
        ([], 2, 1),
        (["--tp", "2"], 2, 1),
        (["--tp", "2"], 1, 2),
        (["--tp-size=8", "--pp-size", "2"], 2, 8),
        (["--tp", "2", "--download-dir", "x", "--tensor-parallel-size", "16"], 2, 8),
        (["--pipeline-parallel-size", "4"], 1, 4),
    ],
)
def test_devices_per_node_is_tp_times_pp_over_the_nodes(
    args: list[str], nnodes: int, expected: int
) -> None:
    assert filters.sglx_devices_per_node(args, nnodes) == expected


@pytest.mark.parametrize(
    ("args", "nnodes", "said"),
    [
        (["--tp", "3"], 2, "does not divide evenly"),
        (["--tp", "two"], 1, "not a whole number"),
        (["--tp", "0"], 1, "not a whole number"),
        (["--tp"], 1, "no value after it"),
    ],
)
def test_devices_per_node_refuses_what_sglang_refuses(
    args: list[str], nnodes: int, said: str
) -> None:
    with pytest.raises(AnsibleFilterError, match=said):
        filters.sglx_devices_per_node(args, nnodes)


def test_docker_volume_is_the_units_mount() -> None:
    mount = {"source": "/opt/x", "target": "/x", "read_only": False}
    assert filters.sglx_docker_volume(mount) == "--volume=/opt/x:/x"
    assert filters.sglx_docker_volume({"source": "/a", "target": "/b"}) == "--volume=/a:/b:ro"


def test_gfx942_holds_amds_floor_at_eight_gpus_only() -> None:
    smoke = render_vars(load_profile("gfx942"))["sglang_service_collective"]
    assert smoke["backend"] == "nccl" and smoke["device_type"] == "cuda"
    assert smoke["floor_gbps"] == {8: 304.0}
    assert smoke["size_bytes"] == 8 << 30  # the size AMD's sweep ends at (-e 8G)


def test_cpu_smokes_small_and_judges_no_floor() -> None:
    smoke = render_vars(load_profile("cpu"))["sglang_service_collective"]
    assert smoke == {
        "enabled": True,
        "backend": "gloo",
        "device_type": "cpu",
        "size_bytes": 8 << 20,
        "iters": 10,
        "warmup": 2,
        "timeout_s": 60,
        "floor_gbps": {},
    }


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"floor_gbps": {8: 304.0}}, "without a source"),
        ({"floor_gbps": {1: 3.0}, "source": "x"}, "greater than or equal to 2"),
        ({"floor_gbps": {8: 0.0}, "source": "x"}, "not above 0"),
        ({"size_bytes": 32 << 30}, "less than or equal to"),
    ],
)
def test_gate_collective_refuses_floors_it_cannot_hold(fields: dict, said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        GateCollective(**fields)

"""The host checks' expectations (hostchecks/facts.py) and their pure helpers (probes.py):
the profile wins over a stale inventory, site settings come from the inventory over the roles'
defaults, and the group comparison names the odd host."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hostchecks"))

from facts import host_facts
from probes import below_floor, odd_keys, server_flags


def test_profile_wins_over_stale_inventory_and_site_settings_over_defaults() -> None:
    inventory = {
        "sglx_arch": "gfx942",
        "accel_host_kernel_cmdline": ["stale=1"],  # an old render of group_vars
        "sglang_service_container": "server-7",  # a site setting
    }
    facts = host_facts("mi300x-01", inventory, None)
    assert facts.arch == "gfx942"
    assert facts["accel_host_kernel_cmdline"] == [
        "pci=realloc=off", "pci=bfsort", "iommu=pt", "numa_balancing=disable",
    ]  # fmt: skip
    # No after-boot opt-in in this inventory: no blacklist is expected on the command line.
    assert facts.late_modules == [] and facts.kernel_cmdline == facts["accel_host_kernel_cmdline"]
    assert facts.container == "server-7"
    assert facts.service == "sglx-server"  # the role's default
    # "{{ sglang_service_port }}" in the defaults resolves to the profile's port.
    assert facts.server_url == "http://127.0.0.1:30000"


def test_arch_option_wins_and_one_is_required() -> None:
    assert host_facts("h", {"sglx_arch": "gfx942"}, "cpu").arch == "cpu"
    with pytest.raises(ValueError, match="no arch: its inventory has no sglx_arch"):
        host_facts("h", {}, None)


def test_server_flags_after_the_module() -> None:
    argv = ["python", "-m", "sglang.launch_server", "--model-path", "/m", "--tp", "2",
            "--enable-metrics", "--max-running-requests=7"]  # fmt: skip
    assert server_flags(argv) == {
        "--model-path": "/m", "--tp": "2", "--enable-metrics": "", "--max-running-requests": "7",
    }  # fmt: skip
    assert server_flags(["python", "server.py"]) == {}


def test_the_odd_host_is_the_minority_and_ties_go_to_the_first_host() -> None:
    group = {"a": {"image": "x"}, "b": {"image": "x"}, "c": {"image": "y", "arg:--tp": "2"}}
    order = ["a", "b", "c"]
    assert odd_keys(group["c"], group, order) == {
        "image": ("y", "x"), "arg:--tp": ("2", "(unset)"),
    }  # fmt: skip
    assert odd_keys(group["a"], group, order) == {}
    pair = {"a": {"image": "x"}, "b": {"image": "y"}}
    assert odd_keys(pair["b"], pair, ["a", "b"]) == {"image": ("y", "x")}
    assert odd_keys(pair["a"], pair, ["a", "b"]) == {}


def test_a_switched_on_feature_holds_its_variable_to_the_floor() -> None:
    from sglx_core.profile import load_profile

    (key, floor), *_ = load_profile("gfx942").env_floors.items()
    on = {"SGLANG_ROCM_USE_MULTI_STREAM": "1"}
    assert below_floor(key, floor, {**on, "GPU_MAX_HW_QUEUES": "5"}) == ""
    said = below_floor(key, floor, {**on, "GPU_MAX_HW_QUEUES": "2"})
    assert said.startswith("GPU_MAX_HW_QUEUES=2 with SGLANG_ROCM_USE_MULTI_STREAM=1: needs 5")
    # Unset: the runtime's own value (HIP's 4) is below the floor too.
    assert "GPU_MAX_HW_QUEUES=(unset)" in below_floor(key, floor, on)

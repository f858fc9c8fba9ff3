"""Serving-profile selection over real sysfs layouts (helpers.serving_fixtures) and real
config.json contents (helpers.model_configs): the profile each host picks for each model, and
the refusal when none fits. Built and tested on fixtures, not run on hardware."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from helpers import model_configs, serving_fixtures

from sglx_core.errors import SglxError
from sglx_core.profile import load_profile
from sglx_core.serving.hardware import Accelerators, detect
from sglx_core.serving.model import model_from_config
from sglx_core.serving.select import candidates, choose

HOSTS: dict[str, tuple[str, Callable[[Path], Path]]] = {
    "8x MI300X": ("gfx942", serving_fixtures.mi300x_host),
    "4x MI325X": ("gfx942", serving_fixtures.mi325x_host),
    "8x MI355X": ("gfx950", serving_fixtures.mi355x_host),
    "gfx1151": ("gfx1151", serving_fixtures.strix_halo_host),
    "8x P800": ("kunlun", serving_fixtures.p800_host),
}
REFUSED = "refused"
# host -> model -> the profile chosen (or REFUSED). The APU's 96 GiB carve-out cannot hold 70B
# or 236B in BF16 at TP 1; every other host serves every model at TP = its device count.
EXPECTED: dict[str, dict[str, str]] = {
    "8x MI300X": dict.fromkeys(model_configs.MODELS, "mi300x-tp8"),
    "4x MI325X": dict.fromkeys(model_configs.MODELS, "mi325x-tp4"),
    "8x MI355X": dict.fromkeys(model_configs.MODELS, "mi355x-tp8"),
    "gfx1151": {
        "qwen2.5-0.5b": "gfx1151-apu",
        "llama-3.1-8b": "gfx1151-apu",
        "llama-3.1-70b": REFUSED,
        "deepseek-v2": REFUSED,
    },
    "8x P800": dict.fromkeys(model_configs.MODELS, "p800-tp8"),
}
CASES = [(host, model) for host in EXPECTED for model in EXPECTED[host]]


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Accelerators]:
    found = {}
    for name, (arch, make) in HOSTS.items():
        root = make(tmp_path_factory.mktemp(name.replace(" ", "")))
        found[name] = detect(load_profile(arch), root)
    return found


@pytest.mark.parametrize(("host", "model"), CASES)
def test_expected_profile(hosts: dict[str, Accelerators], host: str, model: str) -> None:
    profile = load_profile(HOSTS[host][0])
    shape = model_from_config(model_configs.config(model))
    expected = EXPECTED[host][model]
    if expected == REFUSED:
        with pytest.raises(SglxError) as raised:
            choose(profile, hosts[host], shape)
        message = str(raised.value)
        assert "no serving profile of gfx1151 can run this model on 1x Strix-Halo" in message
        assert "gfx1151-apu: low_memory: the model does not fit at --tp 1: needs" in message
        assert "this host has 96.0 GiB" in message
        assert "a larger TP, a shorter --context-length" in message
    else:
        chosen = choose(profile, hosts[host], shape)
        assert chosen.name == expected
        assert chosen.status == "runnable"


def test_statuses_and_order(hosts: dict[str, Accelerators]) -> None:
    """4x MI325X with the 236B MoE: TP 4 runs, smaller TPs need more memory than the card has,
    the MI300X profiles and the TP 8 one (8 devices) are incompatible, each with its reason."""
    shape = model_from_config(model_configs.config("deepseek-v2"))
    listed = candidates(load_profile("gfx942"), hosts["4x MI325X"], shape)
    by_name = {c.name: c for c in listed}
    assert [c.status for c in listed] == sorted(
        (c.status for c in listed), key=("runnable", "low_memory", "incompatible").index
    )
    assert listed[0].name == "mi325x-tp4"
    low = by_name["mi325x-tp2"]
    assert low.status == "low_memory"
    assert low.memory_needed_bytes is not None and low.memory_needed_bytes > 256 * 1024**3
    assert by_name["mi325x-tp8"].reason == "needs 8 devices; this host has 4"
    assert by_name["mi300x-tp4"].reason == "for MI300X; this host has MI325X"
    assert by_name["gfx942-one-device"].status == "low_memory"  # general, still named last


def test_general_profile_is_never_a_silent_generic_pick(hosts: dict[str, Accelerators]) -> None:
    """An unknown gfx942 device gets only the general one-device profile, which says so."""
    hw = hosts["8x MI300X"]
    unknown = Accelerators(hw.family, None, hw.count, hw.memory_bytes, hw.facts)
    shape = model_from_config(model_configs.config("llama-3.1-8b"))
    chosen = choose(load_profile("gfx942"), unknown, shape)
    assert chosen.name == "gfx942-one-device"
    assert chosen.profile.rank == "general"


def test_precision_and_metric_mismatch(hosts: dict[str, Accelerators]) -> None:
    profile = load_profile("gfx942")
    listed = candidates(profile, hosts["8x MI300X"], None, metric="latency")
    chosen_when_matching = [
        c for c in listed if c.name.startswith("mi300x") and c.profile.select == "auto"
    ]
    assert all(c.status == "runnable" for c in chosen_when_matching)
    assert listed[0].name == "mi300x-tp8"
    assert listed[0].memory_needed_bytes is None


def test_cpu_profile_matches_any_host() -> None:
    hw = Accelerators("cpu", None, 1, 24 << 30, {"cores": "2", "numa_nodes": "1"})
    shape = model_from_config(model_configs.config("qwen2.5-0.5b"))
    chosen = choose(load_profile("cpu"), hw, shape)
    assert chosen.name == "cpu-host"

"""The gate timer's `devices` check (sglx_runtime.gate_tick.devices): the vendor tool the
profile names, run inside the server's container, its ECC read parsed and judged by
sglx_core.gate.tools as the host checks do, and its device count held against the server's
device probe. The tools here are stand-in scripts printing the pinned samples of
tests/data/vendor; the devices are fixture trees under SGLX_PROBE_ROOT
(helpers/serving_fixtures.py, the trees the serving profiles are chosen from).
Built and tested on fixtures, not run on hardware."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.serving_fixtures import mi300x_host, p800_host

from sglx_core.profile import Profile, load_profile
from sglx_runtime import gate_tick

VENDOR = Path(__file__).resolve().parents[2] / "data" / "vendor"
AMD_SMI = VENDOR / "amd_smi" / "constructed_metric_gpu_data.json"
XPU_SMI = VENDOR / "xpu_smi" / "query_p800_pcie_zstack.txt"


def tool(folder: Path, name: str, script: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(0o755)
    return folder


def quick(profile: Profile, timeout_s: int = 5) -> Profile:
    vendor = profile.gate.vendor.model_copy(update={"timeout_s": timeout_s})
    return profile.model_copy(update={"gate": profile.gate.model_copy(update={"vendor": vendor})})


@pytest.fixture
def gfx942(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Profile:
    """An MI300X host of 8 GPUs, amd-smi on PATH printing the 8-GPU sample."""
    mi300x_host(tmp_path / "host", 8)
    monkeypatch.setenv("SGLX_PROBE_ROOT", str(tmp_path / "host"))
    bin_dir = tool(
        tmp_path / "bin", "amd-smi", f'[ "$*" = "metric -e --json" ] || exit 9\ncat {AMD_SMI}\n'
    )
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    return quick(load_profile("gfx942"))


def test_every_gpu_listed_and_no_uncorrectable_error_passes(gfx942: Profile) -> None:
    verdict = gate_tick.devices(gfx942)
    assert isinstance(verdict, gate_tick.Verdict), verdict
    assert (verdict.check, verdict.passed) == ("devices", True), verdict
    assert "8 GPUs listed, as the kernel shows" in verdict.message, verdict


def test_a_gpu_the_tool_does_not_list_fails(
    gfx942: Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """9 GPUs on the probe, 8 in amd-smi's answer: the ninth is judged by nothing."""
    mi300x_host(tmp_path / "nine", 9)
    monkeypatch.setenv("SGLX_PROBE_ROOT", str(tmp_path / "nine"))
    verdict = gate_tick.devices(gfx942)
    assert isinstance(verdict, gate_tick.Verdict) and not verdict.passed
    assert "amd-smi lists 8 GPUs, but the host's kernel shows 9" in verdict.message, verdict


def test_an_uncorrectable_ecc_error_fails_naming_the_gpu(
    gfx942: Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    document = json.loads(AMD_SMI.read_text())
    document["gpu_data"][3]["ecc"]["total_uncorrectable_count"] = 2
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps(document))
    tool(tmp_path / "bin", "amd-smi", f"cat {broken}\n")
    verdict = gate_tick.devices(gfx942)
    assert isinstance(verdict, gate_tick.Verdict) and not verdict.passed
    assert "uncorrectable" in verdict.message and "3" in verdict.message, verdict


@pytest.mark.parametrize(
    ("script", "said"),
    [
        ("echo '{\"gpu_data\": 7}'\n", "amd-smi metric --json"),  # the parser names the field
        ("exit 3\n", "`amd-smi metric -e --json` exited 3"),
        ("sleep 30\n", "timed out"),
        ("yes x | head -c 5000000\n", "amd-smi"),  # past the parsers' bound
    ],
    ids=["malformed", "exit", "hang", "huge"],
)
def test_a_tool_that_fails_or_says_nonsense_fails_the_check(
    gfx942: Profile, tmp_path: Path, script: str, said: str
) -> None:
    tool(tmp_path / "bin", "amd-smi", script)
    verdict = gate_tick.devices(quick(gfx942, timeout_s=1))
    assert isinstance(verdict, gate_tick.Verdict) and not verdict.passed, verdict
    assert said in verdict.message, verdict


def test_a_tool_not_in_the_container_has_not_run_and_cpu_has_none(
    gfx942: Profile, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert gate_tick.devices(gfx942) == "amd-smi is not in the server's container: not run"
    assert gate_tick.devices(load_profile("cpu")) is None


def test_kunlun_reads_xpu_smi_where_the_profile_mounts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Kunlun profile mounts the host's xpu-smi into the container; `xpu-smi -q` lists every
    card, held against the /dev/xpuN nodes the probe sees."""
    from sglx_core.gate.tools import xpu_smi

    cards = len(xpu_smi.parse_query(XPU_SMI.read_bytes()))
    p800_host(tmp_path / "host", cards)
    monkeypatch.setenv("SGLX_PROBE_ROOT", str(tmp_path / "host"))
    bin_dir = tool(tmp_path / "bin", "xpu-smi", f'[ "$*" = "-q" ] || exit 9\ncat {XPU_SMI}\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    verdict = gate_tick.devices(quick(load_profile("kunlun")))
    assert isinstance(verdict, gate_tick.Verdict), verdict
    assert verdict.passed, verdict
    assert f"{cards} XPU" in verdict.message, verdict

"""The driver/firmware parser that accel_host's preflight (as filters) and the host checks
(hostchecks, facts.host_versions) share: ansible/roles/accel_host/filter_plugins/
sglx_host_versions.py, loaded by path as both load it."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
from helpers.xpu_smi import xpu_smi_q

PLUGIN = (
    Path(__file__).resolve().parents[3]
    / "ansible/roles/accel_host/filter_plugins/sglx_host_versions.py"
)


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglx_host_versions", PLUGIN)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


versions = _load()
verdict = versions.firmware_verdict


def test_a_real_layout_yields_every_card_with_its_firmware_and_pci_ids() -> None:
    parsed = versions.parse_xpu_smi(xpu_smi_q(["1.54", "1.48"], vendor="2057"))
    assert parsed["driver"] == "5.0.21.26" and parsed["attached"] == 2
    first, second = parsed["cards"]
    assert first["bus_id"] == "00000000:01:00.0"
    assert (first["product"], first["architecture"]) == ("P800 OAM", "KL3")
    assert (first["pci_device"], first["pci_vendor"]) == ("0x3688", "0x2057")
    assert first["firmware"] == "1.54"
    assert first["firmware_parts"] == {
        "PBL": "1.0", "PCIE": "2.15", "SBL": "1.54", "ALL": "1.0.2.15.1.54", "CPLD": "2.0",
    }  # fmt: skip
    assert second["firmware"] == "1.48"
    # Fields of other sections (PCI Bus, PCIe Generation Max) are not taken for firmware.
    assert "Max" not in first["firmware_parts"]


def test_a_firmware_version_with_a_value_of_its_own_is_taken_as_it_is() -> None:
    text = "XPU 0000:3b:00.0\n    Product Name : P800\n    Firmware Version : 1.50\n"
    (card,) = versions.parse_xpu_smi(text)["cards"]
    assert (card["bus_id"], card["firmware"]) == ("0000:3b:00.0", "1.50")


def test_every_card_at_or_above_the_floor_passes() -> None:
    done = verdict(xpu_smi_q(["1.54", "1.48"]), "1.48", "xpu-smi", 0, "", "FastDeploy")
    assert done["ok"] and done["found"] == "1.48" and done["cards"] == 2
    assert done["fix"] == ""


def test_one_card_below_the_floor_fails_naming_it_found_floor_and_fix() -> None:
    done = verdict(xpu_smi_q(["1.54", "1.40"]), "1.48", "xpu-smi", 0, "", "FastDeploy's P800")
    assert not done["ok"] and done["found"] == "1.40"
    assert done["detail"] == (
        "the firmware of 1 of 2 card(s) is below the floor 1.48: "
        "00000000:02:00.0 (P800 OAM, KL3) has 1.40"
    )
    assert "update the card firmware to 1.48 or newer (FastDeploy's P800)" in done["fix"]
    assert "power-cycle" in done["fix"]


def test_versions_compare_part_by_part_not_as_text() -> None:
    assert not verdict(xpu_smi_q(["1.5"]), "1.48")["ok"]  # 5 < 48
    assert verdict(xpu_smi_q(["1.100"]), "1.48")["ok"]
    assert versions.version_key("v5.0.21.26") == (5, 0, 21, 26)
    assert versions.version_key("1.48-rc") is None


@pytest.mark.parametrize(
    ("output", "rc", "words"),
    [
        ("", 0, "xpu-smi -q lists no card"),
        ("\x00\xff garbage : : :\n" * 50, 0, "lists no card"),
        (xpu_smi_q(["1.54"], attached=2), 0, "says 2 card(s) are attached but lists 1"),
        (xpu_smi_q(["N/A"]), 0, "no readable firmware version"),
        (xpu_smi_q(["1.54"]).replace("SBL Version", "XYZ Version"), 0, "has none"),
        ("", 127, "xpu-smi -q failed (exit 127)"),
    ],
)
def test_what_cannot_be_read_fails_with_what_was_seen(output: str, rc: int, words: str) -> None:
    done = verdict(output, "1.48", "xpu-smi", rc, "")
    assert not done["ok"] and words in done["detail"] and done["fix"]


def test_a_failing_tool_is_named_with_its_last_words() -> None:
    done = verdict("", "1.48", "xpu-smi", 1, "warming up\nxpu-smi: failed to open /dev/xpuctrl\n")
    assert done["detail"] == "xpu-smi -q failed (exit 1): xpu-smi: failed to open /dev/xpuctrl"
    assert "lsmod | grep kunlun" in done["fix"]


def test_a_floor_or_tool_the_parser_does_not_know_is_said_so() -> None:
    assert "not a dotted version" in verdict(xpu_smi_q(["1.54"]), "latest")["detail"]
    assert (
        "no reader for the firmware tool 'nvidia-smi'"
        in verdict("", "1.48", "nvidia-smi")["detail"]
    )


def test_huge_output_is_read_only_up_to_its_bound() -> None:
    many = xpu_smi_q(["1.54"] * 600)  # ~1.3 MB, 600 cards: past both bounds
    parsed = versions.parse_xpu_smi(many)
    assert parsed["truncated"] and len(parsed["cards"]) <= versions.MAX_CARDS
    done = verdict(many, "1.48")
    assert not done["ok"] and "says 600 card(s) are attached but lists" in done["detail"]
    assert len(done["detail"]) < 300
    # A message names at most a few cards, however many are below the floor.
    below = verdict(xpu_smi_q(["1.40"] * 40), "1.48")
    assert "; and 36 more" in below["detail"] and len(below["detail"]) < 400


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("6.8.5\n", "6.8.5"),
        ("KUNLUN driver (gcc 9.4.0) version 5.0.21.26, built 2025-06-01\n", "5.0.21.26"),
        ("v5.0.21.38\n", "5.0.21.38"),
        ("no number here 5 12\n", ""),
        ("", ""),
        (b"6.14.14\n", "6.14.14"),
    ],
)
def test_a_version_file_yields_its_longest_dotted_number(text: str | bytes, found: str) -> None:
    assert versions.version_in(text) == found


def test_the_role_finds_the_filters_by_their_names() -> None:
    filters = versions.FilterModule().filters()
    assert set(filters) == {"sglx_version_in", "sglx_xpu_smi", "sglx_firmware_verdict"}

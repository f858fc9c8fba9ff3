"""The driver and firmware versions a host reports, and whether they meet the profile's floor.

One parser for both readers: the accel_host role's preflight uses it as Ansible filters, and
the host checks (hostchecks/test_preflight.py) load this file by path. So the role and the
checks cannot disagree on what a host runs, nor word the same failure differently. The file is
plain Python with no Ansible import: the role finds it as a role filter plugin (a bundle
carries it in ansible/roles/accel_host/filter_plugins/ with the rest of the role), and the
checks read it from the same folder (facts.ROLES), in a checkout and in a bundle alike.

A floor is read from a version file (`version_file`: the first dotted number with the most
parts, see `version_in`) or from a vendor tool (`tool`). The one tool today is Kunlunxin's
`xpu-smi -q`, which prints one block per card; a real P800 sample (MatheMatrix/zstack-utility,
zstacklib/zstacklib/gpu/vendors/kunlunxin.py, `xpu-smi -q` on a P800 PCIe host):

    ==============XPUSMI LOG==============

    Timestamp                                 : Tue Feb  3 18:20:01 2026
    Driver Version                            : 5.0.21.26
    XPU-RT Version                            : 10.2

    Attached XPUs                             : 2
    XPU 00000000:01:00.0
        Product Name                          : P800 PCIe
        Product Brand                         : KUNLUNXIN
        Product Architecture                  : KL3
        XPU Part Number                       : B00100300110211
        Firmware Version
            PBL Version                       : 1.0
            PCIE Version                      : 2.14
            SBL Version                       : 1.54
            ALL Version                       : 1.0.2.14.1.54
            CPLD Version                      : 2.0
        PCI
            Device Id                         : 0x36862057
            Bus Id                            : 00000000:01:00.0

`Firmware Version` is a section of component versions there (ALL is PBL.PCIE.SBL). The floor
FastDeploy names ("XPU Firmware Version >= 1.48") is compared with the SBL component: the
firmware package that brings it is `update_fw_p800_2.15_1.48` (PCIE 2.15, SBL 1.48), and the
sample's 1.54 is the only component of that form. That mapping is an inference from the
package name, not a vendor statement. A `Firmware Version : X` line with a value of its own
(older tools, other cards) is taken as it is. `Device Id` is the PCI device id followed by the
vendor id (0x3686 and 0x2057 above; Paddle's P800 guide lists P800 cards under vendors 1d22
and 2057). The `Driver Version` line is not used for the driver floor: inside containers
xpu-smi has been seen to print an NVIDIA-style 515.58 there while the driver was 5.0.21.47
(baidu/vLLM-Kunlun PR #148, public P800 field notes), so /proc/kunlun/version (the profile's
`version_file`) is read instead.

Everything here is bounded: at most MAX_CHARS of output are read and MAX_CARDS cards kept, so
a runaway tool cannot make a check slow or its message long.
"""

from __future__ import annotations

import re
from typing import Any

MAX_CHARS = 1 << 20  # one card prints about 3 KiB; 1 MiB is far beyond any host
MAX_CARDS = 256
_SHOWN = 4  # cards named in one message

_NUMBER = re.compile(r"v?(\d+(?:\.\d+)+)")
_CARD = re.compile(r"XPU\s+([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])")
# `Key<spaces>: value` or a bare `Key :` (no value); "XPU 0000:01:00.0" is no field.
_FIELD = re.compile(r"(?P<key>[^:]*?\S)\s*:(?:\s+(?P<value>.*))?")
_PCI_ID = re.compile(r"0x([0-9A-Fa-f]{4})([0-9A-Fa-f]{4})")


def _text(value: object) -> str:
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return "" if value is None else str(value)[:MAX_CHARS]


def version_key(value: object) -> tuple[int, ...] | None:
    """(1, 48) for "1.48": dotted numbers compare part by part (1.5 < 1.48); None for any
    other text, which no floor can be compared with."""
    found = _NUMBER.fullmatch(_text(value).strip())
    if found is None or len(found.group(1)) > 64:
        return None
    return tuple(int(part) for part in found.group(1).split("."))


def version_in(text: object) -> str:
    """The version a driver's version file states: of its words that are dotted numbers
    (an optional leading "v", surrounding punctuation ignored), the first with the most parts.
    A plain "6.8.5" is itself; a banner that also names a compiler (3 parts) yields the driver's
    5.0.21.26 (4 parts). "" when the text holds no dotted number."""
    best = ""
    best_parts = 0
    for word in _text(text).split():
        found = _NUMBER.fullmatch(word.strip(",;()[]{}<>'\""))
        if found is None:
            continue
        parts = found.group(1).count(".") + 1
        if parts > best_parts:
            best, best_parts = found.group(1), parts
    return best


def parse_xpu_smi(output: object) -> dict[str, Any]:
    """`xpu-smi -q` as data: {"driver": str, "attached": int | None, "cards": [...],
    "truncated": bool}; each card {"bus_id", "product", "architecture", "pci_vendor",
    "pci_device", "firmware", "firmware_parts"} (absent values are ""). Section nesting follows
    the indentation; unknown lines are ignored, so garbage yields no card rather than an error."""
    text = _text(output)
    result: dict[str, Any] = {
        "driver": "",
        "attached": None,
        "cards": [],
        "truncated": len(_text(output)) >= MAX_CHARS,
    }
    card: dict[str, Any] | None = None
    sections: list[tuple[int, str]] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        body = line.lstrip()
        if not body:
            continue
        indent = len(line) - len(body)
        while sections and sections[-1][0] >= indent:
            sections.pop()
        header = _CARD.fullmatch(body)
        if header is not None:
            if len(result["cards"]) >= MAX_CARDS:
                result["truncated"] = True
                break
            card = {
                "bus_id": header.group(1).lower(),
                "product": "",
                "architecture": "",
                "pci_vendor": "",
                "pci_device": "",
                "firmware": "",
                "firmware_parts": {},
            }
            result["cards"].append(card)
            sections = []
            continue
        field = _FIELD.fullmatch(body)
        if field is None or (field.group("value") is None and not body.endswith(":")):
            sections.append((indent, body))  # a section header such as "Firmware Version"
            continue
        key, value = field.group("key"), (field.group("value") or "").strip()
        inside = [name for _, name in sections]
        if card is None:
            if key == "Driver Version":
                result["driver"] = value
            elif key == "Attached XPUs" and value.isdigit():
                result["attached"] = int(value)
            continue
        _card_field(card, inside, key, value)
    return result


def _card_field(card: dict[str, Any], inside: list[str], key: str, value: str) -> None:
    if key == "Product Name" and not inside:
        card["product"] = value
    elif key == "Product Architecture" and not inside:
        card["architecture"] = value
    elif key == "Firmware Version" and value:
        card["firmware"] = value
    elif inside and inside[-1] == "Firmware Version" and key.endswith(" Version"):
        part = key[: -len(" Version")]
        card["firmware_parts"][part] = value
        if part == "SBL" and not card["firmware"]:
            card["firmware"] = value
    elif key == "Device Id" and inside and inside[-1] == "PCI":
        ids = _PCI_ID.fullmatch(value)
        if ids is not None:
            card["pci_device"] = "0x" + ids.group(1).lower()
            card["pci_vendor"] = "0x" + ids.group(2).lower()


def _describe(card: dict[str, Any]) -> str:
    what = ", ".join(v for v in (card["product"], card["architecture"]) if v)
    return f"{card['bus_id']} ({what})" if what else card["bus_id"]


def _names(cards: list[dict[str, Any]]) -> str:
    shown = "; ".join(f"{_describe(c)} has {c['firmware'] or 'none'}" for c in cards[:_SHOWN])
    return shown + (f"; and {len(cards) - _SHOWN} more" if len(cards) > _SHOWN else "")


def _last_words(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else "no output"


def firmware_verdict(
    output: object,
    min_version: object,
    tool: object = "xpu-smi",
    rc: object = 0,
    stderr: object = "",
    note: object = "",
) -> dict[str, Any]:
    """Does every card's firmware, as `tool -q` printed it (`output`, exit status `rc`), meet
    `min_version`? {"ok": bool, "found": the lowest version ("" when none was read),
    "cards": how many, "detail": what was found, "fix": what to do (empty when ok)}. `note` is
    the profile's source of the floor, quoted in the fix."""
    floor, name = _text(min_version).strip(), _text(tool).strip()
    verdict: dict[str, Any] = {"ok": False, "found": "", "cards": 0, "detail": "", "fix": ""}
    source = f" ({_text(note).strip()})" if _text(note).strip() else ""
    if version_key(floor) is None:
        verdict["detail"] = f"the firmware floor {floor!r} is not a dotted version"
        verdict["fix"] = "correct host.firmware.min_version in the arch profile"
        return verdict
    if name != "xpu-smi":
        verdict["detail"] = f"no reader for the firmware tool {name!r} (known: xpu-smi)"
        verdict["fix"] = "correct host.firmware.tool in the arch profile"
        return verdict
    code = int(str(rc).strip()) if re.fullmatch(r"-?\d{1,6}", str(rc).strip()) else -1
    if code != 0:
        said = _last_words(_text(stderr)) if _text(stderr).strip() else _last_words(_text(output))
        verdict["detail"] = f"{name} -q failed (exit {code}): {said}"
        verdict["fix"] = (
            "check that the driver is loaded (lsmod | grep kunlun) and that xpu-smi comes from "
            "the same driver release"
        )
        return verdict
    parsed = parse_xpu_smi(output)
    cards: list[dict[str, Any]] = parsed["cards"]
    verdict["cards"] = len(cards)
    if not cards:
        verdict["detail"] = f"{name} -q lists no card (no 'XPU <bus id>' block)"
        verdict["fix"] = (
            "load the driver (modprobe kunlun) and check that the cards are seen "
            "(lspci -d 1d22: ; lspci -d 2057:)"
        )
        return verdict
    attached = parsed["attached"]
    if attached is not None and attached != len(cards):
        verdict["detail"] = (
            f"{name} -q says {attached} card(s) are attached but lists {len(cards)}"
            + (f" in its first {MAX_CHARS} characters" if parsed["truncated"] else "")
        )
        verdict["fix"] = "run xpu-smi -q on the host and check every card it lists"
        return verdict
    unreadable = [c for c in cards if version_key(c["firmware"]) is None]
    if unreadable:
        verdict["detail"] = (
            f"{name} -q shows no readable firmware version (Firmware Version, its SBL Version) "
            f"for {len(unreadable)} of {len(cards)} card(s): {_names(unreadable)}"
        )
        verdict["fix"] = "use the xpu-smi of the installed driver release, and check the card"
        return verdict
    lowest = min(cards, key=lambda c: version_key(c["firmware"]) or ())
    verdict["found"] = lowest["firmware"]
    floor_key = version_key(floor) or ()
    below = [c for c in cards if (version_key(c["firmware"]) or ()) < floor_key]
    if below:
        verdict["detail"] = (
            f"the firmware of {len(below)} of {len(cards)} card(s) is below the floor {floor}: "
            f"{_names(below)}"
        )
        verdict["fix"] = (
            f"update the card firmware to {floor} or newer{source} with the vendor's firmware "
            "package, then power-cycle the host"
        )
        return verdict
    verdict["ok"] = True
    verdict["detail"] = (
        f"firmware {lowest['firmware']} or newer on all {len(cards)} card(s) "
        f"({_describe(lowest)}), floor {floor}"
    )
    return verdict


class FilterModule:
    """sglx_version_in, sglx_xpu_smi and sglx_firmware_verdict, for the accel_host role."""

    def filters(self) -> dict[str, Any]:
        return {
            "sglx_version_in": version_in,
            "sglx_xpu_smi": parse_xpu_smi,
            "sglx_firmware_verdict": firmware_verdict,
        }

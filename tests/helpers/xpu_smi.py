"""`xpu-smi -q` output in Kunlunxin's real layout, for the firmware-floor tests.

The layout (field names, the per-card `XPU <bus id>` block, `Firmware Version` as a section of
component versions, `Device Id` as PCI device id then vendor id) follows a P800 sample quoted
in MatheMatrix/zstack-utility, zstacklib/zstacklib/gpu/vendors/kunlunxin.py. The values here
are this suite's own: cards, bus ids and firmware levels vary per test.
"""

from __future__ import annotations

import stat
from pathlib import Path

HEADER = """\
==============XPUSMI LOG==============

Timestamp                                 : Tue Feb  3 18:20:01 2026
Driver Version                            : {driver}
XPU-RT Version                            : 10.2

Attached XPUs                             : {attached}
"""

CARD = """\
XPU {bus}
    Product Name                          : {product}
    Product Brand                         : KUNLUNXIN
    Product Architecture                  : KL3
    Serial Number                         : 02K0MA0258D000{index:02d}
    XPU UUID                              : GPU-00000000-0000-0000-0000-0000000000{index:02d}
    Minor Number                          : {index}
    XPU Part Number                       : B00100300110112
    Firmware Version
        PBL Version                       : 1.0
        PCIE Version                      : 2.15
        SBL Version                       : {sbl}
        ALL Version                       : 1.0.2.15.{sbl}
        CPLD Version                      : 2.0
    PCI
        Bus                               : 0x{bus_no:02x}
        Device                            : 0x00
        Function                          : 0x0
        Domain                            : 0x0000
        Device Id                         : 0x3688{vendor}
        Bus Id                            : {bus}
        Sub System Id                     : 0x00010001
        XPU Link Info
            PCIe Generation
                Max                       : 5
                Current                   : 5
            Link Width
                Max                       : 16x
                Current                   : 16x
    Memory Usage
        Total                             : 98304 MiB
        Used                              : 0 MiB
        Free                              : 98304 MiB
    Processes                             : None
"""


def xpu_smi_q(
    sbl: list[str],
    *,
    product: str = "P800 OAM",
    vendor: str = "1d22",
    driver: str = "5.0.21.26",
    attached: int | None = None,
) -> str:
    """One block per entry of `sbl` (that card's SBL firmware version)."""
    text = HEADER.format(driver=driver, attached=len(sbl) if attached is None else attached)
    for index, level in enumerate(sbl, start=1):
        bus = f"{index // 256:08x}:{index % 256:02x}:00.0"
        text += CARD.format(
            bus=bus, index=index, product=product, sbl=level, vendor=vendor, bus_no=index % 256
        )
    return text


def fake_xpu_smi(folder: Path, output: str, *, rc: int = 0) -> Path:
    """An executable standing in for xpu-smi: prints `output` for `-q`, then exits `rc`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "xpu-smi-q.txt").write_text(output)
    tool = folder / "xpu-smi"
    tool.write_text(
        "#!/bin/sh\n"
        '[ "$1" = "-q" ] || { echo "usage: xpu-smi -q" >&2; exit 2; }\n'
        f'cat "{folder / "xpu-smi-q.txt"}"\n'
        f"exit {rc}\n"
    )
    tool.chmod(tool.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return tool

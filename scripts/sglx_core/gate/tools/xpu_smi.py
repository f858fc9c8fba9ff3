"""Kunlunxin `xpu-smi` output (P800 generation) read into per-XPU readings, and two checks.

Two outputs, both modelled on nvidia-smi's and both taken from real P800 hosts:

- the default table (`xpu-smi`): a `| XPU-SMI  Driver Version: ...  XPU-RT Version: ... |`
  banner, a three-row header (`XPU Name Persistence-M | Bus-Id Disp.A | Volatile Uncorr. ECC`,
  `Fan Temp Perf Pwr:Usage/Cap | Memory-Usage | XPU-Util Compute M.`, `| L3-Usage |
  SR-IOV M.`) and three rows per XPU (sample: github.com/FLAG-OP/FlagOS-OP,
  examples/b-fullstack/report.md, a 4 × P800 OAM host). Its Driver Version is an
  NVIDIA-style compatibility string (515.58); the real driver is in /proc/kunlun/version.
- the query (`xpu-smi -q`, or `-q --id=N`): `Key : value` lines, nested by indentation under
  one `XPU <bus id>` block per device, with `Memory Usage` (Total/Used MiB), `Utilization`
  (`Xpu : 0 %`), `Temperature` (`XPU Current Temp : 46 C`), `Ecc Mode` and `ECC Errors`
  (`Volatile` and `Aggregate` `DRAM Correctable`/`DRAM Uncorrectable`) (sample:
  github.com/MatheMatrix/zstack-utility, zstacklib/zstacklib/gpu/vendors/kunlunxin.py, a
  P800 PCIe with driver 5.0.21.26).

The health fields that exist: the table's `Volatile Uncorr. ECC` count, and in the query the
ECC mode and the volatile and aggregate DRAM correctable/uncorrectable counts. No idle
temperature is published for Kunlunxin cards; the limit is the caller's argument. The gen2
`xpu_smi` (R200, a different table) is not read here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sglx_core.gate.tools._input import bounded_text, field_error
from sglx_core.gate.tools.result import Number, ToolResult, verdict

TOOL = "xpu-smi"
NA = "N/A"
MAX_XPUS = 256
_TABLE = "xpu-smi"
_QUERY = "xpu-smi -q"
_HINT = (
    "capture `xpu-smi` (or `xpu-smi -q`) again on the host; inside a container it needs the "
    "host's libxpu*.so (baidu-baige/LoongForge#193)"
)
_BUS_ID = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_XPU_BLOCK = re.compile(rf"^XPU\s+(?P<bus>{_BUS_ID})\s*$")
_KEY_VALUE = re.compile(r"^(?P<key>\S.*?)\s+:\s*(?P<value>.*?)\s*$")


@dataclass(frozen=True)
class XpuReading:
    """One XPU's figures; None where xpu-smi printed N/A. `ecc` maps each ECC counter the
    output carries ("volatile_uncorr" in the table; "volatile.dram_uncorrectable",
    "aggregate.dram_correctable", ... in the query) to its count."""

    bus_id: str
    index: int | None
    name: str | None
    utilization: float | None
    temperature_c: float | None
    memory_used_mib: int | None
    memory_total_mib: int | None
    ecc: dict[str, int | None] = field(default_factory=dict)
    ecc_mode: str | None = None


# -- the default table -------------------------------------------------------------------------


def parse_table(data: str | bytes) -> list[XpuReading]:
    """The XPUs in `xpu-smi`'s default table."""
    text = bounded_text(data, what=_TABLE, hint=_HINT)
    lines = [line.strip() for line in text.splitlines()]
    if not any("XPU-SMI" in line for line in lines):
        raise field_error(_TABLE, "", "has no `XPU-SMI` banner: not xpu-smi output", _HINT)
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("|="))
    except StopIteration:
        raise field_error(_TABLE, "", "has no `|====|` line under its header", _HINT) from None
    header = " ".join(lines[:start])
    for column in ("Memory-Usage", "XPU-Util", "Volatile Uncorr. ECC", "Temp"):
        if column not in header:
            raise field_error(
                _TABLE,
                "header",
                f"has no `{column}` column: a layout this parser does not know",
                _HINT,
            )
    blocks: list[list[list[str]]] = []
    for line in lines[start + 1 :]:
        if not line or "Processes" in line:
            if blocks:
                break
            continue
        if line.startswith("+"):
            continue
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != 3:
            raise field_error(_TABLE, f"row {line!r}", f"has {len(cells)} cells, not 3", _HINT)
        if cells[0] and cells[0].split()[0].isdigit():
            blocks.append([cells])
        elif not blocks:
            raise field_error(_TABLE, f"row {line!r}", "comes before the first XPU", _HINT)
        else:
            blocks[-1].append(cells)
        if len(blocks) > MAX_XPUS:
            raise field_error(_TABLE, "", f"lists more than {MAX_XPUS} XPUs", _HINT)
    if not blocks:
        raise field_error(
            _TABLE,
            "",
            "lists no XPU: the driver saw none",
            "check `lspci -d 1d22:` and `lspci -d 2057:` (the vendor ids P800 cards carry)",
        )
    return _unique([_table_block(block) for block in blocks])


def _table_block(block: list[list[str]]) -> XpuReading:
    first = block[0][0].split()
    index = int(first[0])
    where = f"XPU {index}"
    if len(block) < 2:
        raise field_error(_TABLE, where, "has one row; its usage row is missing", _HINT)
    bus = block[0][1].split()
    if not bus or not re.fullmatch(_BUS_ID, bus[0]):
        raise field_error(_TABLE, where, f"Bus-Id {block[0][1]!r} is not a PCI address", _HINT)
    usage = block[1][0].split()
    if len(usage) < 2:
        raise field_error(_TABLE, where, f"Fan/Temp cell {block[1][0]!r} is too short", _HINT)
    memory = block[1][1].replace(" ", "").split("/")
    if len(memory) != 2:
        raise field_error(_TABLE, where, f"Memory-Usage {block[1][1]!r} is not used / total", _HINT)
    util = block[1][2].split()
    return XpuReading(
        bus_id=bus[0].lower(),
        index=index,
        name=" ".join(first[1:-1]) or None,
        utilization=_unit(util[0] if util else "", "%", _TABLE, where, "XPU-Util"),
        temperature_c=_unit(usage[1], "C", _TABLE, where, "Temp"),
        memory_used_mib=_mib(memory[0], _TABLE, where, "Memory-Usage used"),
        memory_total_mib=_mib(memory[1], _TABLE, where, "Memory-Usage total"),
        ecc={"volatile_uncorr": _count(block[0][2], _TABLE, where, "Volatile Uncorr. ECC")},
    )


# -- xpu-smi -q --------------------------------------------------------------------------------


def parse_query(data: str | bytes) -> list[XpuReading]:
    """The XPUs in `xpu-smi -q` output: one `XPU <bus id>` block each."""
    text = bounded_text(data, what=_QUERY, hint=_HINT)
    blocks: list[tuple[str, dict[str, str]]] = []
    stack: list[tuple[int, str]] = []
    for raw in text.splitlines():
        if not raw.strip() or raw.strip().startswith("="):
            continue
        indent = len(raw) - len(raw.lstrip())
        line = raw.strip()
        if match := _XPU_BLOCK.match(line):
            blocks.append((match["bus"].lower(), {}))
            stack = [(indent, "")]
            if len(blocks) > MAX_XPUS:
                raise field_error(_QUERY, "", f"lists more than {MAX_XPUS} XPUs", _HINT)
            continue
        if not blocks:
            continue
        while len(stack) > 1 and stack[-1][0] >= indent:
            stack.pop()
        path = [name for _, name in stack if name]
        pair = _KEY_VALUE.match(line)
        if pair:
            key = ".".join([*path, pair["key"]])
            if key in blocks[-1][1]:  # the last would win: a forged second counter hides errors
                raise field_error(_QUERY, f"XPU {blocks[-1][0]}", f"{key} is given twice", _HINT)
            blocks[-1][1][key] = pair["value"]
        else:
            stack.append((indent, line))
    if not blocks:
        raise field_error(_QUERY, "", "has no `XPU <bus id>` block: not `xpu-smi -q` output", _HINT)
    return _unique([_query_block(bus, fields) for bus, fields in blocks])


def _query_block(bus: str, fields: dict[str, str]) -> XpuReading:
    where = f"XPU {bus}"

    def need(key: str) -> str:
        if key not in fields:
            raise field_error(_QUERY, where, f"{key} is missing", _HINT)
        return fields[key]

    ecc: dict[str, int | None] = {}
    for key, value in fields.items():
        if key.startswith("ECC Errors."):
            name = key.removeprefix("ECC Errors.").lower().replace(" ", "_")
            ecc[name] = _count(value, _QUERY, where, key)
    minor = fields.get("Minor Number")
    return XpuReading(
        bus_id=bus,
        index=int(minor) if minor is not None and minor.isdigit() else None,
        name=fields.get("Product Name"),
        utilization=_unit(need("Utilization.Xpu"), "%", _QUERY, where, "Utilization.Xpu"),
        temperature_c=_unit(
            need("Temperature.XPU Current Temp"), "C", _QUERY, where, "Temperature.XPU Current Temp"
        ),
        memory_used_mib=_mib(need("Memory Usage.Used"), _QUERY, where, "Memory Usage.Used"),
        memory_total_mib=_mib(need("Memory Usage.Total"), _QUERY, where, "Memory Usage.Total"),
        ecc=ecc,
        ecc_mode=fields.get("Ecc Mode.Current"),
    )


# -- values ------------------------------------------------------------------------------------


def _unit(cell: str, unit: str, what: str, where: str, name: str) -> float | None:
    """ "39C", "46 C", "0%", "0 %" as a number; None for N/A."""
    cell = cell.strip()
    if cell == NA:
        return None
    if not cell.endswith(unit):
        raise field_error(what, where, f"{name} is {cell!r}, not a value in {unit}", _HINT)
    try:
        value = float(cell.removesuffix(unit).strip())
    except ValueError:
        raise field_error(what, where, f"{name} is {cell!r}, not a number", _HINT) from None
    if not math.isfinite(value) or value < 0:
        raise field_error(what, where, f"{name} is {cell!r}", _HINT)
    return value


def _mib(cell: str, what: str, where: str, name: str) -> int | None:
    value = _unit(cell, "MiB", what, where, name)
    if value is None:
        return None
    if value != int(value):
        raise field_error(what, where, f"{name} is {cell!r}, not whole MiB", _HINT)
    return int(value)


def _count(cell: str, what: str, where: str, name: str) -> int | None:
    cell = cell.strip()
    if cell == NA:
        return None
    if not cell.isdigit():
        raise field_error(what, where, f"{name} is {cell!r}, not a count or N/A", _HINT)
    return int(cell)


def _unique(readings: list[XpuReading]) -> list[XpuReading]:
    buses = [r.bus_id for r in readings]
    duplicates = sorted({b for b in buses if buses.count(b) > 1})
    if duplicates:
        raise field_error(TOOL, f"XPU {duplicates[0]}", "appears twice", _HINT)
    return readings


# -- checks ------------------------------------------------------------------------------------


def check_idle(
    readings: Iterable[XpuReading],
    *,
    max_temp_c: float,
    max_utilization: float = 0.0,
    max_memory_used_mib: int | None = None,
) -> ToolResult:
    """Every XPU idle: utilization at most `max_utilization` (0 %), temperature strictly under
    `max_temp_c`, and, when given, device memory in use at most `max_memory_used_mib` (memory
    held by another process means the card is not free). N/A fails."""
    readings = list(readings)
    findings: list[str] = []
    for r in readings:
        name = _name(r)
        if r.utilization is None:
            findings.append(f"{name}: utilization is N/A; idle cannot be confirmed")
        elif r.utilization > max_utilization:
            findings.append(
                f"{name}: utilization {r.utilization:g} % (idle is at most {max_utilization:g} %)"
            )
        if r.temperature_c is None:
            findings.append(f"{name}: temperature is N/A")
        elif r.temperature_c >= max_temp_c:
            findings.append(
                f"{name}: temperature {r.temperature_c:g} °C is not under {max_temp_c:g} °C"
            )
        if max_memory_used_mib is not None:
            if r.memory_used_mib is None:
                findings.append(f"{name}: memory in use is N/A")
            elif r.memory_used_mib > max_memory_used_mib:
                findings.append(
                    f"{name}: {r.memory_used_mib} MiB of device memory in use (at most "
                    f"{max_memory_used_mib} MiB when free): another process holds the card"
                )
    if not readings:
        findings.append("no XPU in the output")
    temps = [r.temperature_c for r in readings if r.temperature_c is not None]
    utils = [r.utilization for r in readings if r.utilization is not None]
    used = [r.memory_used_mib for r in readings if r.memory_used_mib is not None]
    numbers: dict[str, Number] = {
        "xpus": len(readings),
        "max_utilization_pct": max(utils, default=None),
        "max_temperature_c": max(temps, default=None),
        "max_memory_used_mib": max(used, default=None),
        "limit_temperature_c": max_temp_c,
    }
    return verdict(
        TOOL,
        findings,
        numbers,
        f"{len(readings)} XPUs idle: utilization at most {max(utils, default=0):g} %, hottest "
        f"{max(temps, default=0):g} °C, under {max_temp_c:g} °C",
    )


def check_ecc(readings: Iterable[XpuReading]) -> ToolResult:
    """No uncorrectable ECC error on any XPU, in whichever counters the output carries; a
    card whose uncorrectable counters are all missing or N/A fails (nothing to vouch with)."""
    readings = list(readings)
    findings: list[str] = []
    totals: dict[str, int] = {}
    for r in readings:
        name = _name(r)
        uncorrectable = {k: v for k, v in r.ecc.items() if "uncorr" in k}
        if not any(v is not None for v in uncorrectable.values()):
            findings.append(f"{name}: no uncorrectable ECC counter reported")
        findings.extend(
            f"{name}: {value} uncorrectable ECC errors ({key}): the card's memory is failing"
            for key, value in sorted(uncorrectable.items())
            if value
        )
        if r.ecc_mode is not None and r.ecc_mode != "Enabled":
            findings.append(f"{name}: ECC mode is {r.ecc_mode}, not Enabled")
        for key, value in r.ecc.items():
            totals[key] = totals.get(key, 0) + (value or 0)
    if not readings:
        findings.append("no XPU in the output")
    numbers: dict[str, Number] = {"xpus": len(readings)}
    numbers.update({f"ecc.{key}": total for key, total in sorted(totals.items())})
    correctable = {k: v for k, v in totals.items() if "uncorr" not in k and v}
    detail = ", ".join(f"{k} {v}" for k, v in sorted(correctable.items())) or "none"
    return verdict(
        TOOL,
        findings,
        numbers,
        f"{len(readings)} XPUs, 0 uncorrectable ECC errors; correctable: {detail}",
    )


def _name(r: XpuReading) -> str:
    return f"XPU {r.index} ({r.bus_id})" if r.index is not None else f"XPU {r.bus_id}"

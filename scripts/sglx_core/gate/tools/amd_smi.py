"""`amd-smi` output read into per-GPU readings, and the gate's idle and ECC checks on them.

What AMD tells operators to verify before production (the ROCm system acceptance guide,
github.com/ROCm/system-acceptance-docs at 23e73127, pages
system-acceptance-docs/docs/common/health-checks.md and system-acceptance-docs/docs/gpus/mi300x.md):
`amd-smi monitor -putm` on an idle system shows 0 % GFX utilization and temperatures "well
under 85°C". The limit is the caller's argument: AMD's page gives 85 °C as the ceiling to stay
well under, not a pass threshold.

Parsers, one per output the gate may be handed:

- `parse_metric_json`: `amd-smi metric --json` (or `metric -u -t -e --json`). amd-smi prints a
  top-level list of per-GPU objects (ROCm 6.x) or `{"gpu_data": [...]}` (later releases); AMD's
  own Cluster Validation Suite reads both (github.com/ROCm/cvs, cvs/lib/rocm_plib.py). Each
  measurement is `{"value": N, "unit": "%"}` or the string "N/A"; MI300-class GPUs report the
  edge temperature as N/A (their SMU has no edge sensor), so a missing sensor is skipped, never
  read as 0. The per-GPU keys are those the CLI writes (amdsmi_cli/amdsmi_commands.py in
  github.com/ROCm/amdsmi): `usage.gfx_activity`, `temperature.{edge,hotspot,mem}`,
  `ecc.{total_correctable_count,total_uncorrectable_count,total_deferred_count}`.
- `parse_monitor`: the `amd-smi monitor` table AMD's acceptance guide runs (`-putm`). Its
  columns changed names across releases (GPU_TEMP/GPU_T, GFX_UTIL/GFX%); the header is read,
  not assumed. On a partitioned GPU only the primary partition reports sensors; the other rows
  are N/A (github.com/ROCm/rocm-systems projects/amdsmi/docs/how-to/amdsmi-cli-tool.md).
Checks: `check_idle` (GFX activity at most a ceiling, 0 % by default, and every reported
temperature strictly under the caller's limit), `check_ecc` (uncorrectable count 0 on every
GPU; correctable and deferred counts are reported, not judged); the partition modes are
amd_smi_partition.py's. A value the tool reports as N/A fails the check that needs it: the
gate cannot pass what it could not read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sglx_core.gate.tools._input import bounded_text, field_error, load_json
from sglx_core.gate.tools.result import Number, ToolResult, verdict

TOOL = "amd-smi"
NA = "N/A"
MAX_GPUS = 1024
"""Most GPU entries one output may hold (64 logical GPUs is the largest real host: 8 × CPX)."""

METRIC_SECTIONS = ("usage", "temperature", "ecc")

_METRIC = "amd-smi metric --json"
_METRIC_HINT = (
    "capture `amd-smi metric --json` again (or `amd-smi metric -u -t -e --json`), without "
    "--watch, and keep only its standard output"
)
_MONITOR = "amd-smi monitor"
_MONITOR_HINT = "capture `amd-smi monitor -putm` again, without --watch, and keep only its output"
_TEMP_UNITS = ("C", "°C")


@dataclass(frozen=True)
class GpuReading:
    """One logical GPU's idle and ECC figures; None where amd-smi printed N/A or the command
    did not collect it. `temperatures` holds only the sensors that reported a number, keyed
    edge/hotspot/mem (metric JSON) or GPU_T/MEM_T (monitor table)."""

    gpu: int
    gfx_activity: float | None
    temperatures: dict[str, float] = field(default_factory=dict)
    ecc_correctable: int | None = None
    ecc_uncorrectable: int | None = None
    ecc_deferred: int | None = None
    xcp: int | None = None


# -- amd-smi metric --json ---------------------------------------------------------------------


def parse_metric_json(
    data: str | bytes, *, require: Sequence[str] = METRIC_SECTIONS
) -> list[GpuReading]:
    """The readings in `amd-smi metric --json` output, one per GPU entry.

    `require` names the sections the caller's checks need ("usage", "temperature", "ecc"); an
    entry without one is refused, naming the GPU and the key. A section amd-smi reports as a
    whole "N/A" is accepted and reads as no values."""
    unknown = set(require) - set(METRIC_SECTIONS)
    if unknown:
        raise ValueError(f"unknown amd-smi metric sections {sorted(unknown)}")
    text = bounded_text(data, what=_METRIC, hint=_METRIC_HINT)
    entries = gpu_entries(load_json(text, what=_METRIC, hint=_METRIC_HINT), _METRIC, _METRIC_HINT)
    readings: list[GpuReading] = []
    seen: set[int] = set()
    for position, entry in enumerate(entries):
        gpu = gpu_index(entry, "gpu", position, _METRIC, _METRIC_HINT)
        if gpu in seen:
            raise field_error(_METRIC, f"gpu {gpu}", "appears twice", _METRIC_HINT)
        seen.add(gpu)
        where = f"gpu {gpu}"
        for section in require:
            if section not in entry:
                raise field_error(_METRIC, where, f"{section} is missing", _METRIC_HINT)
        correctable, uncorrectable, deferred = _ecc(entry.get("ecc", NA), where)
        readings.append(
            GpuReading(
                gpu=gpu,
                gfx_activity=_usage(entry.get("usage", NA), where),
                temperatures=_temperatures(entry.get("temperature", NA), where),
                ecc_correctable=correctable,
                ecc_uncorrectable=uncorrectable,
                ecc_deferred=deferred,
            )
        )
    return readings


def gpu_entries(document: Any, what: str, hint: str) -> list[dict[str, Any]]:
    """The per-GPU objects of an amd-smi JSON document: a list, or `{"gpu_data": [...]}`
    (`what` names the command, `hint` how to capture it again)."""
    if isinstance(document, dict) and "gpu_data" in document:
        document = document["gpu_data"]
    if not isinstance(document, list):
        raise field_error(
            what,
            "",
            "is neither a list of GPU objects nor an object with a gpu_data list",
            hint,
        )
    if not document:
        raise field_error(what, "", "lists no GPU: the driver saw none", "check `amd-smi list`")
    if len(document) > MAX_GPUS:
        raise field_error(what, "", f"lists {len(document)} GPUs, more than {MAX_GPUS}", "")
    for position, entry in enumerate(document):
        if not isinstance(entry, dict):
            raise field_error(what, f"entry {position}", "is not an object", hint)
    return document


def gpu_index(entry: dict[str, Any], key: str, position: int, what: str, hint: str) -> int:
    value = entry.get(key)
    if value is None:
        raise field_error(what, f"entry {position}", f"{key} is missing", hint)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_GPUS:
        raise field_error(what, f"entry {position}", f"{key} is {value!r}, not a GPU index", hint)
    return value


def _measure(value: Any, where: str, name: str, units: tuple[str, ...]) -> float | None:
    """A `{"value": N, "unit": U}` measurement (or a bare number) as a float; None for N/A."""
    if value == NA:
        return None
    if isinstance(value, dict):
        if "value" not in value:
            raise field_error(_METRIC, where, f"{name}.value is missing", _METRIC_HINT)
        unit = value.get("unit")
        value = value["value"]
        if value == NA:
            return None
        if unit not in units:
            raise field_error(
                _METRIC, where, f"{name} is in {unit!r}, not {' or '.join(units)}", _METRIC_HINT
            )
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise field_error(_METRIC, where, f"{name} is {value!r}, not a number or N/A", _METRIC_HINT)
    if value < 0:
        raise field_error(_METRIC, where, f"{name} is negative ({value})", _METRIC_HINT)
    return float(value)


def _usage(usage: Any, where: str) -> float | None:
    if usage == NA:
        return None
    if not isinstance(usage, dict):
        raise field_error(_METRIC, where, "usage is not an object or N/A", _METRIC_HINT)
    if "gfx_activity" not in usage:
        raise field_error(_METRIC, where, "usage.gfx_activity is missing", _METRIC_HINT)
    return _measure(usage["gfx_activity"], where, "usage.gfx_activity", ("%",))


def _temperatures(temperature: Any, where: str) -> dict[str, float]:
    if temperature == NA:
        return {}
    if not isinstance(temperature, dict):
        raise field_error(_METRIC, where, "temperature is not an object or N/A", _METRIC_HINT)
    if "hotspot" not in temperature and "edge" not in temperature:
        raise field_error(_METRIC, where, "temperature has neither hotspot nor edge", _METRIC_HINT)
    out: dict[str, float] = {}
    for sensor in ("edge", "hotspot", "mem"):
        if sensor in temperature:
            value = _measure(temperature[sensor], where, f"temperature.{sensor}", _TEMP_UNITS)
            if value is not None:
                out[sensor] = value
    return out


def _count(value: Any, where: str, name: str) -> int | None:
    if value == NA:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise field_error(_METRIC, where, f"{name} is {value!r}, not a count or N/A", _METRIC_HINT)
    return value


def _ecc(ecc: Any, where: str) -> tuple[int | None, int | None, int | None]:
    if ecc == NA:
        return None, None, None
    if not isinstance(ecc, dict):
        raise field_error(_METRIC, where, "ecc is not an object or N/A", _METRIC_HINT)
    for key in ("total_correctable_count", "total_uncorrectable_count"):
        if key not in ecc:
            raise field_error(_METRIC, where, f"ecc.{key} is missing", _METRIC_HINT)
    return (
        _count(ecc["total_correctable_count"], where, "ecc.total_correctable_count"),
        _count(ecc["total_uncorrectable_count"], where, "ecc.total_uncorrectable_count"),
        _count(ecc.get("total_deferred_count", NA), where, "ecc.total_deferred_count"),
    )


# -- amd-smi monitor ---------------------------------------------------------------------------

_UTIL_COLUMNS = ("GFX%", "GFX_UTIL")
# Older releases print GPU_TEMP/MEM_TEMP, later ones GPU_T/MEM_T; readings use the later names.
_TEMP_COLUMNS = {"GPU_T": "GPU_T", "GPU_TEMP": "GPU_T", "MEM_T": "MEM_T", "MEM_TEMP": "MEM_T"}


def parse_monitor(data: str | bytes) -> list[GpuReading]:
    """The readings in `amd-smi monitor` table output (`-putm` or the full default table).

    The header names the columns; every row must give one value per column ("251 W",
    "55 °C", "0 %", "N/A"). With --watch the table repeats; the last one is read."""
    text = bounded_text(data, what=_MONITOR, hint=_MONITOR_HINT)
    columns: list[str] | None = None
    rows: dict[tuple[int, int | None], GpuReading] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        tokens = raw.split()
        if not tokens or raw.lstrip().startswith("..."):
            continue
        if tokens[0] == "GPU" and len(tokens) > 1:
            columns = tokens
            rows = {}
            if not any(c in columns for c in (*_UTIL_COLUMNS, *_TEMP_COLUMNS)):
                raise field_error(
                    _MONITOR,
                    f"line {number}",
                    "the header has no GFX% / GFX_UTIL nor temperature column",
                    "run `amd-smi monitor -putm`: -p power, -u GFX, -t temperature, -m memory",
                )
            continue
        if not tokens[0].isdigit():
            continue
        if columns is None:
            raise field_error(_MONITOR, f"line {number}", "a row before the header", _MONITOR_HINT)
        reading = _monitor_row(columns, _monitor_values(tokens), number)
        rows[(reading.gpu, reading.xcp)] = reading
    if columns is None:
        raise field_error(
            _MONITOR, "", "has no `GPU ...` header line: not amd-smi monitor output", _MONITOR_HINT
        )
    if not rows:
        raise field_error(_MONITOR, "", "has a header but no GPU rows", _MONITOR_HINT)
    return list(rows.values())


def _monitor_values(tokens: list[str]) -> list[str]:
    """Cells of one row: a number and its unit are one cell ("251 W"), and "0.5/ 48.0 GB"
    (amd-smi pads the total) is one cell."""
    joined: list[str] = []
    for token in tokens:
        if joined and joined[-1].endswith("/"):
            joined[-1] += token
        else:
            joined.append(token)
    cells: list[str] = []
    for token in joined:
        is_unit = not token[0].isdigit() and token != NA and not token.startswith("-")
        if cells and is_unit and cells[-1][0].isdigit() and " " not in cells[-1]:
            cells[-1] = f"{cells[-1]} {token}"
        else:
            cells.append(token)
    return cells


def _monitor_row(columns: list[str], cells: list[str], number: int) -> GpuReading:
    where = f"line {number}"
    if len(cells) != len(columns):
        raise field_error(
            _MONITOR,
            where,
            f"has {len(cells)} values for {len(columns)} columns ({' '.join(columns)})",
            _MONITOR_HINT,
        )
    row = dict(zip(columns, cells, strict=True))
    if not (row["GPU"].isascii() and row["GPU"].isdigit()):
        raise field_error(_MONITOR, where, f"GPU is {row['GPU']!r}, not an index", _MONITOR_HINT)
    gpu = int(row["GPU"])
    xcp_cell = row.get("XCP", NA)
    xcp = int(xcp_cell) if xcp_cell.isascii() and xcp_cell.isdigit() else None
    gfx: float | None = None
    for column in _UTIL_COLUMNS:
        if column in row:
            gfx = _cell(row[column], ("%",), where, column)
    temps: dict[str, float] = {}
    for column, sensor in _TEMP_COLUMNS.items():
        if column in row:
            value = _cell(row[column], _TEMP_UNITS, where, column)
            if value is not None:
                temps[sensor] = value
    return GpuReading(gpu=gpu, gfx_activity=gfx, temperatures=temps, xcp=xcp)


def _cell(cell: str, units: tuple[str, ...], where: str, column: str) -> float | None:
    if cell == NA:
        return None
    value, _, unit = cell.partition(" ")
    if unit not in units:
        raise field_error(
            _MONITOR,
            where,
            f"{column} is {cell!r}, not a value in {' or '.join(units)}",
            _MONITOR_HINT,
        )
    try:
        number = float(value)
    except ValueError:
        raise field_error(
            _MONITOR, where, f"{column} is {cell!r}, not a number", _MONITOR_HINT
        ) from None
    if not math.isfinite(number) or number < 0:
        raise field_error(_MONITOR, where, f"{column} is {cell!r}", _MONITOR_HINT)
    return number


# -- checks ------------------------------------------------------------------------------------


def check_idle(
    readings: Iterable[GpuReading], *, max_temp_c: float, max_gfx_activity: float = 0.0
) -> ToolResult:
    """Every GPU idle: GFX activity at most `max_gfx_activity` (0 %) and every temperature it
    reports strictly under `max_temp_c`.

    A row with no figure at all is counted, not judged, only where the tool says it is a
    secondary partition (XCP 1 and up: its primary carries the sensors); any other GPU whose
    utilization or every temperature is N/A fails (issue 37: a metric-JSON GPU with every
    sensor N/A was skipped as a secondary partition, so a GPU that answered nothing passed)."""
    readings = list(readings)
    findings: list[str] = []
    judged = 0
    hottest: tuple[float, str] | None = None
    busiest = 0.0
    for r in readings:
        name = _name(r)
        if r.gfx_activity is None and not r.temperatures and r.xcp is not None and r.xcp > 0:
            continue
        judged += 1
        if r.gfx_activity is None:
            findings.append(f"{name}: GFX activity is N/A; idle cannot be confirmed")
        elif r.gfx_activity > max_gfx_activity:
            findings.append(
                f"{name}: GFX activity {r.gfx_activity:g} % (idle is at most "
                f"{max_gfx_activity:g} %): something is running on it"
            )
        if r.gfx_activity is not None:
            busiest = max(busiest, r.gfx_activity)
        if not r.temperatures:
            findings.append(f"{name}: no temperature reported (every sensor N/A)")
        for sensor, value in sorted(r.temperatures.items()):
            if hottest is None or value > hottest[0]:
                hottest = (value, f"{name} {sensor}")
            if value >= max_temp_c:
                findings.append(
                    f"{name}: {sensor} temperature {value:g} °C is not under {max_temp_c:g} °C"
                )
    if judged == 0:
        findings.append("no GPU reported utilization or temperature (all N/A)")
    numbers: dict[str, Number] = {
        "gpus": judged,
        "rows_without_sensors": len(readings) - judged,
        "max_gfx_activity_pct": busiest,
        "max_temperature_c": None if hottest is None else hottest[0],
        "limit_temperature_c": max_temp_c,
    }
    where = "" if hottest is None else f", hottest {hottest[0]:g} °C ({hottest[1]})"
    return verdict(
        TOOL,
        findings,
        numbers,
        f"{judged} GPUs idle: GFX activity at most {busiest:g} %{where}, under {max_temp_c:g} °C",
    )


def check_ecc(readings: Iterable[GpuReading]) -> ToolResult:
    """No uncorrectable ECC error on any GPU; correctable and deferred counts are reported.

    An uncorrectable count amd-smi reports as N/A fails: the gate cannot vouch for memory it
    could not read (`amd-smi metric --ecc` needs a driver with RAS enabled)."""
    readings = list(readings)
    findings: list[str] = []
    correctable = deferred = 0
    noted: list[str] = []
    for r in readings:
        name = _name(r)
        if r.ecc_uncorrectable is None:
            findings.append(f"{name}: the uncorrectable ECC count is N/A or was not collected")
        elif r.ecc_uncorrectable > 0:
            findings.append(
                f"{name}: {r.ecc_uncorrectable} uncorrectable ECC errors: the GPU's memory is "
                "failing; take the host out and have the GPU checked (amd-smi bad-pages)"
            )
        if r.ecc_correctable:
            correctable += r.ecc_correctable
            noted.append(f"{name}: {r.ecc_correctable}")
        deferred += r.ecc_deferred or 0
    if not readings:
        findings.append("no GPU in the output")
    numbers: dict[str, Number] = {
        "gpus": len(readings),
        "uncorrectable_total": sum(r.ecc_uncorrectable or 0 for r in readings),
        "correctable_total": correctable,
        "deferred_total": deferred,
    }
    detail = f"; correctable: {', '.join(noted)}" if noted else "; no correctable errors"
    return verdict(
        TOOL, findings, numbers, f"{len(readings)} GPUs, 0 uncorrectable ECC errors{detail}"
    )


def _name(r: GpuReading) -> str:
    return f"gpu {r.gpu}" if r.xcp is None else f"gpu {r.gpu} (xcp {r.xcp})"

"""`amd-smi` partition modes: the current accelerator (compute) and memory partition of each
GPU, and the gate's check that every GPU is in the modes its serving profile expects.

`parse_partition_json` / `parse_partition_text` read the current accelerator (compute) and memory
partition, from `amd-smi partition --current [--json]` or `amd-smi static --partition
--json`. The static key is `compute_partition` before ROCm 7 and `accelerator_partition`
after. Secondary partitions (partition ID 1 and up) report N/A for both modes: only partition
0 of a physical GPU can read them (rocm-systems projects/amdsmi/docs/conceptual/partition.md).
Some ROCm 6.3/6.4 builds print N/A for every accelerator type
(https://github.com/ROCm/ROCm/issues/4477); that is no answer, so the check fails on it.

`check_partitions` passes when every GPU is in the expected modes. A value the tool reports as
N/A fails it, unless the row is a secondary partition: the gate cannot pass what it could not
read.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.gate.tools._input import bounded_text, field_error, load_json
from sglx_core.gate.tools.amd_smi import MAX_GPUS, NA, TOOL, gpu_entries, gpu_index
from sglx_core.gate.tools.result import Number, ToolResult, verdict

COMPUTE_PARTITIONS = ("SPX", "DPX", "TPX", "QPX", "CPX")
MEMORY_PARTITIONS = ("NPS1", "NPS2", "NPS4", "NPS8")

_PARTITION = "amd-smi partition"
_PARTITION_HINT = (
    "capture `amd-smi partition --current --json` or `amd-smi static --partition --json` again "
    "(sudo may be needed) and keep only its standard output"
)


@dataclass(frozen=True)
class GpuPartition:
    """One logical GPU's current accelerator (compute) and memory partition; None for N/A."""

    gpu: int
    compute: str | None
    memory: str | None
    partition_id: int | None


def parse_partition_json(data: str | bytes) -> list[GpuPartition]:
    """The partitions in `amd-smi partition --current --json` output (a `current_partition`
    list) or in `amd-smi static [--partition] --json` output (a `partition` object per GPU)."""
    text = bounded_text(data, what=_PARTITION, hint=_PARTITION_HINT)
    document = load_json(text, what=_PARTITION, hint=_PARTITION_HINT)
    if isinstance(document, dict) and "current_partition" in document:
        current = document["current_partition"]
        if not isinstance(current, list) or not current:
            raise field_error(
                _PARTITION, "", "current_partition is not a non-empty list", _PARTITION_HINT
            )
        out = []
        for position, entry in enumerate(current[: MAX_GPUS + 1]):
            if not isinstance(entry, dict):
                raise field_error(_PARTITION, f"entry {position}", "is not an object", "")
            gpu = gpu_index(entry, "gpu_id", position, _PARTITION, _PARTITION_HINT)
            for key in ("accelerator_type", "memory"):
                if key not in entry:
                    raise field_error(_PARTITION, f"gpu {gpu}", f"{key} is missing", "")
            out.append(
                GpuPartition(
                    gpu=gpu,
                    compute=_mode(
                        entry["accelerator_type"], COMPUTE_PARTITIONS, gpu, "accelerator_type"
                    ),
                    memory=_mode(entry["memory"], MEMORY_PARTITIONS, gpu, "memory"),
                    partition_id=_partition_id(entry.get("partition_id", NA), gpu),
                )
            )
        return _unique(out)
    entries = gpu_entries(document, _PARTITION, _PARTITION_HINT)
    out = []
    for position, entry in enumerate(entries):
        gpu = gpu_index(entry, "gpu", position, _PARTITION, _PARTITION_HINT)
        partition = entry.get("partition")
        if not isinstance(partition, dict):
            raise field_error(
                _PARTITION,
                f"gpu {gpu}",
                "partition is missing (run `amd-smi static --partition --json`)",
                _PARTITION_HINT,
            )
        mode_key = next(
            (k for k in ("accelerator_partition", "compute_partition") if k in partition), None
        )
        if mode_key is None or "memory_partition" not in partition:
            raise field_error(
                _PARTITION,
                f"gpu {gpu}",
                "partition lacks accelerator_partition/compute_partition or memory_partition",
                _PARTITION_HINT,
            )
        out.append(
            GpuPartition(
                gpu=gpu,
                compute=_mode(partition[mode_key], COMPUTE_PARTITIONS, gpu, mode_key),
                memory=_mode(partition["memory_partition"], MEMORY_PARTITIONS, gpu, "memory"),
                partition_id=_partition_id(partition.get("partition_id", NA), gpu),
            )
        )
    return _unique(out)


def parse_partition_text(data: str | bytes) -> list[GpuPartition]:
    """The CURRENT_PARTITION table of `amd-smi partition` (or `partition --current`) text:
    `GPU_ID MEMORY ACCELERATOR_TYPE ACCELERATOR_PROFILE_INDEX PARTITION_ID` rows."""
    text = bounded_text(data, what=_PARTITION, hint=_PARTITION_HINT)
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == "CURRENT_PARTITION:")
    except StopIteration:
        raise field_error(
            _PARTITION, "", "has no CURRENT_PARTITION: table", _PARTITION_HINT
        ) from None
    header = lines[start + 1].split() if start + 1 < len(lines) else []
    needed = ("GPU_ID", "MEMORY", "ACCELERATOR_TYPE")
    if not all(column in header for column in needed):
        raise field_error(
            _PARTITION,
            "CURRENT_PARTITION",
            f"header {' '.join(header) or '(none)'} lacks {', '.join(needed)}",
            _PARTITION_HINT,
        )
    out = []
    for line in lines[start + 2 :]:
        cells = line.split()
        if not cells or not cells[0].isdigit():
            break
        if len(cells) != len(header):
            raise field_error(
                _PARTITION, f"GPU_ID {cells[0]}", f"row has {len(cells)} cells", _PARTITION_HINT
            )
        row = dict(zip(header, cells, strict=True))
        gpu = int(row["GPU_ID"])
        out.append(
            GpuPartition(
                gpu=gpu,
                compute=_mode(row["ACCELERATOR_TYPE"], COMPUTE_PARTITIONS, gpu, "ACCELERATOR_TYPE"),
                memory=_mode(row["MEMORY"], MEMORY_PARTITIONS, gpu, "memory"),
                partition_id=_partition_id(row.get("PARTITION_ID", NA), gpu),
            )
        )
        if len(out) > MAX_GPUS:
            raise field_error(_PARTITION, "", f"lists more than {MAX_GPUS} GPUs", "")
    if not out:
        raise field_error(_PARTITION, "CURRENT_PARTITION", "has no GPU rows", _PARTITION_HINT)
    return _unique(out)


def _mode(value: Any, known: tuple[str, ...], gpu: int, name: str) -> str | None:
    if value == NA:
        return None
    if not isinstance(value, str):
        raise field_error(_PARTITION, f"gpu {gpu}", f"{name} is {value!r}, not a mode", "")
    mode = value.strip().rstrip("*").upper()
    if mode not in known:
        raise field_error(
            _PARTITION, f"gpu {gpu}", f"{name} is {value!r}, not one of {', '.join(known)}", ""
        )
    return mode


def _partition_id(value: Any, gpu: int) -> int | None:
    """A partition ID: an integer, a digit string, or (older releases, CPX) the comma list of
    every partition on partition 0's row, read as 0; None for N/A."""
    if value == NA:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    if isinstance(value, str) and value.split(",")[0].strip().isdigit():
        return int(value.split(",")[0])
    raise field_error(_PARTITION, f"gpu {gpu}", f"partition_id is {value!r}", "")


def _unique(parts: list[GpuPartition]) -> list[GpuPartition]:
    gpus = [p.gpu for p in parts]
    duplicates = sorted({g for g in gpus if gpus.count(g) > 1})
    if duplicates:
        raise field_error(_PARTITION, f"gpu {duplicates[0]}", "appears twice", _PARTITION_HINT)
    return parts


def check_partitions(parts: Iterable[GpuPartition], *, compute: str, memory: str) -> ToolResult:
    """Every GPU in the expected accelerator (compute) and memory partition modes.

    A row whose modes are both N/A passes only as a secondary partition (partition ID 1 and
    up), whose mode is its primary's; any other N/A fails."""
    want_compute = compute.strip().upper()
    want_memory = memory.strip().upper()
    if want_compute not in COMPUTE_PARTITIONS:
        raise SglxError(
            f"{compute!r} is not an accelerator partition mode",
            hint=f"use one of {', '.join(COMPUTE_PARTITIONS)}",
            code="usage",
        )
    if want_memory not in MEMORY_PARTITIONS:
        raise SglxError(
            f"{memory!r} is not a memory partition mode",
            hint=f"use one of {', '.join(MEMORY_PARTITIONS)}",
            code="usage",
        )
    parts = list(parts)
    findings: list[str] = []
    secondary = 0
    for p in parts:
        if p.compute is None and p.memory is None and p.partition_id:
            secondary += 1
            continue
        for kind, got, want in (
            ("accelerator", p.compute, want_compute),
            ("memory", p.memory, want_memory),
        ):
            if got is None:
                findings.append(
                    f"gpu {p.gpu}: the {kind} partition is N/A; this amd-smi cannot report it "
                    "(ROCm/ROCm#4477): read `amd-smi static --partition --json` instead"
                )
            elif got != want:
                findings.append(
                    f"gpu {p.gpu}: {kind} partition {got}, expected {want}: set it with "
                    f"`amd-smi set -{'C' if kind == 'accelerator' else 'M'} {want}` (sudo; a "
                    "memory partition change needs an amdgpu reload)"
                )
    if not parts:
        findings.append("no GPU in the output")
    numbers: dict[str, Number] = {
        "gpus": len(parts),
        "secondary_partitions": secondary,
        "expected": f"{want_compute}/{want_memory}",
    }
    return verdict(
        TOOL,
        findings,
        numbers,
        f"{len(parts) - secondary} GPUs in {want_compute}/{want_memory}"
        + (f" ({secondary} secondary partitions follow their primary)" if secondary else ""),
    )

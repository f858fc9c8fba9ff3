"""How each vendor tool is asked for its devices' ECC counters, read and judged: one table for
the host checks (`test_vendor_*_ecc`, before and after a rollout) and the gate timer's devices
check (inside the server's container), so the two read the same thing the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sglx_core.gate.tools import amd_smi, xpu_smi
from sglx_core.gate.tools.result import ToolResult


@dataclass(frozen=True)
class EccRead:
    """One tool's ECC read: its arguments, the parser of its output, the judgement of the
    readings, and what it calls a device in findings."""

    args: tuple[str, ...]
    parse: Callable[[bytes], Sequence[Any]]
    check: Callable[[Sequence[Any]], ToolResult]
    unit: str


def _amd_smi_metric_ecc(data: bytes) -> Sequence[Any]:
    # `metric -e` prints the ECC section only: the other sections are not required
    return amd_smi.parse_metric_json(data, require=("ecc",))


ECC_READS: dict[str, EccRead] = {
    "amd-smi": EccRead(("metric", "-e", "--json"), _amd_smi_metric_ecc, amd_smi.check_ecc, "GPU"),
    "xpu-smi": EccRead(("-q",), xpu_smi.parse_query, xpu_smi.check_ecc, "XPU"),
}

"""The KFD topology of the amdgpu driver, as ROCm reads it: /sys/class/kfd/kfd/topology/nodes/
<n>/properties ("key value" lines printed by node_show() in the kernel's
drivers/gpu/drm/amd/amdkfd/kfd_topology.c) and mem_banks/<b>/properties (mem_show(): heap_type,
size_in_bytes, flags, width, mem_clk_max). The host's GPUs for serving-profile selection
(sglx_core.serving.hardware), and the plugin's preflight and Triton cache warm-up, read them
here. Why the frame-buffer banks are the memory figure: hardware.py's docstring."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from sglx_core.errors import SglxError
from sglx_core.serving.probe_root import ProbeRoot

KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
MAX_NODES = 1024
"""KFD nodes walked at most (an 8-GPU host in CPX mode has 65; no host has 1024)."""
MAX_MEM_BANKS = 64
PROPERTIES_MAX_BYTES = 64 << 10
"""sysfs prints at most one page (4 KiB, 64 KiB on some arm64 kernels)."""
MAX_PROPERTY_LINES = 512

HEAP_FB_PUBLIC = 1
HEAP_FB_PRIVATE = 2
_HEAPS = {HEAP_FB_PUBLIC: "FB_PUBLIC", HEAP_FB_PRIVATE: "FB_PRIVATE"}

_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
_NUMBERED = re.compile(r"^[0-9]{1,9}$")

_KFD_FIX = (
    "the KFD topology is damaged or is not the kernel's: reload the amdgpu driver (or reboot), "
    "and if this is a fixture tree, write it in the kernel's format"
)


@dataclass(frozen=True)
class KfdGpu:
    """One GPU node of the KFD topology."""

    node: str  # the node's folder name ("1")
    gfx_target_version: int
    device_id: int  # PCI device id (the node prints it in decimal)
    memory_bytes: int  # frame-buffer banks summed
    heap: str  # FB_PUBLIC | FB_PRIVATE
    # simd_count / simd_per_cu (kfd_topology.c node_show()); 0 when the node prints no
    # simd_per_cu. torch's multi_processor_count and AITER's cu_num are this number.
    compute_units: int = 0
    # The xGMI hive the GPU is in (node_show()'s hive_id: amdgpu's gmc.xgmi.hive_id); 0 for a
    # GPU in no hive, which reaches its peers over PCIe only.
    hive_id: int = 0


def gfx_name(version: int) -> str:
    """KFD's gfx_target_version (e.g. 90402) as a gfx name (gfx942)."""
    major, minor, step = version // 10000, version // 100 % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


def parse_kfd_properties(raw: bytes, path: Path) -> dict[str, int]:
    """A KFD `properties` file (node, mem bank, io link): one '<key> <unsigned int>' per line,
    as kfd_topology.c prints them with "%s %u" / "%s %llu". Anything else is refused."""
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        raise SglxError(
            f"{path}: the KFD properties file is not ASCII text",
            hint=_KFD_FIX,
            code="corrupt",
            path=str(path),
        ) from None
    lines = text.splitlines()
    if len(lines) > MAX_PROPERTY_LINES:
        raise SglxError(
            f"{path}: the KFD properties file has {len(lines)} lines; the kernel prints under 60",
            hint=_KFD_FIX,
            code="corrupt",
            path=str(path),
        )
    props: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        parts = line.split()
        if (
            len(parts) != 2
            or not _KEY.match(parts[0])
            or not parts[1].isascii()
            or not parts[1].isdigit()
            or len(parts[1]) > 20
        ):
            raise SglxError(
                f"{path}: line {number} ({line.strip()[:80]!r}) is not '<key> <unsigned integer>'",
                hint=_KFD_FIX,
                code="corrupt",
                path=str(path),
            )
        key, value = parts
        if key in props:
            raise SglxError(
                f"{path}: line {number} repeats the key {key!r}",
                hint=_KFD_FIX,
                code="corrupt",
                path=str(path),
            )
        props[key] = int(value)
    return props


def read_kfd_properties(path: Path, root: Path | None = None) -> dict[str, int]:
    """`parse_kfd_properties` of the file `path`, read bounded; with `root`, links that leave
    it are refused."""
    where = ProbeRoot(root if root is not None else Path("/"))
    raw = where.read(path, "KFD properties file", PROPERTIES_MAX_BYTES, _KFD_FIX)
    return parse_kfd_properties(raw, path)


def kfd_gpus(root: Path, denied: list[str] | None = None) -> list[KfdGpu]:
    """Every GPU node of the KFD topology under `root` this process may use, in node order (CPU
    nodes skipped); the names of nodes the kernel refused to show are appended to `denied`.

    Raises SglxError(code="no_device") when there is no topology at all."""
    return gpus_under(ProbeRoot(root), [] if denied is None else denied)


def gpus_under(root: ProbeRoot, denied: list[str]) -> list[KfdGpu]:
    nodes = root.path(KFD_NODES)
    if not os.path.lexists(nodes):
        raise SglxError(
            f"no KFD topology at /{KFD_NODES}: the amdgpu driver is not loaded, or /sys is not "
            "visible here",
            hint="load amdgpu on the host (modprobe amdgpu; see dmesg), and run the container "
            "with /sys visible (Docker's default) and --device /dev/kfd",
            code="no_device",
            path=str(nodes),
        )
    gpus: list[KfdGpu] = []
    for name in root.listdir(nodes, "KFD node folder", MAX_NODES, _KFD_FIX):
        node = nodes / name
        if not _NUMBERED.match(name):
            raise SglxError(
                f"{node}: a KFD node folder must be named by its number",
                hint=_KFD_FIX,
                code="corrupt",
                path=str(node),
            )
        try:
            gpu = _kfd_node(root, node)
        except SglxError as exc:
            # node_show() answers EPERM for a GPU the container's device cgroup does not grant
            # (kfd_devcgroup_check_permission in kfd_topology.c): a GPU not given to this
            # container with --device, which is not ours to count.
            if exc.code != "permission":
                raise
            denied.append(name)
            continue
        if gpu is not None:
            gpus.append(gpu)
    return gpus


def _kfd_node(root: ProbeRoot, node: Path) -> KfdGpu | None:
    props_file = node / "properties"
    raw = root.read(props_file, "KFD node properties file", PROPERTIES_MAX_BYTES, _KFD_FIX)
    props = parse_kfd_properties(raw, props_file)
    if "simd_count" not in props and "gfx_target_version" not in props:
        raise SglxError(
            f"{props_file}: has neither simd_count nor gfx_target_version; it is not a KFD node's "
            "properties",
            hint=_KFD_FIX,
            code="corrupt",
            path=str(props_file),
        )
    version = props.get("gfx_target_version", 0)
    if props.get("simd_count", 0) == 0 and version == 0:
        return None  # a CPU node
    if "gfx_target_version" not in props or version == 0:
        raise SglxError(
            f"{props_file}: a GPU node (simd_count {props.get('simd_count')}) without a "
            "gfx_target_version",
            hint="older amdgpu drivers do not print gfx_target_version: install the driver "
            "the profile's host floor names (sglx hosts check shows it); if this is a fixture, "
            "add the key",
            code="corrupt",
            path=str(props_file),
        )
    if "device_id" not in props:
        raise SglxError(
            f"{props_file}: a GPU node without device_id; the model cannot be identified",
            hint=_KFD_FIX,
            code="corrupt",
            path=str(props_file),
        )
    memory, heap = _kfd_memory(root, node)
    per_cu = props.get("simd_per_cu", 0)
    units = props.get("simd_count", 0) // per_cu if per_cu > 0 else 0
    hive = props.get("hive_id", 0)
    return KfdGpu(node.name, version, props["device_id"], memory, heap, units, hive)


def _kfd_memory(root: ProbeRoot, node: Path) -> tuple[int, str]:
    banks = node / "mem_banks"
    if not os.path.lexists(banks):
        raise SglxError(
            f"{banks}: a GPU node without mem_banks; its memory is unknown",
            hint=_KFD_FIX,
            code="corrupt",
            path=str(banks),
        )
    total, heaps = 0, set()
    for name in root.listdir(banks, "KFD mem_banks folder", MAX_MEM_BANKS, _KFD_FIX):
        bank_file = banks / name / "properties"
        if not _NUMBERED.match(name):
            raise SglxError(
                f"{banks / name}: a mem bank folder must be named by its number",
                hint=_KFD_FIX,
                code="corrupt",
                path=str(banks / name),
            )
        raw = root.read(bank_file, "KFD mem bank properties file", PROPERTIES_MAX_BYTES, _KFD_FIX)
        bank = parse_kfd_properties(raw, bank_file)
        missing = [k for k in ("heap_type", "size_in_bytes") if k not in bank]
        if missing:
            raise SglxError(
                f"{bank_file}: missing {', '.join(missing)}",
                hint=_KFD_FIX,
                code="corrupt",
                path=str(bank_file),
            )
        if bank["heap_type"] in _HEAPS:
            total += bank["size_in_bytes"]
            heaps.add(_HEAPS[bank["heap_type"]])
    if total == 0:
        raise SglxError(
            f"{banks}: the GPU node reports no frame-buffer memory (no bank with heap_type 1 or "
            "2 and a size)",
            hint="on an APU, give the GPU memory: a BIOS carve-out (UMA frame buffer size) or a "
            "GTT limit (ttm.pages_limit); otherwise " + _KFD_FIX,
            code="corrupt",
            path=str(banks),
        )
    return total, "+".join(sorted(heaps))

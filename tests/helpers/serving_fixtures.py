"""Fixture hosts for serving-profile selection, written in the kernel's real sysfs formats.

KFD topology: a node's `properties` holds the keys node_show() prints, in its order
(drivers/gpu/drm/amd/amdkfd/kfd_topology.c: cpu_cores_count ... num_cp_queues for every node;
max_engine_clk_fcompute, local_mem_size (always 0 now), fw_version, capability, capability2,
debug_prop, sdma_fw_version, unique_id, num_xcc for GPU nodes only; max_engine_clk_ccompute
last). A mem bank's `properties` is mem_show(): heap_type, size_in_bytes, flags, width,
mem_clk_max; GPU banks also have `used_memory`. heap_type 1 is FB_PUBLIC, 0 SYSTEM
(kfd_topology.h).

The identifying values (gfx_target_version, device_id in decimal, CUs, memory) come from real
hosts: rocminfo's "Chip ID" is the node's device_id and its "Pool 1" size is the mem bank's
size_in_bytes / 1024, so each preset cites a rocminfo dump. Other values (firmware, clocks,
cache counts) are representative, not measured.

Kunlun: /dev/xpuN made with mknod (tests run as root here; tests/helpers/devices.py does the
same), and PCI functions with `vendor`/`device` files as the kernel prints them ("0x1d22").
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
NULL_DEV = os.makedev(1, 3)


@dataclass(frozen=True)
class Gpu:
    """The node_show() values that tell GPUs apart."""

    gfx_target_version: int
    device_id: int  # decimal, as the node prints it
    memory_bytes: int  # the FB bank's size_in_bytes
    compute_units: int
    simd_per_cu: int
    wave_front_size: int
    array_count: int
    cu_per_simd_array: int
    num_xcc: int
    max_engine_clk: int
    fw_version: int
    sdma_fw_version: int
    heap_type: int = 1  # FB_PUBLIC (large BAR, and every APU)
    mem_width: int = 8192
    mem_clk_max: int = 1300


KIB = 1024

# MI300X: gfx942 (90402), Chip ID 29857 (0x74a1), 304 CUs x 4 SIMDs, Pool 1 201310208 KB
# (= 191.98 GiB of the 192 GB HBM3). rocminfo in ROCm/legacy-rocm-build#4414 and
# ROCm/rocm-examples#187; 0x74a1 = "AMD Instinct MI300X" in libdrm's data/amdgpu.ids
# (gitlab.freedesktop.org/mesa/drm). num_xcc 8 (8 XCDs, AMD CDNA 3 white paper); the array
# geometry is representative.
MI300X = Gpu(90402, 29857, 201310208 * KIB, 304, 4, 64, 32, 10, 8, 2100, 150, 21)
# MI325X: gfx942, Chip ID 29861 (0x74a5), 304 CUs, Pool 1 268419072 KB (= 255.98 GiB of the
# 256 GB HBM3E). rocminfo in ROCm/ROCm#6023 (8x MI325X); 0x74a5 = MI325X in amdgpu.ids.
MI325X = Gpu(90402, 29861, 268419072 * KIB, 304, 4, 64, 32, 10, 8, 2100, 177, 24)
# MI355X: gfx950 (90500), Chip ID 30115 (0x75a3), 256 CUs, 2400 MHz (ROCm/rocm-libraries#9055),
# Pool 1 301973504 KB (= 287.98 GiB of the 288 GB HBM3E; ROCm/legacy-rocm-build#5891);
# 0x75a3 = MI355X in amdgpu.ids.
MI355X = Gpu(90500, 30115, 301973504 * KIB, 256, 4, 64, 32, 8, 8, 2400, 38, 12)
# Strix Halo (Ryzen AI MAX+ 395, Radeon 8060S): gfx1151 (110501), Chip ID 5510 (0x1586),
# 40 CUs x 2 SIMDs, wave32, 2900 MHz, BDFID 50432; with a 96 GB BIOS carve-out its KFD bank is
# Pool 1 100663296 KB = 96 GiB exactly (ROCm/ROCm#5572). 0x1586 = Radeon 8060S/8050S/8040S in
# amdgpu.ids. With a small carve-out and a larger GTT the same bank reports the GTT limit
# instead (amdgpu_amdkfd_get_local_mem_info(), apu_prefer_gtt): pass memory_bytes to show it.
STRIX_HALO = Gpu(
    110501,
    5510,
    100663296 * KIB,
    40,
    2,
    32,
    4,
    10,
    1,
    2900,
    31,
    14,
    mem_width=256,
    mem_clk_max=8000,
)


XGMI_HIVE = 1455590920
"""The hive_id every dGPU of a fixture host shares (one xGMI hive, as on an 8-GPU platform)."""

# Every key node_show() prints, in its order; GPU_ONLY_KEYS only for GPU nodes, and
# max_engine_clk_ccompute last for all.
NODE_KEYS = [
    "cpu_cores_count",
    "simd_count",
    "mem_banks_count",
    "caches_count",
    "io_links_count",
    "p2p_links_count",
    "cpu_core_id_base",
    "simd_id_base",
    "max_waves_per_simd",
    "lds_size_in_kb",
    "gds_size_in_kb",
    "num_gws",
    "wave_front_size",
    "array_count",
    "simd_arrays_per_engine",
    "cu_per_simd_array",
    "simd_per_cu",
    "max_slots_scratch_cu",
    "gfx_target_version",
    "vendor_id",
    "device_id",
    "location_id",
    "domain",
    "drm_render_minor",
    "hive_id",
    "num_sdma_engines",
    "num_sdma_xgmi_engines",
    "num_sdma_queues_per_engine",
    "num_cp_queues",
]
GPU_ONLY_KEYS = [
    "max_engine_clk_fcompute",
    "local_mem_size",
    "fw_version",
    "capability",
    "capability2",
    "debug_prop",
    "sdma_fw_version",
    "unique_id",
    "num_xcc",
]


def _node_properties(
    gpu: Gpu | None, *, index: int, cpu_cores: int, hive_id: int | None = None
) -> str:
    """One node's properties file, every key node_show() prints, in its order."""
    values = dict.fromkeys(NODE_KEYS, 0)
    if gpu is None:
        values.update(cpu_cores_count=cpu_cores, mem_banks_count=1, io_links_count=8)
        keys = [*NODE_KEYS, "max_engine_clk_ccompute"]
    else:
        apu = gpu.gfx_target_version >= 110000
        values.update(
            simd_count=gpu.compute_units * gpu.simd_per_cu,
            mem_banks_count=1,
            caches_count=206 if apu else 316,
            io_links_count=1,
            p2p_links_count=0 if apu else 7,
            simd_id_base=2147487744 + 4096 * index,
            max_waves_per_simd=16 if apu else 8,
            lds_size_in_kb=64,
            num_gws=64,
            wave_front_size=gpu.wave_front_size,
            array_count=gpu.array_count,
            simd_arrays_per_engine=2 if apu else 1,
            cu_per_simd_array=gpu.cu_per_simd_array,
            simd_per_cu=gpu.simd_per_cu,
            max_slots_scratch_cu=32,
            gfx_target_version=gpu.gfx_target_version,
            vendor_id=4098,
            device_id=gpu.device_id,
            location_id=50432 if apu else 6912 + 4352 * index,
            drm_render_minor=127 + index,
            hive_id=(0 if apu else XGMI_HIVE) if hive_id is None else hive_id,
            num_sdma_engines=2,
            num_sdma_xgmi_engines=0 if apu else 14,
            num_sdma_queues_per_engine=8,
            num_cp_queues=24,
            max_engine_clk_fcompute=gpu.max_engine_clk,
            local_mem_size=0,
            fw_version=gpu.fw_version,
            capability=746586752,
            capability2=0,
            debug_prop=1495,
            sdma_fw_version=gpu.sdma_fw_version,
            unique_id=1744012357281629953 + index,
            num_xcc=gpu.num_xcc,
        )
        keys = [*NODE_KEYS, *GPU_ONLY_KEYS, "max_engine_clk_ccompute"]
    values["max_engine_clk_ccompute"] = 3700
    return "".join(f"{key} {values[key]}\n" for key in keys)


def _bank_properties(heap_type: int, size: int, width: int, clock: int) -> str:
    return (
        f"heap_type {heap_type}\nsize_in_bytes {size}\nflags 0\nwidth {width}\n"
        f"mem_clk_max {clock}\n"
    )


def write_kfd_host(
    root: Path,
    gpus: Sequence[Gpu],
    *,
    cpu_nodes: int = 1,
    cpu_cores: int = 64,
    system_memory: int = 1536 << 30,
    with_dev: bool = True,
    hive_ids: Sequence[int] | None = None,
) -> Path:
    """A KFD topology under `root`: `cpu_nodes` CPU nodes, then one node per entry of `gpus`
    (their xGMI hive: `hive_ids`, else XGMI_HIVE for every dGPU, 0 for an APU).

    Each node has properties, gpu_id, name, mem_banks/0 (and the caches, io_links, p2p_links
    folders the kernel creates). With `with_dev`, /dev/kfd and a renderD node per GPU too."""
    nodes = root / KFD_NODES
    nodes.mkdir(parents=True, exist_ok=True)
    (root / "sys/class/kfd/kfd/topology/generation_id").write_text("1\n")
    index = 0
    for _ in range(cpu_nodes):
        _write_node(
            nodes / str(index),
            _node_properties(None, index=index, cpu_cores=cpu_cores),
            gpu_id=0,
            name="",
            bank=_bank_properties(0, system_memory // cpu_nodes, 64, 4800),
            used=False,
        )
        index += 1
    for number, gpu in enumerate(gpus, start=1):
        _write_node(
            nodes / str(index),
            _node_properties(
                gpu,
                index=number,
                cpu_cores=0,
                hive_id=None if hive_ids is None else hive_ids[number - 1],
            ),
            gpu_id=40000 + number * 1111,
            name="ip discovery",
            bank=_bank_properties(gpu.heap_type, gpu.memory_bytes, gpu.mem_width, gpu.mem_clk_max),
            used=True,
        )
        index += 1
    if with_dev:
        char_node(root / "dev/kfd")
        for number in range(1, len(gpus) + 1):
            char_node(root / f"dev/dri/renderD{127 + number}")
    return root


def _write_node(
    node: Path, properties: str, *, gpu_id: int, name: str, bank: str, used: bool
) -> None:
    for folder in ("caches", "io_links", "p2p_links", "mem_banks/0"):
        (node / folder).mkdir(parents=True, exist_ok=True)
    (node / "properties").write_text(properties)
    (node / "gpu_id").write_text(f"{gpu_id}\n")
    (node / "name").write_text(f"{name}\n")
    (node / "mem_banks/0/properties").write_text(bank)
    if used:
        (node / "mem_banks/0/used_memory").write_text("0\n")


def char_node(path: Path) -> Path:
    """A character device that opens like /dev/null (mknod; needs root)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, 0o666 | stat.S_IFCHR, NULL_DEV)
    return path


def mi300x_host(root: Path, count: int = 8) -> Path:
    return write_kfd_host(root, [MI300X] * count, cpu_nodes=2, cpu_cores=96)


def mi325x_host(root: Path, count: int = 4) -> Path:
    return write_kfd_host(root, [MI325X] * count, cpu_nodes=2, cpu_cores=128)


def mi355x_host(root: Path, count: int = 8) -> Path:
    return write_kfd_host(root, [MI355X] * count, cpu_nodes=2, cpu_cores=128)


def strix_halo_host(root: Path, memory_bytes: int | None = None) -> Path:
    """One gfx1151 APU (node 1) beside its 16-core CPU (node 0); the KFD bank shows the 96 GiB
    carve-out, or `memory_bytes` (e.g. a GTT limit)."""
    gpu = STRIX_HALO if memory_bytes is None else _replace_memory(STRIX_HALO, memory_bytes)
    return write_kfd_host(root, [gpu], cpu_cores=16, system_memory=32 << 30)


def _replace_memory(gpu: Gpu, memory_bytes: int) -> Gpu:
    from dataclasses import replace

    return replace(gpu, memory_bytes=memory_bytes)


# P800: PCI vendor 0x1d22, device ids 0x3686-0x3689 (PaddlePaddle's P800 guide: `lspci -d 1d22:`
# and `-d 2057:`, see /work/shared/research/kunlun.md section 1.4); images/kunlun/arch.yaml
# probes the same ids. 0x3684 is the gen2 (R200/R300) chip.
P800_DEVICE = "0x3686"
KUNLUN_GEN2_DEVICE = "0x3684"


def p800_host(
    root: Path, cards: int = 8, *, pci_device: str = P800_DEVICE, pci_vendor: str = "0x1d22"
) -> Path:
    """`cards` Kunlun cards: /dev/xpuN and /dev/xpuctrl (character devices) and one PCI function
    each under /sys/bus/pci/devices (plain folders, as the real links resolve to)."""
    for index in range(cards):
        char_node(root / f"dev/xpu{index}")
        function = root / f"sys/bus/pci/devices/0000:{0x3B + index:02x}:00.0"
        function.mkdir(parents=True)
        (function / "vendor").write_text(f"{pci_vendor}\n")
        (function / "device").write_text(f"{pci_device}\n")
        (function / "class").write_text("0x120000\n")
    # A host bridge of another vendor, which detect() must skip.
    bridge = root / "sys/bus/pci/devices/0000:00:00.0"
    bridge.mkdir(parents=True, exist_ok=True)
    (bridge / "vendor").write_text("0x8086\n")
    (bridge / "device").write_text("0x09a2\n")
    if cards:
        char_node(root / "dev/xpuctrl")
    (root / "proc/kunlun").mkdir(parents=True, exist_ok=True)
    (root / "proc/kunlun/version").write_text("5.0.21.26\n")
    return root


def cpu_host(
    root: Path,
    *,
    numa_nodes: int = 2,
    mem_total_kib: int = 528279804,
    memory_max: str | None = None,
) -> Path:
    """NUMA nodes under /sys/devices/system/node, /proc/meminfo as the kernel prints it, and,
    with `memory_max`, a cgroup v2 memory.max ("max" or bytes). Cores cannot be faked: detect()
    reads this process's affinity."""
    nodes = root / "sys/devices/system/node"
    nodes.mkdir(parents=True, exist_ok=True)
    for index in range(numa_nodes):
        (nodes / f"node{index}").mkdir()
        (nodes / f"node{index}/cpulist").write_text(f"{index * 32}-{index * 32 + 31}\n")
    (nodes / "possible").write_text(f"0-{max(numa_nodes - 1, 0)}\n")
    (nodes / "online").write_text(f"0-{max(numa_nodes - 1, 0)}\n")
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/meminfo").write_text(
        f"MemTotal:       {mem_total_kib} kB\n"
        "MemFree:        501234567 kB\n"
        "MemAvailable:   512345678 kB\n"
        "Buffers:          1234567 kB\n"
        "Cached:          12345678 kB\n"
        "SwapCached:             0 kB\n"
        "HugePages_Total:        0\n"
        "Hugepagesize:        2048 kB\n"
    )
    if memory_max is not None:
        (root / "sys/fs/cgroup").mkdir(parents=True, exist_ok=True)
        (root / "sys/fs/cgroup/memory.max").write_text(f"{memory_max}\n")
    return root

"""Fixture device trees in the real file formats: KFD topology, PCI sysfs and /dev nodes.

They stand in for AMD and Kunlun hosts under a probe root (SGLX_PROBE_ROOT). Device nodes are
real character devices made with mknod: `working=True` borrows /dev/null's numbers (opens fine),
otherwise an unassigned major (open fails with ENXIO, like a node whose driver is gone).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

NULL_DEV = os.makedev(1, 3)
NO_DRIVER_DEV = os.makedev(511, 0)  # no driver registers this major

_CPU_NODE = """cpu_cores_count 96
simd_count 0
mem_banks_count 1
caches_count 0
io_links_count 8
p2p_links_count 0
cpu_core_id_base 0
simd_id_base 0
max_waves_per_simd 0
lds_size_in_kb 0
gds_size_in_kb 0
num_gws 0
wave_front_size 0
array_count 0
gfx_target_version 0
vendor_id 0
device_id 0
location_id 0
domain 0
drm_render_minor 0
"""

_GPU_NODE = """cpu_cores_count 0
simd_count {simd}
mem_banks_count 1
caches_count 206
io_links_count 1
p2p_links_count 7
cpu_core_id_base 0
simd_id_base 2147487744
max_waves_per_simd 8
lds_size_in_kb 64
gds_size_in_kb 0
num_gws 64
wave_front_size {wave}
array_count 76
simd_arrays_per_engine 1
cu_per_simd_array 10
simd_per_cu 4
max_slots_scratch_cu 32
gfx_target_version {version}
vendor_id 4098
device_id {device_id}
location_id {location}
domain 0
drm_render_minor {minor}
num_sdma_engines 2
"""


def char_node(path: Path, *, working: bool = True, mode: int = 0o666) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, mode | stat.S_IFCHR, NULL_DEV if working else NO_DRIVER_DEV)
    path.chmod(mode)
    return path


def make_kfd_host(
    root: Path, gfx_versions: list[int], *, with_dev: bool = True, working: bool = True
) -> Path:
    """A host with one CPU node and a GPU node per entry of `gfx_versions` (e.g. 90402)."""
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    (nodes / "0").mkdir(parents=True)
    (nodes / "0" / "properties").write_text(_CPU_NODE)
    for index, version in enumerate(gfx_versions, start=1):
        node = nodes / str(index)
        node.mkdir()
        wave = 32 if version >= 100000 else 64
        node.joinpath("properties").write_text(
            _GPU_NODE.format(
                simd=1216,  # an MI300X: 304 compute units of simd_per_cu 4 SIMDs
                wave=wave,
                version=version,
                device_id=29857 + index,
                location=50432 + index,
                minor=127 + index,
            )
        )
    if with_dev:
        char_node(root / "dev/kfd", working=working)
        for index in range(1, len(gfx_versions) + 1):
            char_node(root / f"dev/dri/renderD{127 + index}", working=working)
    return root


def make_kunlun_host(
    root: Path, cards: int, *, pci_device: str = "0x3686", working: bool = True
) -> Path:
    """A host with `cards` P800 XPUs: /dev/xpuN, /dev/xpuctrl and their PCI functions."""
    for index in range(cards):
        char_node(root / f"dev/xpu{index}", working=working)
        pci = root / f"sys/bus/pci/devices/0000:{0x3B + index:02x}:00.0"
        pci.mkdir(parents=True)
        (pci / "vendor").write_text("0x1d22\n")
        (pci / "device").write_text(f"{pci_device}\n")
        (pci / "class").write_text("0x120000\n")
    if cards:
        char_node(root / "dev/xpuctrl", working=working)
    (root / "proc/kunlun").mkdir(parents=True)
    (root / "proc/kunlun/version").write_text("5.0.21.38\n")
    return root

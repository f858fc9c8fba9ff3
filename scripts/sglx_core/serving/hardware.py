"""What accelerators this host has, read from sysfs, /proc and /dev only: the model, how many,
and the memory each one offers. Serving-profile selection and the capacity check start here.

No vendor tool runs and no vendor stack is imported, so this answers in milliseconds inside
`sglx-serve --dry-run` and on the host alike. Every path is read under a probe root
($SGLX_PROBE_ROOT, default /; the convention of plugin/sglx_platform/probe.py), so tests use
fixture trees in the real kernel formats.

Per family (`profile.platform.family`):
- rocm: the KFD topology (read by sglx_core.serving.kfd),
  /sys/class/kfd/kfd/topology/nodes/<n>/properties ("key value" lines printed by node_show()
  in the kernel's drivers/gpu/drm/amd/amdkfd/kfd_topology.c) and mem_banks/<b>/properties
  (mem_show(): heap_type, size_in_bytes, flags, width, mem_clk_max).
  A GPU node has a nonzero simd_count and gfx_target_version (the kernel prints simd_count 0 and
  gfx_target_version 0 for CPU nodes). Its memory is the sum of its frame-buffer banks
  (heap_type 1 FB_PUBLIC or 2 FB_PRIVATE; kfd_topology.h). That is the figure ROCm itself
  allocates from (rocminfo's "Pool 1" is the same size_in_bytes), and it is right for an APU
  too: amdgpu_amdkfd_get_local_mem_info() (drivers/gpu/drm/amd/amdgpu/amdgpu_amdkfd.c) reports
  the BIOS carve-out, or, when the GTT is larger (`apu_prefer_gtt`, set in amdgpu_ttm_init()),
  the GTT limit (ttm.pages_limit) as the APU's FB_PUBLIC bank. A Strix Halo with a 96 GiB
  carve-out shows 100663296 KB (ROCm/ROCm#5572); one with 512 MB and ttm.pages_limit raised
  shows the GTT (noamsto/nix-amd-ai#42). So the KFD bank is the one number to read.
- kunlun: the /dev/xpuN character devices this container can open, identified by the PCI
  device ids of the probe's vendor under /sys/bus/pci/devices. No sysfs file is known to give a
  Kunlun card's memory (xpu-smi reports it, and detect() runs no tool), so the memory is the
  accelerator table's nominal `memory_gib` for the identified card.
- cpu: the cores this process may run on (sched_getaffinity), the NUMA nodes under
  /sys/devices/system/node, and MemTotal from /proc/meminfo, capped by the cgroup memory limit
  (a container with --memory sees the host's MemTotal but cannot use it).

Bad input is refused, never defaulted: a properties file with a non-integer value, a GPU node
without gfx_target_version, an unreadable or oversized file, a link that leaves the probe root
all raise SglxError naming the file and the fix. Every read is bounded (sglx_core.untrusted)
and so is every directory walked.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.profile.schema import KfdProbe, KunlunProbe
from sglx_core.serving.kfd import KfdGpu, gfx_name, gpus_under
from sglx_core.serving.probe_root import ProbeRoot, probe_root

# The error code when devices are present but none is one this image serves (another arch's
# GPUs, cards whose PCI ids the profile does not know): a finding. `no_device` (none at all)
# is a container started without its devices, which preflight names.
NOT_SERVED = "accelerator_not_served"
PCI_DEVICES = "sys/bus/pci/devices"
NUMA_NODES = "sys/devices/system/node"
MEMINFO = "proc/meminfo"
CGROUP_V2_MEMORY_MAX = "sys/fs/cgroup/memory.max"
CGROUP_V1_MEMORY_LIMIT = "sys/fs/cgroup/memory/memory.limit_in_bytes"

MAX_PCI_DEVICES = 8192
MAX_DEV_ENTRIES = 65536
MAX_NUMA_NODES = 4096
SMALL_FILE_MAX_BYTES = 4 << 10
MEMINFO_MAX_BYTES = 64 << 10

# A table entry's nominal memory matches a reported size within this band: the kernel keeps
# a little back (an MI300X's 192 GiB shows as 191.98 GiB), and nothing reports more.
_NOMINAL_LOW, _NOMINAL_HIGH = 0.90, 1.02

_XPU = re.compile(r"^xpu([0-9]{1,6})$")
_NUMA = re.compile(r"^node[0-9]{1,6}$")
_HEX_ID = re.compile(r"^0x[0-9a-f]{4}$")


class AcceleratorSpec(Protocol):
    """What detect() needs of one `serving.accelerators` entry (the profile's AcceleratorModel).

    An entry identifies a device by `gfx_target_version` (rocm) and/or `pci_device_ids` ("0x74a1";
    rocm and kunlun); `memory_gib` is the nominal memory, used to tell models apart that share
    ids, and as the memory of a card whose memory sysfs does not show (kunlun)."""

    @property
    def gfx_target_version(self) -> int | None: ...

    @property
    def pci_device_ids(self) -> tuple[str, ...]: ...

    @property
    def memory_gib(self) -> float | None: ...


@dataclass(frozen=True)
class Accelerators:
    """The devices of this arch on the host, as selection and the capacity check see them."""

    family: str  # profile.platform.family: "cpu" | "rocm" | "kunlun"
    model: str | None  # a key of profile.serving.accelerators; None when no entry matches
    count: int  # devices of this arch on the host (cpu: 1, the host)
    memory_bytes: int  # usable memory per device (the smallest); cpu: MemTotal (cgroup-capped)
    facts: dict[str, str] = field(default_factory=dict)  # what identified it, for the operator


def detect(
    profile: Profile,
    root: Path | None = None,
    *,
    accelerators: Mapping[str, AcceleratorSpec] | None = None,
) -> Accelerators:
    """The accelerators of `profile`'s arch on this host, read under `root`.

    `accelerators` is the table of known models; None (the normal case) reads
    `profile.serving.accelerators`. Tests pass their own table through it.

    Raises SglxError for a malformed or unreadable topology (naming the file) and, with code
    "no_device", when the host has no device of this arch at all."""
    root = probe_root() if root is None else root
    table = _table(profile) if accelerators is None else accelerators
    spec = profile.devices.probe
    family = profile.platform.family
    if isinstance(spec, KfdProbe):
        return _detect_rocm(family, spec, ProbeRoot(root), table)
    if isinstance(spec, KunlunProbe):
        return _detect_kunlun(family, spec, ProbeRoot(root), table)
    return _detect_cpu(family, ProbeRoot(root))


def _table(profile: Profile) -> Mapping[str, AcceleratorSpec]:
    return profile.serving.accelerators


def gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def _detect_rocm(
    family: str, spec: KfdProbe, root: ProbeRoot, table: Mapping[str, AcceleratorSpec]
) -> Accelerators:
    denied: list[str] = []
    gpus = gpus_under(root, denied)
    mine = [g for g in gpus if g.gfx_target_version in spec.gfx_target_versions]
    others = sorted(
        {gfx_name(g.gfx_target_version) for g in gpus}
        - {gfx_name(v) for v in spec.gfx_target_versions}
    )
    wanted = ", ".join(gfx_name(v) for v in spec.gfx_target_versions)
    if not mine:
        found = f"only {', '.join(others)} GPUs" if others else "no GPU"
        if denied:
            found += f" this container may use (nodes {', '.join(denied)} not granted)"
        raise SglxError(
            f"the KFD topology lists {found}; this image serves {wanted}",
            hint="run the image built for this host's GPUs (sglx profile list shows the "
            "arches), or check that the container was started with --device /dev/kfd and "
            "/dev/dri",
            # GPUs of another arch are a finding (the wrong image for this host), not a
            # container started without its devices.
            code=NOT_SERVED if others else "no_device",
        )
    names = {g.node: identify_rocm(g, table) for g in mine}
    models = set(names.values())
    model = models.pop() if len(models) == 1 else None
    memory = min(g.memory_bytes for g in mine)
    facts = {
        "gfx_target": ", ".join(sorted({gfx_name(g.gfx_target_version) for g in mine})),
        "gfx_target_version": ", ".join(sorted({str(g.gfx_target_version) for g in mine})),
        "device_id": ", ".join(sorted({f"0x{g.device_id:04x}" for g in mine})),
        "vram": gib(memory),
        "vram_heap": ", ".join(sorted({g.heap for g in mine})),
        "count": str(len(mine)),
        "kfd_nodes": ", ".join(g.node for g in mine),
    }
    units = sorted({g.compute_units for g in mine if g.compute_units})
    if units:
        facts["compute_units"] = ", ".join(str(n) for n in units)
    if len(set(names.values())) > 1:
        facts["mixed"] = ", ".join(
            f"node {node}: {name or 'unknown'}" for node, name in names.items()
        )
    if others:
        facts["other_gpus"] = ", ".join(others)
    if denied:
        facts["kfd_nodes_not_granted"] = ", ".join(denied)
    if len(mine) > 1:
        facts.update(interconnect(mine))
    return Accelerators(family, model, len(mine), memory, facts)


def interconnect(gpus: Sequence[KfdGpu]) -> dict[str, str]:
    """How the GPUs reach each other, as the KFD topology says: `interconnect` "fast" when
    they are all in one xGMI hive (the same nonzero hive_id), else "slow", and `link_groups`,
    the hive or each node's. What the two links are called and what the slow one costs is the
    profile's (`devices.interconnect`, shared/rocm.yaml), which preflight words its check with."""
    hives = {g.hive_id for g in gpus}
    if len(hives) == 1 and 0 not in hives:
        return {"interconnect": "fast", "link_groups": f"hive 0x{hives.pop():x}"}
    listed = ", ".join(
        f"node {g.node}: {f'hive 0x{g.hive_id:x}' if g.hive_id else 'no hive'}" for g in gpus
    )
    return {"interconnect": "slow", "link_groups": listed}


def identify_rocm(gpu: KfdGpu, table: Mapping[str, AcceleratorSpec]) -> str | None:
    """The table entry for `gpu`: gfx_target_version and PCI device id must both match where
    the entry names them; among several matches the nominal memory decides. None when no
    single entry fits."""
    device = f"0x{gpu.device_id:04x}"
    matches = []
    for name, entry in table.items():
        ids = {i.lower() for i in entry.pci_device_ids}
        if entry.gfx_target_version is None and not ids:
            continue
        if (
            entry.gfx_target_version is not None
            and entry.gfx_target_version != gpu.gfx_target_version
        ):
            continue
        if ids and device not in ids:
            continue
        matches.append(name)
    if len(matches) > 1:
        matches = [n for n in matches if _near_nominal(gpu.memory_bytes, table[n].memory_gib)]
    return matches[0] if len(matches) == 1 else None


def _near_nominal(memory_bytes: int, nominal_gib: float | None) -> bool:
    if nominal_gib is None:
        return False
    reported = memory_bytes / (1 << 30)
    return nominal_gib * _NOMINAL_LOW <= reported <= nominal_gib * _NOMINAL_HIGH


# --- Kunlun -----------------------------------------------------------------------------------


def _detect_kunlun(
    family: str, spec: KunlunProbe, root: ProbeRoot, table: Mapping[str, AcceleratorSpec]
) -> Accelerators:
    cards = _xpu_nodes(root)
    if not cards:
        raise SglxError(
            "no /dev/xpuN device nodes: the kunlun driver is not loaded, or the container was "
            "started without the cards",
            hint="on the host: lsmod | grep -w kunlun; start the container with --device "
            "/dev/xpuN for each card and --device /dev/xpuctrl",
            code="no_device",
        )
    pci = _pci_device_ids(root, spec.pci_vendors)
    supported = sorted({d for d in pci if d in spec.pci_devices})
    unsupported = sorted({d for d in pci if d not in spec.pci_devices})
    where = f"/{PCI_DEVICES}"
    if not supported:
        found = f"only unsupported cards ({', '.join(unsupported)})" if unsupported else "no card"
        # Cards the driver gave this container that sglx cannot identify are a finding, never
        # a skip: the serving profile and the capacity check would silently not apply.
        raise SglxError(
            f"{len(cards)} /dev/xpu nodes, but {where} lists {found} of vendor "
            f"{' or '.join(spec.pci_vendors)}; the card model cannot be identified",
            hint=f"this image serves PCI devices {', '.join(spec.pci_devices)}; run it with /sys "
            "visible (Docker's default) on a host with those cards, or add the card's vendor "
            "and device ids to devices.probe in the arch profile, with their source",
            code=NOT_SERVED,
        )
    models = {d: _identify_pci(d, table) for d in supported}
    named = set(models.values())
    model = named.pop() if len(named) == 1 else None
    entry = table.get(model) if model is not None else None
    if model is None or entry is None or entry.memory_gib is None:
        raise SglxError(
            f"cannot tell the memory of the Kunlun cards (PCI {', '.join(supported)}): "
            + (
                "they are different models"
                if len(set(models.values())) > 1
                else "no serving.accelerators entry with a memory_gib lists "
                + ("them" if len(supported) > 1 else "it")
            ),
            hint="add the card to serving.accelerators in the arch profile with its PCI device "
            "ids and nominal memory_gib (with its source); sysfs does not report Kunlun memory",
            code="unknown_accelerator",
        )
    memory = int(entry.memory_gib * (1 << 30))
    facts = {
        "pci_vendors": ", ".join(spec.pci_vendors),
        "device_id": ", ".join(supported),
        "cards": str(len(cards)),
        "pci_functions": str(sum(1 for d in pci if d in spec.pci_devices)),
        "memory": f"{gib(memory)} (nominal, serving.accelerators.{model}; sysfs has no figure)",
        "count": str(len(cards)),
    }
    if unsupported:
        facts["unsupported_pci"] = ", ".join(unsupported)
    return Accelerators(family, model, len(cards), memory, facts)


def _identify_pci(device: str, table: Mapping[str, AcceleratorSpec]) -> str | None:
    matches = [n for n, e in table.items() if device in {i.lower() for i in e.pci_device_ids}]
    return matches[0] if len(matches) == 1 else None


def _xpu_nodes(root: ProbeRoot) -> list[str]:
    dev = root.path("dev")
    if not os.path.lexists(dev):
        return []
    hint = (
        "the device node is not the kunlun driver's: recreate it (reload the kunlun module) "
        "or pass the real one with --device"
    )
    cards = []
    for name in root.listdir(dev, "/dev folder", MAX_DEV_ENTRIES, hint):
        if not _XPU.match(name):
            continue
        node = dev / name
        real = root.inside(node, "device node")
        try:
            mode = real.stat().st_mode
        except OSError as exc:
            raise SglxError(
                f"{node}: cannot read the device node: {exc.strerror}",
                hint=hint,
                code="environment",
                path=str(node),
            ) from None
        if not stat.S_ISCHR(mode):
            raise SglxError(
                f"{node}: is not a character device", hint=hint, code="corrupt", path=str(node)
            )
        cards.append(name)
    return cards


def _pci_device_ids(root: ProbeRoot, vendors: tuple[str, ...]) -> list[str]:
    """PCI device ids ("0x3686") of every function of one of `vendors`, one per function."""
    devices = root.path(PCI_DEVICES)
    if not os.path.lexists(devices):
        return []
    hint = (
        "the PCI sysfs tree is damaged or not the kernel's; if this is a fixture, write "
        "'0x1234' lines as the kernel does"
    )
    found = []
    for name in root.listdir(devices, "PCI devices folder", MAX_PCI_DEVICES, hint):
        function = devices / name
        if _hex_file(root, function / "vendor", hint) not in vendors:
            continue
        found.append(_hex_file(root, function / "device", hint))
    return found


def _hex_file(root: ProbeRoot, path: Path, hint: str) -> str:
    raw = root.read(path, "PCI id file", SMALL_FILE_MAX_BYTES, hint)
    value = raw.decode("ascii", errors="replace").strip().lower()
    if not _HEX_ID.match(value):
        raise SglxError(
            f"{path}: {value[:40]!r} is not a PCI id like 0x1d22",
            hint=hint,
            code="corrupt",
            path=str(path),
        )
    return value


# --- cpu --------------------------------------------------------------------------------------


def _detect_cpu(family: str, root: ProbeRoot) -> Accelerators:
    cores = len(os.sched_getaffinity(0))
    numa = _numa_nodes(root)
    total = _mem_total(root)
    limit = _cgroup_limit(root)
    memory = min(total, limit) if limit is not None else total
    facts = {
        "cores": str(cores),
        "numa_nodes": str(numa) if numa else "1 (no NUMA nodes in sysfs)",
        "mem_total": gib(total),
        "count": "1",
    }
    if limit is not None:
        facts["cgroup_memory_limit"] = gib(limit)
    return Accelerators(family, None, 1, memory, facts)


def _numa_nodes(root: ProbeRoot) -> int:
    folder = root.path(NUMA_NODES)
    if not os.path.lexists(folder):
        return 0
    hint = "the sysfs NUMA tree is damaged; repair it or point the probe root at a full copy"
    names = root.listdir(folder, "NUMA node folder", MAX_NUMA_NODES, hint)
    return sum(1 for n in names if _NUMA.match(n))


def _mem_total(root: ProbeRoot) -> int:
    path = root.path(MEMINFO)
    hint = "/proc/meminfo must be the kernel's (a container sees its own /proc)"
    text = root.read(path, "meminfo file", MEMINFO_MAX_BYTES, hint).decode("ascii", "replace")
    return _meminfo_total(text, path, hint)


def _meminfo_total(text: str, path: Path, hint: str) -> int:
    for line in text.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) == 3 and parts[1].isdigit() and parts[2] == "kB" and int(parts[1]) > 0:
                return int(parts[1]) * 1024
            raise SglxError(
                f"{path}: {line.strip()[:80]!r} is not 'MemTotal: <n> kB'",
                hint=hint,
                code="corrupt",
                path=str(path),
            )
    raise SglxError(f"{path}: no MemTotal line", hint=hint, code="corrupt", path=str(path))


def _cgroup_limit(root: ProbeRoot) -> int | None:
    """The container's memory limit in bytes; None when unlimited or no cgroup file is seen."""
    hint = "the cgroup memory file must hold 'max' or a byte count"
    for relative in (CGROUP_V2_MEMORY_MAX, CGROUP_V1_MEMORY_LIMIT):
        path = root.path(relative)
        if not os.path.lexists(path):
            continue
        value = root.read(path, "cgroup memory limit file", SMALL_FILE_MAX_BYTES, hint)
        text = value.decode("ascii", "replace").strip()
        if text == "max":
            return None
        if not text.isdigit():
            raise SglxError(
                f"{path}: {text[:40]!r} is not a memory limit",
                hint=hint,
                code="corrupt",
                path=str(path),
            )
        limit = int(text)
        # cgroup v1 writes "no limit" as the largest page-aligned 64-bit number.
        return None if limit >= 1 << 62 else limit
    return None

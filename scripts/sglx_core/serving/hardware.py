"""What accelerators this host has, read from sysfs, /proc and /dev only: the model, how many,
and the memory each one offers. Serving-profile selection and the capacity check start here.

No vendor tool runs and no vendor stack is imported, so this answers in milliseconds inside
`sglx-serve --dry-run` and on the host alike. Every path is read under a probe root
($SGLX_PROBE_ROOT, default /; the convention of plugin/sglx_platform/probe.py), so tests use
fixture trees in the real kernel formats.

Per family (`profile.platform.family`):
- rocm: the KFD topology, /sys/class/kfd/kfd/topology/nodes/<n>/properties ("key value" lines
  printed by node_show() in the kernel's drivers/gpu/drm/amd/amdkfd/kfd_topology.c) and
  mem_banks/<b>/properties (mem_show(): heap_type, size_in_bytes, flags, width, mem_clk_max).
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

import errno
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.profile.schema import KfdProbe, KunlunProbe
from sglx_core.untrusted import read_bounded

PROBE_ROOT_ENV = "SGLX_PROBE_ROOT"
# The error code when devices are present but none is one this image serves (another arch's
# GPUs, cards whose PCI ids the profile does not know): a finding. `no_device` (none at all)
# is a container started without its devices, which preflight names.
NOT_SERVED = "accelerator_not_served"
KFD_NODES = "sys/class/kfd/kfd/topology/nodes"
PCI_DEVICES = "sys/bus/pci/devices"
NUMA_NODES = "sys/devices/system/node"
MEMINFO = "proc/meminfo"
CGROUP_V2_MEMORY_MAX = "sys/fs/cgroup/memory.max"
CGROUP_V1_MEMORY_LIMIT = "sys/fs/cgroup/memory/memory.limit_in_bytes"

MAX_NODES = 1024
"""KFD nodes walked at most (an 8-GPU host in CPX mode has 65; no host has 1024)."""
MAX_MEM_BANKS = 64
MAX_PCI_DEVICES = 8192
MAX_DEV_ENTRIES = 65536
MAX_NUMA_NODES = 4096
PROPERTIES_MAX_BYTES = 64 << 10
"""sysfs prints at most one page (4 KiB, 64 KiB on some arm64 kernels)."""
MAX_PROPERTY_LINES = 512
SMALL_FILE_MAX_BYTES = 4 << 10
MEMINFO_MAX_BYTES = 64 << 10

HEAP_FB_PUBLIC = 1
HEAP_FB_PRIVATE = 2
_HEAPS = {HEAP_FB_PUBLIC: "FB_PUBLIC", HEAP_FB_PRIVATE: "FB_PRIVATE"}
# A table entry's nominal memory matches a reported size within this band: the kernel keeps
# a little back (an MI300X's 192 GiB shows as 191.98 GiB), and nothing reports more.
_NOMINAL_LOW, _NOMINAL_HIGH = 0.90, 1.02

_KEY = re.compile(r"^[a-z][a-z0-9_]*$")
_NUMBERED = re.compile(r"^[0-9]{1,9}$")
_XPU = re.compile(r"^xpu([0-9]{1,6})$")
_NUMA = re.compile(r"^node[0-9]{1,6}$")
_HEX_ID = re.compile(r"^0x[0-9a-f]{4}$")

_KFD_FIX = (
    "the KFD topology is damaged or is not the kernel's: reload the amdgpu driver (or reboot), "
    "and if this is a fixture tree, write it in the kernel's format"
)


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


def probe_root() -> Path:
    return Path(os.environ.get(PROBE_ROOT_ENV) or "/")


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
        return _detect_rocm(family, spec, _Root(root), table)
    if isinstance(spec, KunlunProbe):
        return _detect_kunlun(family, spec, _Root(root), table)
    return _detect_cpu(family, _Root(root))


def _table(profile: Profile) -> Mapping[str, AcceleratorSpec]:
    return profile.serving.accelerators


def gfx_name(version: int) -> str:
    """KFD's gfx_target_version (e.g. 90402) as a gfx name (gfx942)."""
    major, minor, step = version // 10000, version // 100 % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


def gib(n: int) -> str:
    return f"{n / (1 << 30):.2f} GiB"


# --- files under the probe root ---------------------------------------------------------------


class _Root:
    """The probe root: every path is resolved and must stay inside it."""

    def __init__(self, root: Path) -> None:
        self.shown = root
        self.real = Path(os.path.realpath(root))

    def path(self, relative: str) -> Path:
        return self.shown / relative

    def inside(self, path: Path, what: str) -> Path:
        """`path` with its links resolved, refused when they lead out of the root."""
        real = Path(os.path.realpath(path))
        if real != self.real and self.real not in real.parents:
            raise SglxError(
                f"{path}: the {what} is a link to {real}, outside the probe root {self.shown}",
                hint="a real sysfs keeps its links inside /sys; repair the tree or point "
                f"{PROBE_ROOT_ENV} at a complete copy",
                code="corrupt",
                path=str(path),
            )
        return real

    def read(self, path: Path, what: str, max_bytes: int, hint: str) -> bytes:
        """The file's bytes, bounded. sysfs fails in read(), not open() (the kernel's show()
        runs then), so read errors are caught here too: EPERM/EACCES as code "permission"."""
        real = self.inside(path, what)
        try:
            return read_bounded(real, what=what, max_bytes=max_bytes, hint=hint)
        except OSError as exc:
            denied = exc.errno in (errno.EPERM, errno.EACCES)
            raise SglxError(
                f"{path}: cannot read the {what}: {exc.strerror}",
                hint=hint,
                code="permission" if denied else "environment",
                path=str(path),
            ) from None

    def listdir(self, path: Path, what: str, limit: int, hint: str) -> list[str]:
        """Names in the folder `path` (links resolved inside the root), at most `limit`."""
        real = self.inside(path, what)
        names: list[str] = []
        try:
            with os.scandir(real) as entries:
                for entry in entries:
                    names.append(entry.name)
                    if len(names) > limit:
                        raise SglxError(
                            f"{path}: the {what} holds more than {limit} entries; no real one does",
                            hint=hint,
                            code="corrupt",
                            path=str(path),
                        )
        except OSError as exc:
            raise SglxError(
                f"{path}: cannot list the {what}: {exc.strerror}",
                hint=hint,
                code="environment",
                path=str(path),
            ) from None
        return sorted(names, key=_natural)


def _natural(name: str) -> tuple[int, str]:
    return (int(name), "") if name.isdigit() else (1 << 62, name)


# --- KFD properties (the plugin's preflight reads the same files) -----------------------------


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
    where = _Root(root if root is not None else Path("/"))
    raw = where.read(path, "KFD properties file", PROPERTIES_MAX_BYTES, _KFD_FIX)
    return parse_kfd_properties(raw, path)


def kfd_gpus(root: Path, denied: list[str] | None = None) -> list[KfdGpu]:
    """Every GPU node of the KFD topology under `root` this process may use, in node order (CPU
    nodes skipped); the names of nodes the kernel refused to show are appended to `denied`.

    Raises SglxError(code="no_device") when there is no topology at all."""
    return _kfd_gpus(_Root(root), [] if denied is None else denied)


def _kfd_gpus(root: _Root, denied: list[str]) -> list[KfdGpu]:
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


def _kfd_node(root: _Root, node: Path) -> KfdGpu | None:
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
    return KfdGpu(node.name, version, props["device_id"], memory, heap, units)


def _kfd_memory(root: _Root, node: Path) -> tuple[int, str]:
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


def _detect_rocm(
    family: str, spec: KfdProbe, root: _Root, table: Mapping[str, AcceleratorSpec]
) -> Accelerators:
    denied: list[str] = []
    gpus = _kfd_gpus(root, denied)
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
    return Accelerators(family, model, len(mine), memory, facts)


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
    family: str, spec: KunlunProbe, root: _Root, table: Mapping[str, AcceleratorSpec]
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


def _xpu_nodes(root: _Root) -> list[str]:
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


def _pci_device_ids(root: _Root, vendors: tuple[str, ...]) -> list[str]:
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


def _hex_file(root: _Root, path: Path, hint: str) -> str:
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


def _detect_cpu(family: str, root: _Root) -> Accelerators:
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


def _numa_nodes(root: _Root) -> int:
    folder = root.path(NUMA_NODES)
    if not os.path.lexists(folder):
        return 0
    hint = "the sysfs NUMA tree is damaged; repair it or point the probe root at a full copy"
    names = root.listdir(folder, "NUMA node folder", MAX_NUMA_NODES, hint)
    return sum(1 for n in names if _NUMA.match(n))


def _mem_total(root: _Root) -> int:
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


def _cgroup_limit(root: _Root) -> int | None:
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

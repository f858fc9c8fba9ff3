"""Find the accelerators a profile describes by reading sysfs, /proc and /dev only.

No vendor stack is imported: reading the KFD topology or the Kunlun device nodes is cheap,
side-effect free and safe in every spawned process. All paths are read under a probe root
(SGLX_PROBE_ROOT, default /) so tests can use fixture trees in the real file formats.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from sglx_core.profile import Profile
from sglx_core.profile.schema import KfdProbe, KunlunProbe
from sglx_core.serving.hardware import PCI_DEVICES
from sglx_core.serving.kfd import KFD_NODES
from sglx_core.serving.probe_root import probe_root


@dataclass(frozen=True)
class Device:
    """One accelerator found on the host."""

    name: str  # e.g. 'kfd node 1' or '/dev/xpu0'
    target: str  # gfx942, 0x3686, ...
    detail: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ProbeResult:
    """What the probe found for a profile, and why nothing was found when so."""

    devices: tuple[Device, ...]
    other: tuple[Device, ...] = ()  # accelerators of another arch (the wrong image)
    reason: str = ""

    @property
    def present(self) -> bool:
        return bool(self.devices)


def probe(profile: Profile, root: Path | None = None) -> ProbeResult:
    root = probe_root() if root is None else root
    spec = profile.devices.probe
    if isinstance(spec, KfdProbe):
        return _probe_kfd(spec, root)
    if isinstance(spec, KunlunProbe):
        return _probe_kunlun(spec, root)
    return ProbeResult(devices=(Device("host cpu", os.uname().machine),))


def gfx_name(version: int) -> str:
    """KFD's gfx_target_version (e.g. 90402) as a gfx name (gfx942)."""
    major, minor, step = version // 10000, version // 100 % 100, version % 100
    return f"gfx{major}{minor:x}{step:x}"


def read_properties(path: Path) -> dict[str, str]:
    """A KFD `properties` file: one 'key value' pair per line."""
    props = {}
    for line in path.read_text().splitlines():
        key, _, value = line.strip().partition(" ")
        if key:
            props[key] = value.strip()
    return props


def _probe_kfd(spec: KfdProbe, root: Path) -> ProbeResult:
    nodes = root / KFD_NODES
    if not nodes.is_dir():
        return ProbeResult((), reason=f"no KFD topology at /{KFD_NODES} (amdgpu driver not loaded)")
    mine: list[Device] = []
    other: list[Device] = []
    for props_file in sorted(nodes.glob("*/properties"), key=lambda p: int(p.parent.name)):
        props = read_properties(props_file)
        version = int(props.get("gfx_target_version", "0") or 0)
        if version == 0:
            continue  # a CPU node
        device = Device(
            f"kfd node {props_file.parent.name}",
            gfx_name(version),
            {
                k: props[k]
                for k in ("gfx_target_version", "drm_render_minor", "device_id", "simd_count")
                if k in props
            },
        )
        (mine if version in spec.gfx_target_versions else other).append(device)
    reason = (
        ""
        if mine
        else (
            "KFD lists no GPU"
            if not other
            else f"KFD lists only {', '.join(sorted({d.target for d in other}))} GPUs"
        )
    )
    return ProbeResult(tuple(mine), tuple(other), reason)


def _probe_kunlun(spec: KunlunProbe, root: Path) -> ProbeResult:
    cards = []
    for node in sorted((root / "dev").glob("xpu[0-9]*"), key=lambda p: int(p.name[3:] or 0)):
        if node.name[3:].isdigit() and stat.S_ISCHR(node.stat().st_mode):
            cards.append(Device(f"/dev/{node.name}", "xpu"))
    pci = _pci_ids(root, spec.pci_vendors)
    supported = [d for d in pci if d.target in spec.pci_devices]
    others = tuple(d for d in pci if d.target not in spec.pci_devices)
    if not cards:
        return ProbeResult(
            (), others, reason="no /dev/xpu* device nodes (kunlun driver not loaded?)"
        )
    if pci and not supported:
        ids = ", ".join(sorted({d.target for d in others}))
        return ProbeResult((), others, reason=f"only unsupported Kunlun cards ({ids}) on PCI")
    return ProbeResult(tuple(cards), others)


def _pci_ids(root: Path, vendors: tuple[str, ...]) -> list[Device]:
    found = []
    for dev in sorted((root / PCI_DEVICES).glob("*")):
        try:
            if (dev / "vendor").read_text().strip().lower() not in vendors:
                continue
            device_id = (dev / "device").read_text().strip().lower()
        except OSError:
            continue
        found.append(Device(dev.name, device_id))
    return found

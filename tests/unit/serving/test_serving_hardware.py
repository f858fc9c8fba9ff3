"""detect() identifies the accelerators of fixture hosts written in the kernel's sysfs formats,
and refuses a malformed topology naming the file, never falling back to a default.

The accelerator table is passed through detect()'s `accelerators` seam: the entries below are
the ones the arch profiles ship (serving.accelerators), with the same sources.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from helpers.serving_fixtures import (
    KFD_NODES,
    KUNLUN_GEN2_DEVICE,
    MI300X,
    MI325X,
    XGMI_HIVE,
    cpu_host,
    mi300x_host,
    mi325x_host,
    mi355x_host,
    p800_host,
    strix_halo_host,
    write_kfd_host,
)

from sglx_core import untrusted
from sglx_core.errors import SglxError
from sglx_core.profile import Profile, load_profile
from sglx_core.serving import kfd, probe_root
from sglx_core.serving.hardware import Accelerators, detect
from sglx_core.serving.kfd import parse_kfd_properties, read_kfd_properties

GIB = 1 << 30


@dataclass(frozen=True)
class Entry:
    """Stand-in for the profile's AcceleratorModel."""

    gfx_target_version: int | None
    pci_device_ids: tuple[str, ...]
    memory_gib: float | None


TABLE = {
    "mi300x": Entry(90402, ("0x74a1", "0x74b5"), 192),
    "mi325x": Entry(90402, ("0x74a5",), 256),
    "mi350x": Entry(90500, ("0x75a0", "0x75b0"), 288),
    "mi355x": Entry(90500, ("0x75a3", "0x75b3"), 288),
    "strix-halo": Entry(110501, ("0x1586",), None),
    "p800": Entry(None, ("0x3686", "0x3687", "0x3688", "0x3689"), 96),
}


@cache
def _profile(arch: str) -> Profile:
    return load_profile(arch)


def _detect(arch: str, root: Path, table: dict[str, Entry] | None = None) -> Accelerators:
    return detect(_profile(arch), root, accelerators=TABLE if table is None else table)


@pytest.mark.parametrize(
    ("arch", "make", "model", "count", "memory", "device_id", "units"),
    [
        ("gfx942", mi300x_host, "mi300x", 8, 201310208 * 1024, "0x74a1", "304"),
        ("gfx942", mi325x_host, "mi325x", 4, 268419072 * 1024, "0x74a5", "304"),
        ("gfx950", mi355x_host, "mi355x", 8, 301973504 * 1024, "0x75a3", "256"),
        ("gfx1151", strix_halo_host, "strix-halo", 1, 96 * GIB, "0x1586", "40"),
    ],
)
def test_kfd_hosts(
    tmp_path: Path,
    arch: str,
    make: Callable[[Path], Path],
    model: str,
    count: int,
    memory: int,
    device_id: str,
    units: str,
) -> None:
    found = _detect(arch, make(tmp_path))
    assert (found.family, found.model, found.count, found.memory_bytes) == (
        "rocm",
        model,
        count,
        memory,
    )
    assert found.facts["device_id"] == device_id
    assert found.facts["gfx_target"] == arch
    assert found.facts["count"] == str(count)
    assert found.facts["vram_heap"] == "FB_PUBLIC"
    # simd_count / simd_per_cu: the cu_num AITER keys its tuned rows by
    assert found.facts["compute_units"] == units


@pytest.mark.parametrize(
    ("hives", "link", "shown"),
    [
        (None, "fast", f"hive 0x{XGMI_HIVE:x}"),  # eight GPUs of one hive
        ([0, 0], "slow", "node 2: no hive, node 3: no hive"),  # cards in no hive
        ([7, 7, 9], "slow", "node 2: hive 0x7, node 3: hive 0x7, node 4: hive 0x9"),  # two hives
    ],
)
def test_gpus_outside_one_xgmi_hive_are_said_to_talk_over_pcie(
    tmp_path: Path, hives: list[int] | None, link: str, shown: str
) -> None:
    """Seed S0-25: the KFD node's hive_id tells xGMI from PCIe between the GPUs."""
    gpus = [MI300X] * (8 if hives is None else len(hives))
    found = _detect("gfx942", write_kfd_host(tmp_path, gpus, cpu_nodes=2, hive_ids=hives))
    assert (found.facts["interconnect"], found.facts["link_groups"]) == (link, shown)


def test_one_gpu_has_no_interconnect_to_judge(tmp_path: Path) -> None:
    assert "interconnect" not in _detect("gfx942", mi300x_host(tmp_path, 1)).facts
    assert "interconnect" not in _detect("gfx1151", strix_halo_host(tmp_path / "apu")).facts


def test_preflight_passes_a_hive_and_warns_about_pcie(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglx_runtime.preflight.checks import Check
    from sglx_runtime.preflight.hardware import check_interconnect

    def run(root: Path, arch: str = "gfx942") -> list[Check]:
        monkeypatch.setenv(probe_root.PROBE_ROOT_ENV, str(root))
        checks: list[Check] = []
        check_interconnect(_profile(arch), checks)
        return checks

    (ok,) = run(mi300x_host(tmp_path / "hive"))
    assert (ok.status, ok.detail) == (
        "pass",
        f"xGMI between all 8 devices (hive 0x{XGMI_HIVE:x})",
    )
    (pcie,) = run(write_kfd_host(tmp_path / "pcie", [MI300X] * 2, hive_ids=[0, 0]))
    assert pcie.status == "warn" and "over PCIe, about 40 % slower (seed S0-25)" in pcie.detail
    assert pcie.fix is not None and "--tp-size" in pcie.fix
    assert run(mi300x_host(tmp_path / "one", 1)) == []
    assert run(p800_host(tmp_path / "kunlun"), "kunlun") == []  # XPULink is not read


def test_apu_reports_what_the_kfd_bank_says(tmp_path: Path) -> None:
    """A small carve-out with a raised GTT: the KFD bank shows the GTT limit, and so do we."""
    found = _detect("gfx1151", strix_halo_host(tmp_path, memory_bytes=96 * GIB + 7 * 4096))
    assert found.model == "strix-halo"
    assert found.memory_bytes == 96 * GIB + 7 * 4096


def test_shared_ids_are_told_apart_by_memory(tmp_path: Path) -> None:
    """Two entries with the same gfx target and PCI id: the nominal memory decides."""
    table = {
        "small": Entry(90402, ("0x74a1",), 192),
        "large": Entry(90402, ("0x74a1",), 256),
    }
    assert _detect("gfx942", mi300x_host(tmp_path / "a", 2), table).model == "small"
    big = write_kfd_host(tmp_path / "b", [replace(MI300X, memory_bytes=MI325X.memory_bytes)])
    assert _detect("gfx942", big, table).model == "large"


def test_mixed_models_have_no_single_model_and_the_smallest_memory(tmp_path: Path) -> None:
    found = _detect("gfx942", write_kfd_host(tmp_path, [MI325X, MI300X, MI325X]))
    assert found.model is None
    assert found.count == 3
    assert found.memory_bytes == MI300X.memory_bytes
    assert "node 2: mi300x" in found.facts["mixed"]


def test_unknown_device_id_is_reported_without_a_model(tmp_path: Path) -> None:
    found = _detect("gfx942", mi300x_host(tmp_path, 2), table={})
    assert found.model is None
    assert found.count == 2
    assert found.memory_bytes == MI300X.memory_bytes


def test_other_arch_gpus_are_not_counted(tmp_path: Path) -> None:
    from helpers.serving_fixtures import MI355X

    found = _detect("gfx942", write_kfd_host(tmp_path, [MI300X, MI355X]))
    assert found.count == 1
    assert found.facts["other_gpus"] == "gfx950"


def test_no_gpu_of_this_arch_is_refused(tmp_path: Path) -> None:
    """Another arch's GPUs are a finding (issue 40 item 4), not a container without devices."""
    with pytest.raises(SglxError) as err:
        _detect("gfx942", mi355x_host(tmp_path, 2))
    assert err.value.code == "accelerator_not_served"
    assert "only gfx950 GPUs" in err.value.message


def test_no_topology_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SglxError) as err:
        _detect("gfx942", tmp_path)
    assert err.value.code == "no_device"
    assert "amdgpu driver is not loaded" in err.value.message


# --- malformed topologies: each error names the file -------------------------------------------


def _props(root: Path, node: int) -> Path:
    return root / KFD_NODES / str(node) / "properties"


def _refused(arch: str, root: Path) -> SglxError:
    with pytest.raises(SglxError) as err:
        _detect(arch, root)
    assert err.value.hint
    return err.value


def test_non_integer_value(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path, 2)
    path = _props(root, 3)
    path.write_text(path.read_text().replace("device_id 29857", "device_id 0x74a1"))
    err = _refused("gfx942", root)
    assert str(path) in err.message
    assert "'device_id 0x74a1'" in err.message


def test_gpu_node_without_gfx_target_version(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path, 1)
    path = _props(root, 2)
    path.write_text(
        "".join(
            line + "\n"
            for line in path.read_text().splitlines()
            if not line.startswith("gfx_target_version")
        )
    )
    err = _refused("gfx942", root)
    assert str(path) in err.message
    assert "without a gfx_target_version" in err.message


def test_gpu_node_without_device_id(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path, 1)
    path = _props(root, 2)
    path.write_text(path.read_text().replace("device_id 29857\n", ""))
    assert "without device_id" in _refused("gfx942", root).message


def test_repeated_key(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path, 1)
    path = _props(root, 2)
    path.write_text(path.read_text() + "gfx_target_version 90500\n")
    err = _refused("gfx942", root)
    assert str(path) in err.message and "repeats the key 'gfx_target_version'" in err.message


def test_unreadable_properties(tmp_path: Path) -> None:
    """Root reads any file mode, so a folder stands in for a file that cannot be read."""
    root = mi300x_host(tmp_path, 1)
    path = _props(root, 2)
    path.unlink()
    path.mkdir()
    err = _refused("gfx942", root)
    assert str(path) in err.message and "not a regular file" in err.message


def test_missing_properties(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path, 1)
    _props(root, 2).unlink()
    assert str(_props(root, 2)) in _refused("gfx942", root).message


def test_giant_properties(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path, 1)
    path = _props(root, 2)
    with path.open("r+b") as handle:
        handle.truncate(1 << 30)  # sparse: costs no disk
    err = _refused("gfx942", root)
    assert str(path) in err.message and "larger than" in err.message


def test_bank_without_size(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path, 1)
    bank = root / KFD_NODES / "2/mem_banks/0/properties"
    bank.write_text("heap_type 1\nflags 0\n")
    err = _refused("gfx942", root)
    assert str(bank) in err.message and "size_in_bytes" in err.message


def test_gpu_without_frame_buffer(tmp_path: Path) -> None:
    root = strix_halo_host(tmp_path, memory_bytes=0)
    err = _refused("gfx1151", root)
    assert "no frame-buffer memory" in err.message and "carve-out" in (err.hint or "")


def test_node_folder_not_a_number(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path, 1)
    (root / KFD_NODES / "evil").mkdir()
    assert "named by its number" in _refused("gfx942", root).message


def test_too_many_nodes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk is bounded (MAX_NODES, 1024; lowered here to keep the test cheap)."""
    monkeypatch.setattr(kfd, "MAX_NODES", 8)
    root = mi300x_host(tmp_path, 1)
    for index in range(3, 12):
        (root / KFD_NODES / str(index)).mkdir()
    assert "more than 8 entries" in _refused("gfx942", root).message


def test_gpus_not_granted_to_the_container_are_not_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """node_show() fails read() with EPERM for a GPU outside the container's device cgroup.
    Root cannot be denied a read here, so that one kernel answer is simulated."""
    root = mi300x_host(tmp_path, 8)
    granted = [f"{_props(root, n).parent}/" for n in (0, 1, 2, 3)]  # 2 CPUs, 2 GPUs
    real_read = untrusted.read_bounded

    def read(path: Path, **kwargs: Any) -> bytes:
        if "/nodes/" in str(path) and not any(str(path).startswith(g) for g in granted):
            raise PermissionError(errno.EPERM, "Operation not permitted")
        return real_read(path, **kwargs)

    monkeypatch.setattr(probe_root, "read_bounded", read)
    found = _detect("gfx942", root)
    assert (found.model, found.count) == ("mi300x", 2)
    assert found.facts["kfd_nodes_not_granted"] == "4, 5, 6, 7, 8, 9"


def test_node_link_out_of_root_is_refused(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path / "host", 1)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "properties").write_text(_props(root, 2).read_text())
    node = root / KFD_NODES / "2"
    for child in sorted(node.rglob("*"), reverse=True):
        child.rmdir() if child.is_dir() else child.unlink()
    node.rmdir()
    node.symlink_to(outside)
    err = _refused("gfx942", root)
    assert "outside the probe root" in err.message and str(node) in err.message


def test_properties_link_out_of_root_is_refused(tmp_path: Path) -> None:
    root = mi300x_host(tmp_path / "host", 1)
    path = _props(root, 2)
    path.unlink()
    path.symlink_to("/etc/hostname")
    assert "outside the probe root" in _refused("gfx942", root).message


def test_links_inside_root_are_followed(tmp_path: Path) -> None:
    """Real sysfs: /sys/class/kfd/kfd is a link to ../../devices/virtual/kfd/kfd."""
    root = mi300x_host(tmp_path, 2)
    real = root / "sys/devices/virtual/kfd"
    real.mkdir(parents=True)
    (root / "sys/class/kfd/kfd").rename(real / "kfd")
    (root / "sys/class/kfd/kfd").symlink_to("../../devices/virtual/kfd/kfd")
    assert _detect("gfx942", root).count == 2


def test_parser_accepts_the_kernel_format_and_nothing_else(tmp_path: Path) -> None:
    path = tmp_path / "properties"
    assert parse_kfd_properties(b"heap_type 1\nsize_in_bytes 206141652992\n\n", path) == {
        "heap_type": 1,
        "size_in_bytes": 206141652992,
    }
    for bad in (
        b"heap_type -1\n",
        b"heap_type\n",
        b"heap_type 1 2\n",
        b"Heap 1\n",
        b"heap_type \xff\n",
        b"heap_type \xd9\xa1\n",
    ):
        with pytest.raises(SglxError):
            parse_kfd_properties(bad, path)
    path.write_text("gfx_target_version 90402\n")
    assert read_kfd_properties(path, tmp_path) == {"gfx_target_version": 90402}


# --- Kunlun -----------------------------------------------------------------------------------


def test_p800_host(tmp_path: Path) -> None:
    found = _detect("kunlun", p800_host(tmp_path, 8))
    assert (found.family, found.model, found.count, found.memory_bytes) == (
        "kunlun",
        "p800",
        8,
        96 * GIB,
    )
    assert found.facts["device_id"] == "0x3686"
    assert found.facts["pci_functions"] == "8"


@pytest.mark.parametrize("vendor", ["0x1d22", "0x2057"])
def test_a_p800_of_either_vendor_id_is_identified_by_core_and_plugin(
    tmp_path: Path, vendor: str
) -> None:
    """Issue 40 item 4: P800 cards report Baidu's 0x1d22 or Kunlunxin's 0x2057 (xpu-smi's own
    sample: Device Id 0x36862057); both are this profile's cards, for the serving profile's
    detection and the plugin's device probe alike."""
    from sglx_platform.probe import probe

    root = p800_host(tmp_path, 2, pci_vendor=vendor)
    found = _detect("kunlun", root)
    assert (found.model, found.count) == ("p800", 2)
    result = probe(load_profile("kunlun"), root)
    assert [d.name for d in result.devices] == ["/dev/xpu0", "/dev/xpu1"], result


def test_kunlun_counts_the_cards_this_container_was_given(tmp_path: Path) -> None:
    """sysfs shows every card of the host; /dev only those passed with --device."""
    root = p800_host(tmp_path, 8)
    for index in range(2, 8):
        (root / f"dev/xpu{index}").unlink()
    assert _detect("kunlun", root).count == 2


def test_kunlun_without_cards(tmp_path: Path) -> None:
    with pytest.raises(SglxError) as err:
        _detect("kunlun", tmp_path)
    assert err.value.code == "no_device"


def test_kunlun_gen2_only(tmp_path: Path) -> None:
    with pytest.raises(SglxError) as err:
        _detect("kunlun", p800_host(tmp_path, 2, pci_device=KUNLUN_GEN2_DEVICE))
    assert "only unsupported cards (0x3684)" in err.value.message
    assert err.value.code == "accelerator_not_served"


@pytest.mark.parametrize("vendor", ["0x1d22", "0x2057"])
def test_kunlun_identifies_a_p800_of_either_vendor_id(tmp_path: Path, vendor: str) -> None:
    assert _detect("kunlun", p800_host(tmp_path, 2, pci_vendor=vendor)).count == 2


def test_kunlun_cards_of_an_unknown_vendor_id_are_a_finding(tmp_path: Path) -> None:
    """Issue 40 item 4: cards the profile cannot identify are refused naming what was found,
    never skipped."""
    with pytest.raises(SglxError) as err:
        _detect("kunlun", p800_host(tmp_path, 2, pci_vendor="0x1eb7"))
    assert err.value.code == "accelerator_not_served"
    assert "2 /dev/xpu nodes" in err.value.message and "0x1d22 or 0x2057" in err.value.message
    assert "devices.probe" in (err.value.hint or "")


def test_kunlun_card_missing_from_the_table(tmp_path: Path) -> None:
    with pytest.raises(SglxError) as err:
        _detect("kunlun", p800_host(tmp_path, 2), table={})
    assert err.value.code == "unknown_accelerator"
    assert "serving.accelerators" in (err.value.hint or "")


def test_kunlun_regular_file_for_a_device_node(tmp_path: Path) -> None:
    root = p800_host(tmp_path, 2)
    (root / "dev/xpu1").unlink()
    (root / "dev/xpu1").write_text("")
    with pytest.raises(SglxError) as err:
        _detect("kunlun", root)
    assert "dev/xpu1: is not a character device" in err.value.message


def test_kunlun_malformed_pci_id(tmp_path: Path) -> None:
    root = p800_host(tmp_path, 1)
    device = root / "sys/bus/pci/devices/0000:3b:00.0/device"
    device.write_text("P800\n")
    with pytest.raises(SglxError) as err:
        _detect("kunlun", root)
    assert str(device) in err.value.message


# --- cpu --------------------------------------------------------------------------------------


def test_cpu_host(tmp_path: Path) -> None:
    found = _detect("cpu", cpu_host(tmp_path, numa_nodes=2, mem_total_kib=528279804))
    assert (found.family, found.model, found.count) == ("cpu", None, 1)
    assert found.memory_bytes == 528279804 * 1024
    assert found.facts["cores"] == str(len(os.sched_getaffinity(0)))
    assert found.facts["numa_nodes"] == "2"


def test_cpu_memory_is_capped_by_the_cgroup(tmp_path: Path) -> None:
    found = _detect("cpu", cpu_host(tmp_path, memory_max=str(64 * GIB)))
    assert found.memory_bytes == 64 * GIB
    assert _detect("cpu", cpu_host(tmp_path / "b", memory_max="max")).memory_bytes == (
        528279804 * 1024
    )


def test_cpu_without_numa_sysfs(tmp_path: Path) -> None:
    root = cpu_host(tmp_path, numa_nodes=0)
    found = _detect("cpu", root)
    assert found.facts["numa_nodes"] == "1 (no NUMA nodes in sysfs)"


def test_cpu_malformed_meminfo(tmp_path: Path) -> None:
    root = cpu_host(tmp_path)
    (root / "proc/meminfo").write_text("MemTotal: lots\n")
    with pytest.raises(SglxError) as err:
        _detect("cpu", root)
    assert "proc/meminfo" in err.value.message


def test_cpu_on_this_machine() -> None:
    """The real /proc and /sys of this machine read cleanly."""
    found = detect(_profile("cpu"), Path("/"))
    assert found.memory_bytes > 0 and found.count == 1


@pytest.mark.parametrize(
    ("arch", "make", "model"),
    [
        ("gfx942", mi300x_host, "MI300X"),
        ("gfx942", mi325x_host, "MI325X"),
        ("gfx950", mi355x_host, "MI355X"),
        ("gfx1151", strix_halo_host, "Strix-Halo"),
        ("kunlun", p800_host, "P800"),
    ],
)
def test_shipped_tables_identify_the_fixtures(
    tmp_path: Path, arch: str, make: Callable[[Path], Path], model: str
) -> None:
    """Without the seam, detect() reads the arch profile's serving.accelerators."""
    assert detect(_profile(arch), make(tmp_path)).model == model

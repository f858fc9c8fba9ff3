"""The arch profile's scan rules, through the real CLI, on fixture roots built with gcc
(`fixture_rocm` stands in for a ROCm base; see test_scan_support)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_scan_support import ElfFactory, fixture_rocm, needs_gcc

pytestmark = needs_gcc
CliJson = Callable[..., tuple[int, dict[str, Any]]]


@pytest.fixture
def cc(tmp_path: Path) -> ElfFactory:
    return ElfFactory(tmp_path / "build")


def codes(envelope: dict[str, Any]) -> list[str]:
    return sorted(f["code"] for f in envelope["findings"])


def test_complete_rocm_root_is_clean_for_gfx942(
    cc: ElfFactory, tmp_path: Path, sglx_json: CliJson
) -> None:
    root = fixture_rocm(cc, tmp_path / "root")
    code, envelope = sglx_json("scan", str(root), "--arch", "gfx942")
    assert (code, envelope["findings"]) == (0, [])
    [scan] = envelope["data"]["scans"]
    assert scan["dependencies"]["unresolved"] == 0
    assert scan["dependencies"]["checked"] == 7  # hip 2, rocblas 1, hipblaslt 1, rccl 1, torch 2
    assert scan["search"]["ld_so_conf"] == ["/opt/rocm/lib"]


def test_missing_hip_runtime_breaks_require_dlopen_and_dependencies(
    cc: ElfFactory, tmp_path: Path, sglx_json: CliJson
) -> None:
    root = fixture_rocm(cc, tmp_path / "root", without=("libamdhip64.so.7",))
    code, envelope = sglx_json("scan", str(root), "--arch", "gfx942")
    assert code == 1
    found = {(f["code"], f["message"].split(" (")[0]) for f in envelope["findings"]}
    assert ("required_missing", "no library matching 'libamdhip64.so.7' in the image") in found
    assert ("dlopen_missing", "'libamdhip64.so' is not in the library search path") in found
    missing = envelope["data"]["scans"][0]["unresolved"]
    assert {(m["file"], m["needed"]) for m in missing} >= {
        ("/opt/venv/torch/lib/libtorch_hip.so", "libamdhip64.so.7"),
        ("/opt/rocm-7.2.4/lib/librocblas.so.5.2.70204", "libamdhip64.so.7"),
    }


def test_nccl_in_a_rocm_image_is_forbidden(
    cc: ElfFactory, tmp_path: Path, sglx_json: CliJson
) -> None:
    root = fixture_rocm(cc, tmp_path / "root")
    nccl = cc.lib(root / "opt/venv/nvidia/nccl/lib/libnccl.so.2", libc=False)
    cc.lib(
        root / "opt/venv/torch/lib/libtorch_cuda.so",
        needs=[nccl],
        runpath="$ORIGIN/../../nvidia/nccl/lib",
        libc=False,
    )
    code, envelope = sglx_json("scan", str(root), "--arch", "gfx942")
    assert code == 1
    forbidden = [f for f in envelope["findings"] if f["code"] == "forbidden_soname"]
    assert {f["path"] for f in forbidden} == {
        "/opt/venv/nvidia/nccl/lib/libnccl.so.2",
        "/opt/venv/torch/lib/libtorch_cuda.so",
    }


def test_missing_tensile_files_are_reported_by_glob(
    cc: ElfFactory, tmp_path: Path, sglx_json: CliJson
) -> None:
    root = fixture_rocm(cc, tmp_path / "root")
    shutil.rmtree(root / "opt/rocm-7.2.4/lib/rocblas")
    code, envelope = sglx_json("scan", str(root), "--arch", "gfx942")
    assert (code, codes(envelope)) == (1, ["data_file_missing"])
    assert envelope["findings"][0]["path"] == "/opt/rocm/lib/rocblas/library/*gfx942*"


def test_host_provided_libcuda_is_reported_not_a_finding_on_cpu(
    cc: ElfFactory, tmp_path: Path, sglx_json: CliJson, sglx: Callable[..., tuple[int, str, str]]
) -> None:
    root = tmp_path / "root"
    libcuda = cc.lib(tmp_path / "driver/libcuda.so.1", libc=False)
    torch_cpu = cc.lib(root / "venv/torch/lib/libtorch_cpu.so", libc=False)
    cc.lib(
        root / "venv/triton/backends/libcuda_utils.so",
        needs=[libcuda, torch_cpu],
        runpath="$ORIGIN/../../torch/lib",
        libc=False,
    )
    code, envelope = sglx_json("scan", str(root), "--arch", "cpu")
    assert (code, envelope["findings"]) == (0, [])
    [use] = envelope["data"]["scans"][0]["host_provided"]
    assert (use["soname"], use["needed_by"]) == (
        "libcuda.so.1",
        ["/venv/triton/backends/libcuda_utils.so"],
    )
    code, out, _ = sglx("scan", str(root), "--arch", "cpu", "-q")
    assert code == 0 and "host-provided libraries used" in out
    # Without an arch nothing is known to come from the host.
    code, envelope = sglx_json("scan", str(root))
    assert (code, codes(envelope)) == (1, ["unresolved"])


def test_kunlun_runtime_resolves_through_the_profiles_library_path(
    cc: ElfFactory, tmp_path: Path, sglx_json: CliJson
) -> None:
    root = tmp_path / "root"
    xpurt = cc.lib(root / "usr/local/xre/so/libxpurt.so", libc=False)
    cc.lib(root / "venv/torch_xmlir/libtorch_xmlir.so", needs=[xpurt], libc=False)
    _, envelope = sglx_json("scan", str(root), "--arch", "kunlun")
    assert envelope["data"]["scans"][0]["unresolved"] == []
    assert "unresolved" not in codes(envelope)
    assert "required_missing" in codes(envelope)  # the fixture ships only libxpurt
    _, envelope = sglx_json("scan", str(root))
    assert codes(envelope) == ["unresolved"]

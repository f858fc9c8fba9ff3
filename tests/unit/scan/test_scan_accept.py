"""`scan.optional_files` and `scan.loaded_first`: unresolved dependencies the arch profile
accepts, on fixture trees built with gcc. Each accepted case has a twin that must stay a
finding: a file the glob does not match, a plugin linked by an ordinary library, a name with no
file of it (or only one of another ELF class) in the root, a missing program interpreter."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from test_scan_support import ElfFactory, needs_gcc, scan

from sglx.scan.analysis import ScanReport
from sglx.scan.rules import LOADED_FIRST, OPTIONAL_FILES, Rule, Rules
from sglx_core.profile.schema import Scan

pytestmark = needs_gcc
CliJson = Callable[..., tuple[int, dict[str, Any]]]
SITE = "opt/sglx/venv/lib/python3.11/site-packages"  # the cpu image's venv, as its profile says


@pytest.fixture
def cc(tmp_path: Path) -> ElfFactory:
    return ElfFactory(tmp_path / "build")


def pairs(report: ScanReport) -> set[tuple[str, str]]:
    return {(u.file, u.needed) for u in report.unresolved}


def accepted(report: ScanReport) -> dict[tuple[str, str], tuple[str, str]]:
    return {(a.unresolved.file, a.unresolved.needed): (a.rule, a.pattern) for a in report.accepted}


def test_optional_files_accepts_only_the_plugins_it_names(cc: ElfFactory, tmp_path: Path) -> None:
    root = tmp_path / "root"
    ucx = cc.lib(tmp_path / "not-shipped/libucp.so.0", libc=False)
    lib = root / "nvshmem/lib"
    cc.lib(lib / "nvshmem_transport_ucx.so.3", needs=[ucx], libc=False)
    cc.lib(lib / "libnvshmem_host.so.3", needs=[ucx], libc=False)  # not a plugin
    rules = Rules(optional_files=(Rule("/nvshmem/lib/nvshmem_transport_*", "fabric plugin"),))

    report = scan(root, rules=rules)

    assert accepted(report) == {
        ("/nvshmem/lib/nvshmem_transport_ucx.so.3", "libucp.so.0"): (
            OPTIONAL_FILES,
            "/nvshmem/lib/nvshmem_transport_*",
        )
    }
    assert report.accepted[0].reason == "fabric plugin"
    assert pairs(report) == {("/nvshmem/lib/libnvshmem_host.so.3", "libucp.so.0")}
    assert report.dependencies == 2 and report.resolved == 0
    # Without the rule both are findings.
    assert len(scan(root).unresolved) == 2


def test_optional_files_follows_links_in_the_glob(cc: ElfFactory, tmp_path: Path) -> None:
    """A glob through a linked folder (/opt/plugins -> /opt/plugins-1.2) names the real file."""
    root = tmp_path / "root"
    gone = cc.lib(tmp_path / "not-shipped/libfabric.so.1", libc=False)
    cc.lib(root / "opt/plugins-1.2/transport_ofi.so", needs=[gone], libc=False)
    (root / "opt/plugins").symlink_to("plugins-1.2")
    rules = Rules(optional_files=(Rule("/opt/plugins/transport_*.so", "fabric plugin"),))

    report = scan(root, rules=rules)

    assert list(accepted(report)) == [("/opt/plugins-1.2/transport_ofi.so", "libfabric.so.1")]
    assert report.unresolved == []


def test_a_plugin_linked_by_an_ordinary_library_stays_a_finding(
    cc: ElfFactory, tmp_path: Path
) -> None:
    """Loading libapp.so maps the plugin and fails on its missing dependency: not optional."""
    root = tmp_path / "root"
    gone = cc.lib(tmp_path / "not-shipped/libmpi.so.40", libc=False)
    plugin = cc.lib(root / "plugins/bootstrap_mpi.so.3", needs=[gone], libc=False)
    cc.lib(root / "app/libapp.so", needs=[plugin], runpath="$ORIGIN/../plugins", libc=False)
    rules = Rules(optional_files=(Rule("/plugins/*", "launcher plugin"),))

    report = scan(root, rules=rules)

    assert report.accepted == []
    [missing] = report.unresolved
    assert (missing.file, missing.needed) == ("/plugins/bootstrap_mpi.so.3", "libmpi.so.40")
    assert set(missing.roots) == {"/plugins/bootstrap_mpi.so.3", "/app/libapp.so"}


def test_optional_files_never_accepts_a_missing_interpreter(cc: ElfFactory, tmp_path: Path) -> None:
    root = tmp_path / "root"
    cc.exe(root / "plugins/tool")  # PT_INTERP names /lib64/ld-linux-x86-64.so.2, not in the root
    rules = Rules(optional_files=(Rule("/plugins/*", "optional tool"),))

    report = scan(root, rules=rules)

    assert list(accepted(report)) == [("/plugins/tool", "libc.so.6")]  # an ordinary dependency
    [missing] = report.unresolved
    assert (missing.needed, missing.interpreter) == ("/lib64/ld-linux-x86-64.so.2", True)


def test_loaded_first_needs_a_file_of_that_name_in_the_root(cc: ElfFactory, tmp_path: Path) -> None:
    root = tmp_path / "root"
    c10 = cc.lib(root / "venv/torch/lib/libc10.so", libc=False)
    gone = cc.lib(tmp_path / "not-shipped/libc10_xpu.so", libc=False)
    other = cc.lib(root / "venv/other/lib/libother.so", libc=False)
    # Linked by name, with no RUNPATH to torch/lib: found only because torch is imported first.
    cc.lib(root / "venv/torchvision/_C.so", needs=[c10, gone, other], libc=False)
    rules = Rules(loaded_first=(Rule("libc10*.so", "mapped by import torch"),))

    report = scan(root, rules=rules)

    assert accepted(report) == {
        ("/venv/torchvision/_C.so", "libc10.so"): (LOADED_FIRST, "libc10*.so"),
    }
    [ok] = report.accepted
    assert ok.unresolved.elsewhere == ("/venv/torch/lib/libc10.so",)
    assert ok.reason == "mapped by import torch"
    # The pattern matches but no such file exists; the file exists but no pattern matches.
    assert pairs(report) == {
        ("/venv/torchvision/_C.so", "libc10_xpu.so"),
        ("/venv/torchvision/_C.so", "libother.so"),
    }


def test_loaded_first_ignores_a_file_of_another_elf_class(cc: ElfFactory, tmp_path: Path) -> None:
    """A 32-bit libc10.so can never be what a 64-bit process loaded first."""
    root = tmp_path / "root"
    cc.lib(root / "venv/lib32/libc10.so", m32=True, libc=False)
    needed = cc.lib(tmp_path / "link-against/libc10.so", libc=False)
    cc.lib(root / "venv/torchvision/_C.so", needs=[needed], libc=False)
    rules = Rules(loaded_first=(Rule("libc10*.so", "mapped by import torch"),))

    report = scan(root, rules=rules)

    assert report.accepted == []
    [missing] = report.unresolved
    assert (missing.needed, missing.elsewhere) == ("libc10.so", ())


def test_cpu_profile_accepts_torchvision_and_nvshmem_but_not_a_missing_torch(
    cc: ElfFactory,
    tmp_path: Path,
    sglx_json: CliJson,
    sglx: Callable[..., tuple[int, str, str]],
) -> None:
    """The cpu profile's data, on a tree laid out like the cpu image's venv."""
    root = tmp_path / "root"
    site = root / SITE
    torch_libs = [cc.lib(site / f"torch/lib/{n}", libc=False) for n in ("libc10.so", "libtorch.so")]
    cc.lib(site / "torchvision/_C_stable.so", needs=torch_libs, libc=False)
    cc.lib(site / "torch/lib/libtorch_cpu.so", libc=False)  # scan.require
    ucx = cc.lib(tmp_path / "not-shipped/libucp.so.0", libc=False)
    cc.lib(site / "nvidia/nvshmem/lib/nvshmem_transport_ucx.so.3", needs=[ucx], libc=False)

    code, envelope = sglx_json("scan", str(root), "--arch", "cpu")

    assert (code, envelope["findings"]) == (0, [])
    [report] = envelope["data"]["scans"]
    assert report["dependencies"] == {
        "checked": 3,
        "resolved": 0,
        "unresolved": 0,
        "accepted": 3,
        "host_provided": 0,
    }
    assert envelope["data"]["summary"]["accepted"] == 3
    by_need = {item["needed"]: item for item in report["accepted"]}
    assert {need: (item["rule"], item["pattern"]) for need, item in by_need.items()} == {
        "libc10.so": ("loaded_first", "libc10*.so"),
        "libtorch.so": ("loaded_first", "libtorch*.so"),
        "libucp.so.0": (
            "optional_files",
            "/opt/sglx/venv/lib/python3.11/site-packages/nvidia/nvshmem/lib/nvshmem_transport_*",
        ),
    }
    assert all(item["reason"] for item in report["accepted"])
    code, out, _ = sglx("scan", str(root), "--arch", "cpu", "-q")
    assert code == 0 and "accepted by the arch profile" in out

    # Without torch in the tree nothing loads libc10.so first: a finding again, with a hint.
    (site / "torch/lib/libc10.so").unlink()
    code, envelope = sglx_json("scan", str(root), "--arch", "cpu")
    assert code == 1
    [finding] = envelope["findings"]
    assert finding["code"] == "unresolved"
    assert finding["message"].startswith("needs libc10.so, which is not found")
    assert finding["path"] == f"/{SITE}/torchvision/_C_stable.so"


@pytest.mark.parametrize(
    ("scan_rules", "complaint"),
    [
        ({"optional_files": {"nvidia/*": "relative"}}, "String should match pattern"),
        (
            {"loaded_first": {"libnccl.so.*": "a"}, "forbidden": {"libnccl.so.*": "b"}},
            "listed in both 'loaded_first' and 'forbidden'",
        ),
        (
            {"loaded_first": {"libcuda.so.1": "a"}, "host_provided": {"libcuda.so.1": "b"}},
            "listed in both 'loaded_first' and 'host_provided'",
        ),
    ],
)
def test_schema_refuses_relative_globs_and_contradictions(
    scan_rules: dict[str, Any], complaint: str
) -> None:
    with pytest.raises(ValidationError, match=complaint):
        Scan.model_validate(scan_rules)

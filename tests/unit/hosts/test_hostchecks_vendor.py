"""The host checks' vendor-tool wiring (hostchecks/vendor.py, the `vendor_*` checks of
test_preflight.py) on this machine as the host (testinfra's local backend). Fake `amd-smi`,
`rvs`, `all_reduce_perf` and `xpu-smi` print the pinned samples of tests/data/vendor (their
SOURCES.md names where each comes from), so the checks find, run, parse and judge them as they
would on a host: a tool that is absent is skipped as not run, never passed; output that does
not parse fails naming the field. Built and tested on fixtures, not run on hardware."""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import testinfra
from pydantic import ValidationError

from sglx_core.profile.schema import GateVendor

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "hostchecks"))

import test_preflight as checks  # the host checks' module: never collected from here
from facts import HostFacts, host_facts

DATA = Path(__file__).resolve().parents[2] / "data" / "vendor"
Check = Callable[[Any, HostFacts, Any], None]
VENDOR_CHECKS: list[Check] = [
    checks.test_vendor_amd_smi_idle,
    checks.test_vendor_amd_smi_ecc,
    checks.test_vendor_amd_smi_partitions,
    checks.test_vendor_rvs,
    checks.test_vendor_rccl_all_reduce,
    checks.test_vendor_xpu_smi_idle,
    checks.test_vendor_xpu_smi_ecc,
]


def tool(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(exist_ok=True)
    (folder / name).write_text("#!/bin/sh\n" + body)
    (folder / name).chmod(0o755)
    return folder / name


def printing(folder: Path, name: str, sample: Path, rc: int = 0) -> Path:
    """A fake tool that prints `sample` whatever its arguments, and exits `rc`."""
    return tool(folder, name, f"cat '{sample}'\nexit {rc}\n")


def kernel_devices(root: Path, *, gpus: int = 8, xpus: int = 1) -> None:
    """The devices the host's kernel shows under probe root `root` (the checks' count,
    hostchecks/vendor.DEVICE_COUNTS): a KFD topology of one CPU node and `gpus` GPU nodes (as
    the amd-smi samples list), and `xpus` /dev/xpuN nodes (as the xpu-smi sample lists)."""
    nodes = root / "sys/class/kfd/kfd/topology/nodes"
    shutil.rmtree(root, ignore_errors=True)
    for number in range(gpus + 1):
        (nodes / str(number)).mkdir(parents=True)
        simd = 0 if number == 0 else 1216  # node 0 is the CPU's
        (nodes / str(number) / "properties").write_text(f"cpu_cores_count 0\nsimd_count {simd}\n")
    (root / "dev").mkdir()
    for name in [f"xpu{n}" for n in range(xpus)] + ["xpuctrl"]:
        (root / "dev" / name).write_text("")


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder first on PATH, with a `docker` that knows no container (no server runs), and
    nothing else of this machine's but the basic commands; the kernel shows the samples'
    devices (kernel_devices, under $SGLX_PROBE_ROOT)."""
    folder = tmp_path / "bin"
    tool(folder, "docker", "exit 1\n")
    monkeypatch.setenv("PATH", f"{folder}:/usr/bin:/bin")
    kernel_devices(tmp_path / "probe")
    monkeypatch.setenv("SGLX_PROBE_ROOT", str(tmp_path / "probe"))
    return folder


def facts_of(arch: str, *, site: dict[str, Any] | None = None, **vendor: Any) -> HostFacts:
    """The host's facts for `arch`, with gate.vendor keys replaced by `vendor`."""
    found = host_facts("node", {"sglx_arch": arch, **(site or {})}, None)
    profile = found.profile
    gate = profile.gate.model_copy(update={"vendor": profile.gate.vendor.model_copy(update=vendor)})
    return HostFacts(found.name, found.arch, found.vars, profile.model_copy(update={"gate": gate}))


def run_check(check: Check, facts: HostFacts) -> str:
    """Run a check that passes; its detail (what `sglx hosts check` shows)."""
    said: dict[str, str] = {}
    check(testinfra.get_host("local://"), facts, lambda key, value: said.__setitem__(key, value))
    return said["detail"]


def failure(check: Check, facts: HostFacts) -> str:
    with pytest.raises(pytest.fail.Exception) as failed:
        run_check(check, facts)
    return str(failed.value)


def skip(check: Check, facts: HostFacts) -> str:
    with pytest.raises(pytest.skip.Exception) as skipped:
        run_check(check, facts)
    return str(skipped.value)


def metric(edit: Callable[[list[dict[str, Any]]], None] | None = None) -> str:
    document = json.loads((DATA / "amd_smi" / "constructed_metric_gpu_data.json").read_text())
    if edit is not None:
        edit(document["gpu_data"])
    return json.dumps(document)


def amd_smi(folder: Path, metric_json: str, partition: Path | None = None, rc: int = 0) -> Path:
    """A fake amd-smi: `metric ...` prints `metric_json`, `static --partition` `partition`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder.parent / "metric.json").write_text(metric_json)
    partition = partition or DATA / "amd_smi" / "constructed_static_partition.json"
    return tool(
        folder,
        "amd-smi",
        f'case "$1" in metric) cat "{folder.parent / "metric.json"}";; '
        f'static) cat "{partition}";; esac\nexit {rc}\n',
    )


# -- which checks apply ---------------------------------------------------------------------


@pytest.mark.parametrize("check", VENDOR_CHECKS, ids=lambda c: c.__name__)
def test_the_cpu_profile_names_no_vendor_tools_so_every_vendor_check_skips(
    bin_dir: Path, check: Check
) -> None:
    assert "the cpu profile names no vendor tools" in skip(check, facts_of("cpu"))


def test_a_check_of_a_tool_the_profile_does_not_name_skips(bin_dir: Path) -> None:
    said = skip(checks.test_vendor_xpu_smi_ecc, facts_of("gfx942"))
    assert "the gfx942 profile does not name xpu-smi" in said
    said = skip(checks.test_vendor_amd_smi_idle, facts_of("kunlun"))
    assert "the kunlun profile does not name amd-smi" in said


@pytest.mark.parametrize(
    ("check", "named"),
    [
        (checks.test_vendor_amd_smi_idle, "amd-smi"),
        (checks.test_vendor_amd_smi_ecc, "amd-smi"),
        (checks.test_vendor_amd_smi_partitions, "amd-smi"),
        (checks.test_vendor_rvs, "rvs"),
        (checks.test_vendor_rccl_all_reduce, "rccl-tests"),
    ],
    ids=lambda v: getattr(v, "__name__", v),
)
def test_an_absent_tool_is_skipped_as_not_run_never_passed(
    bin_dir: Path, check: Check, named: str
) -> None:
    said = skip(check, facts_of("gfx942"))
    assert f"{named} is not installed on this host: not run" in said
    assert "/opt/rocm/bin" in said  # where it was looked for besides PATH


def test_an_absent_xpu_smi_is_skipped_as_not_run(bin_dir: Path, tmp_path: Path) -> None:
    facts = facts_of("kunlun", site={"accel_host_xpu_smi": str(tmp_path / "none" / "xpu-smi")})
    said = skip(checks.test_vendor_xpu_smi_ecc, facts)
    assert "xpu-smi is not installed on this host: not run" in said
    assert "accel_host_xpu_smi" in said


def test_the_tool_is_found_in_the_profiles_search_path(bin_dir: Path, tmp_path: Path) -> None:
    rocm = tmp_path / "rocm" / "bin"
    amd_smi(rocm, metric())
    facts = facts_of("gfx942", search_path=(str(rocm),))
    assert "8 GPUs idle" in run_check(checks.test_vendor_amd_smi_idle, facts)


# -- amd-smi ----------------------------------------------------------------------------------


def test_amd_smi_idle_ecc_and_partitions_pass_on_the_samples(bin_dir: Path) -> None:
    amd_smi(bin_dir, metric())
    facts = facts_of("gfx942")
    idle = run_check(checks.test_vendor_amd_smi_idle, facts)
    assert "8 GPUs idle: GFX activity at most 0 %" in idle and "under 85 °C" in idle
    assert "8 GPUs listed, as the kernel shows" in idle
    assert "0 uncorrectable ECC errors" in run_check(checks.test_vendor_amd_smi_ecc, facts)
    assert "GPUs in SPX/NPS1" in run_check(checks.test_vendor_amd_smi_partitions, facts)


def test_a_hot_gpu_fails_the_idle_check_naming_it(bin_dir: Path) -> None:
    def hot(gpus: list[dict[str, Any]]) -> None:
        gpus[3]["temperature"]["hotspot"] = {"value": 91, "unit": "C"}

    amd_smi(bin_dir, metric(hot))
    said = failure(checks.test_vendor_amd_smi_idle, facts_of("gfx942"))
    assert "gpu 3: hotspot temperature 91 °C is not under 85 °C" in said
    assert "Fix: stop what runs on the GPUs" in said


def test_a_busy_gpu_fails_the_idle_check(bin_dir: Path) -> None:
    def busy(gpus: list[dict[str, Any]]) -> None:
        gpus[0]["usage"]["gfx_activity"] = {"value": 37, "unit": "%"}

    amd_smi(bin_dir, metric(busy))
    said = failure(checks.test_vendor_amd_smi_idle, facts_of("gfx942"))
    assert "gpu 0: GFX activity 37 %" in said


def test_an_uncorrectable_ecc_error_fails(bin_dir: Path) -> None:
    def broken(gpus: list[dict[str, Any]]) -> None:
        gpus[5]["ecc"]["total_uncorrectable_count"] = 2

    amd_smi(bin_dir, metric(broken))
    said = failure(checks.test_vendor_amd_smi_ecc, facts_of("gfx942"))
    assert "gpu 5: 2 uncorrectable ECC errors" in said


def test_output_that_does_not_parse_fails_naming_the_field(bin_dir: Path) -> None:
    def cut(gpus: list[dict[str, Any]]) -> None:
        del gpus[2]["usage"]

    amd_smi(bin_dir, metric(cut))
    said = failure(checks.test_vendor_amd_smi_idle, facts_of("gfx942"))
    assert "`amd-smi metric -u -t --json` output cannot be read" in said
    assert "gpu 2: usage is missing" in said


def test_a_traceback_instead_of_json_fails_with_the_exit_status(bin_dir: Path) -> None:
    tool(bin_dir, "amd-smi", "echo 'Traceback (most recent call last):'\necho boom >&2\nexit 1\n")
    said = failure(checks.test_vendor_amd_smi_ecc, facts_of("gfx942"))
    assert "output cannot be read" in said and "(exit 1: boom)" in said


def test_a_tool_that_exits_non_zero_fails_even_with_passing_output(bin_dir: Path) -> None:
    amd_smi(bin_dir, metric(), rc=3)
    said = failure(checks.test_vendor_amd_smi_ecc, facts_of("gfx942"))
    assert "`amd-smi metric -e --json` exited 3" in said


def test_output_past_the_parsers_limit_is_refused(bin_dir: Path) -> None:
    tool(bin_dir, "amd-smi", "head -c 5000000 /dev/zero | tr '\\0' ' '\n")
    said = failure(checks.test_vendor_amd_smi_ecc, facts_of("gfx942"))
    assert "more than the 4 MiB" in said


def test_a_tool_that_hangs_is_stopped_at_the_timeout(bin_dir: Path) -> None:
    tool(bin_dir, "amd-smi", "sleep 30\n")
    said = failure(checks.test_vendor_amd_smi_ecc, facts_of("gfx942", timeout_s=1))
    assert "`amd-smi metric -e --json` did not finish within 1 s" in said


def test_a_gpu_in_another_partition_mode_fails_with_the_command_that_sets_it(
    bin_dir: Path, tmp_path: Path
) -> None:
    parts = json.loads((DATA / "amd_smi" / "constructed_static_partition.json").read_text())
    parts[1]["partition"]["accelerator_partition"] = "CPX"
    (tmp_path / "cpx.json").write_text(json.dumps(parts))
    amd_smi(bin_dir, metric(), partition=tmp_path / "cpx.json")
    said = failure(checks.test_vendor_amd_smi_partitions, facts_of("gfx942"))
    assert "gpu 1: accelerator partition CPX, expected SPX" in said


def test_the_idle_check_is_not_run_while_the_server_holds_the_devices(bin_dir: Path) -> None:
    amd_smi(bin_dir, metric())
    inspect = json.dumps([{"Image": "sha256:" + "ab" * 32, "State": {"Running": True}}])
    tool(bin_dir, "docker", f"cat <<'EOF'\n{inspect}\nEOF\n")
    said = skip(checks.test_vendor_amd_smi_idle, facts_of("gfx942"))
    assert "not run: the server (sglx-server) holds the devices" in said
    # ECC is read while serving too.
    assert "0 uncorrectable" in run_check(checks.test_vendor_amd_smi_ecc, facts_of("gfx942"))


# -- rvs, all_reduce_perf ------------------------------------------------------------------------


def rvs_confs(tmp_path: Path, arch: str, upto: int | None = None) -> Path:
    """The conf files of the profile's RVS selection (the first `upto`) under tmp_path."""
    confs = tmp_path / "conf"
    for test in _rvs(arch).tests[:upto]:
        (confs / test.conf).parent.mkdir(parents=True, exist_ok=True)
        (confs / test.conf).write_text("# fixture\n")
    return confs


def test_rvs_runs_the_profiles_selection_and_passes_on_amds_samples(
    bin_dir: Path, tmp_path: Path
) -> None:
    """gfx950's selection on the RVS user guide's MI355X runs (each ends with RVS's summary
    table; AMD's MI300X acceptance samples are abridged before their verdict lines)."""
    confs = rvs_confs(tmp_path, "gfx950")
    body = "".join(
        f'*/{t.conf}) cat "{DATA / "rvs" / f"{t.module}_mi355x_user_guide.txt"}";; '
        for t in _rvs("gfx950").tests
    )
    tool(bin_dir, "rvs", f'case "$2" in {body}esac\n')
    facts = facts_of("gfx950", rvs=_rvs("gfx950", conf_dir=str(confs)))
    detail = run_check(checks.test_vendor_rvs, facts)
    assert detail.count("judged RVS actions passed") == 4


def _rvs(arch: str, **update: Any) -> Any:
    return host_facts("node", {"sglx_arch": arch}, None).profile.gate.vendor.rvs.model_copy(
        update=update
    )


def test_rvs_fails_when_a_conf_file_is_missing(bin_dir: Path, tmp_path: Path) -> None:
    tool(bin_dir, "rvs", "exit 0\n")
    confs = rvs_confs(tmp_path, "gfx942", upto=1)
    rvs = _rvs("gfx942", conf_dir=str(confs))
    said = failure(checks.test_vendor_rvs, facts_of("gfx942", rvs=rvs))
    assert f"without the conf files {confs}/MI300X/iet_single.conf," in said


def test_rvs_met_false_fails(bin_dir: Path, tmp_path: Path) -> None:
    failed = tmp_path / "gst_failed.txt"
    text = (DATA / "rvs" / "gst_mi300x_acceptance_doc.txt").read_text()
    failed.write_text(text.replace("met: TRUE", "met: FALSE", 1))
    confs = rvs_confs(tmp_path, "gfx942", upto=1)
    printing(bin_dir, "rvs", failed)
    rvs = _rvs("gfx942", conf_dir=str(confs), tests=_rvs("gfx942").tests[:1])
    said = failure(checks.test_vendor_rvs, facts_of("gfx942", rvs=rvs))
    assert "met" in said.lower() and "Fix: run the failing conf by hand" in said


@pytest.mark.parametrize(
    ("arch", "sample"),
    [
        ("gfx942", "all_reduce_mi300x_8rank_mpi.txt"),
        ("gfx950", "all_reduce_mi350x_acceptance_doc.txt"),
    ],
)
def test_all_reduce_perf_passes_amds_floor_on_the_samples(
    bin_dir: Path, arch: str, sample: str
) -> None:
    printing(bin_dir, "all_reduce_perf", DATA / "rccl_tests" / sample)
    detail = run_check(checks.test_vendor_rccl_all_reduce, facts_of(arch))
    floor = {"gfx942": "304", "gfx950": "350"}[arch]
    assert f"(floor {floor})" in detail and "no wrong results" in detail


def test_all_reduce_perf_below_the_floor_fails(bin_dir: Path) -> None:
    # The 8 x MI300X sample read against the MI350X/MI355X floor of 350 GB/s.
    printing(bin_dir, "all_reduce_perf", DATA / "rccl_tests" / "all_reduce_mi300x_8rank_mpi.txt")
    said = failure(checks.test_vendor_rccl_all_reduce, facts_of("gfx950"))
    assert "under the 350 GB/s floor" in said


@pytest.mark.parametrize(
    "check",
    [
        checks.test_vendor_amd_smi_idle,
        checks.test_vendor_amd_smi_ecc,
        checks.test_vendor_amd_smi_partitions,
    ],
    ids=lambda c: c.__name__,
)
def test_a_gpu_amd_smi_does_not_list_fails_every_amd_smi_check(
    bin_dir: Path, tmp_path: Path, check: Check
) -> None:
    """Issue 37 item 5: the kernel shows 9 GPUs, amd-smi lists 8 (all idle, no ECC error, in
    the right modes): the ninth was judged by nothing, so each check fails naming both counts."""
    amd_smi(bin_dir, metric())
    kernel_devices(tmp_path / "probe", gpus=9)
    said = failure(check, facts_of("gfx942"))
    assert "amd-smi lists 8 GPUs, but the host's kernel shows 9 (GPU nodes of " in said, said
    assert "a device the tool does not list is not checked" in said


# -- xpu-smi ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "check", [checks.test_vendor_xpu_smi_idle, checks.test_vendor_xpu_smi_ecc],
    ids=lambda c: c.__name__,
)  # fmt: skip
def test_an_xpu_xpu_smi_does_not_list_fails_its_checks(
    bin_dir: Path, tmp_path: Path, check: Check
) -> None:
    xpu = printing(bin_dir, "xpu-smi", DATA / "xpu_smi" / "query_p800_pcie_zstack.txt")
    kernel_devices(tmp_path / "probe", xpus=2)  # the sample is one card's block
    said = failure(check, facts_of("kunlun", site={"accel_host_xpu_smi": str(xpu)}))
    assert "xpu-smi lists 1 XPU, but the host's kernel shows 2 (/dev/xpuN nodes)" in said, said


def test_xpu_smi_idle_and_ecc_pass_on_the_p800_sample(bin_dir: Path) -> None:
    xpu = printing(bin_dir, "xpu-smi", DATA / "xpu_smi" / "query_p800_pcie_zstack.txt")
    facts = facts_of("kunlun", site={"accel_host_xpu_smi": str(xpu)})
    idle = run_check(checks.test_vendor_xpu_smi_idle, facts)
    assert "utilization at most 0 %" in idle
    assert "temperature not judged (the profile sets no limit)" in idle
    assert "0 uncorrectable ECC errors" in run_check(checks.test_vendor_xpu_smi_ecc, facts)


def test_xpu_smi_uncorrectable_errors_fail(bin_dir: Path, tmp_path: Path) -> None:
    text = (DATA / "xpu_smi" / "query_p800_pcie_zstack.txt").read_text()
    broken = tmp_path / "broken.txt"
    broken.write_text(
        text.replace("DRAM Uncorrectable            : 0", "DRAM Uncorrectable            : 4", 1)
    )
    xpu = printing(bin_dir, "xpu-smi", broken)
    facts = facts_of("kunlun", site={"accel_host_xpu_smi": str(xpu)})
    said = failure(checks.test_vendor_xpu_smi_ecc, facts)
    assert "4 uncorrectable ECC errors" in said


# -- the profile keys -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vendor", "words"),
    [
        ({"tools": ["rvs"]}, "tools lists rvs but rvs.tests is empty"),
        ({"rccl_tests": {"min_busbw_gbps": 304.0}}, "min_busbw_gbps is set without a source"),
        ({"idle": {"max_temperature_c": 85.0}}, "max_temperature_c is set without a source"),
        ({"partitions": {"compute": "SPX", "source": "x"}}, "set both compute and memory"),
        ({"tools": ["nvidia-smi"]}, "tools"),
        ({"rccl_tests": {"args": ["-g", "8; reboot"]}}, "args"),
    ],
)
def test_gate_vendor_refuses_what_the_checks_could_not_use(
    vendor: dict[str, Any], words: str
) -> None:
    with pytest.raises(ValidationError, match=words):
        GateVendor.model_validate(vendor)


def test_each_arch_names_the_tools_of_its_vendor() -> None:
    tools = {
        arch: host_facts("n", {"sglx_arch": arch}, None).profile.gate.vendor.tools
        for arch in ("cpu", "gfx942", "gfx950", "gfx1151", "kunlun")
    }
    assert tools == {
        "cpu": (),
        "gfx942": ("amd-smi", "rvs", "rccl-tests"),
        "gfx950": ("amd-smi", "rvs", "rccl-tests"),
        "gfx1151": (),
        "kunlun": ("xpu-smi",),
    }

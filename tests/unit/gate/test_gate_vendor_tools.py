"""The serving gate's vendor-tool parsers on the real output formats pinned in
tests/data/vendor (each folder's SOURCES.md says where every sample came from).

Every pinned sample parses; every check passes on a healthy sample and fails on the same sample
edited to show the fault (a hot or busy GPU, an uncorrectable ECC error, a wrong partition, a
low bus bandwidth, a wrong element, an RVS `met: FALSE`); truncated, oversized, binary and
malformed input is refused with an error naming the tool and the field; and an absent tool is
reported as not run, never as passed.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglx_core.errors import SglxError
from sglx_core.gate.tools import amd_smi, rccl_tests, rvs, xpu_smi
from sglx_core.gate.tools._input import MAX_OUTPUT_BYTES
from sglx_core.gate.tools.amd_smi_partition import (
    GpuPartition,
    check_partitions,
    parse_partition_json,
    parse_partition_text,
)
from sglx_core.gate.tools.result import ToolResult, absent, is_absent, not_run, verdict

DATA = Path(__file__).resolve().parents[2] / "data" / "vendor"


def sample(tool: str, name: str) -> str:
    return (DATA / tool / name).read_text(encoding="utf-8")


def refused(parse: Callable[[str], Any], text: str | bytes, *words: str) -> SglxError:
    """`parse(text)` raises SglxError whose message holds every word (and a hint)."""
    with pytest.raises(SglxError) as caught:
        parse(text)  # type: ignore[arg-type]
    for word in words:
        assert word in caught.value.message, caught.value.message
    assert caught.value.hint is not None
    return caught.value


# -- every pinned sample has a SOURCES.md and parses -------------------------------------------


def test_every_sample_folder_names_its_sources() -> None:
    for folder in ("amd_smi", "rvs", "rccl_tests", "xpu_smi"):
        sources = (DATA / folder / "SOURCES.md").read_text(encoding="utf-8")
        for pinned in sorted((DATA / folder).iterdir()):
            if pinned.name != "SOURCES.md":
                assert f"`{pinned.name}`" in sources, f"{folder}/{pinned.name} has no source line"


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "amd_smi").glob("*.json")))
def test_amd_smi_json_samples_parse(name: str) -> None:
    text = sample("amd_smi", name)
    if "metric" in name:
        readings = amd_smi.parse_metric_json(text)
        assert readings and all(r.gfx_activity == 0 for r in readings)
        # MI300-class GPUs have no edge sensor: N/A is skipped, not read as 0.
        assert all("edge" not in r.temperatures and "hotspot" in r.temperatures for r in readings)
    else:
        parts = parse_partition_json(text)
        assert {(p.compute, p.memory) for p in parts} == {("SPX", "NPS1")}


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "rvs").glob("*.txt")))
def test_rvs_samples_parse(name: str) -> None:
    report = rvs.parse_rvs(sample("rvs", name))
    module = name.split("_")[0]
    assert report.by_module(module), [a.module for a in report.actions]


@pytest.mark.parametrize("name", sorted(p.name for p in (DATA / "rccl_tests").glob("*.txt")))
def test_all_reduce_samples_parse_and_pass_amds_304_floor(name: str) -> None:
    report = rccl_tests.parse_all_reduce(sample("rccl_tests", name))
    result = rccl_tests.check_all_reduce(report, min_busbw_gbps=304, min_size_bytes=8 << 30)
    assert result.passed, result.findings
    assert result.numbers["wrong_total"] == 0


# -- amd-smi -----------------------------------------------------------------------------------


def test_amd_smi_metric_idle_and_ecc_pass() -> None:
    readings = amd_smi.parse_metric_json(sample("amd_smi", "constructed_metric_gpu_data.json"))
    assert [r.gpu for r in readings] == list(range(8))
    assert readings[3].temperatures == {"hotspot": 43.0, "mem": 40.0}
    idle = amd_smi.check_idle(readings, max_temp_c=85)
    assert idle.ran and idle.passed, idle.findings
    assert idle.numbers["max_temperature_c"] == 47.0
    ecc = amd_smi.check_ecc(readings)
    assert ecc.passed and ecc.numbers["uncorrectable_total"] == 0


def _metric(edit: Callable[[list[dict[str, Any]]], None]) -> str:
    document = json.loads(sample("amd_smi", "constructed_metric_gpu_data.json"))
    edit(document["gpu_data"])
    return json.dumps(document)


def test_amd_smi_hot_gpu_fails_idle() -> None:
    def hot(gpus: list[dict[str, Any]]) -> None:
        gpus[5]["temperature"]["hotspot"]["value"] = 91

    result = amd_smi.check_idle(amd_smi.parse_metric_json(_metric(hot)), max_temp_c=85)
    assert result.ran and result.passed is False
    assert result.findings == ["gpu 5: hotspot temperature 91 °C is not under 85 °C"]


def test_amd_smi_limit_is_strict() -> None:
    readings = amd_smi.parse_metric_json(sample("amd_smi", "constructed_metric_gpu_data.json"))
    assert not amd_smi.check_idle(readings, max_temp_c=47).passed
    assert amd_smi.check_idle(readings, max_temp_c=47.5).passed


def test_amd_smi_busy_gpu_fails_idle_from_amds_own_monitor_sample() -> None:
    readings = amd_smi.parse_monitor(sample("amd_smi", "monitor_putm_mi300x_blog.txt"))
    assert len(readings) == 8 and readings[0].gfx_activity == 83
    result = amd_smi.check_idle(readings, max_temp_c=85)
    assert result.passed is False
    assert [f.split(":")[0] for f in result.findings] == ["gpu 0", "gpu 1", "gpu 3"]
    assert amd_smi.check_idle(readings, max_temp_c=85, max_gfx_activity=90).passed


def test_amd_smi_monitor_acceptance_and_partitioned_samples() -> None:
    idle = amd_smi.parse_monitor(sample("amd_smi", "monitor_putm_acceptance_doc.txt"))
    assert idle[0].gfx_activity == 0 and idle[0].temperatures == {"GPU_T": 55.0, "MEM_T": 43.0}
    assert amd_smi.check_idle(idle, max_temp_c=85).passed
    cpx = amd_smi.parse_monitor(sample("amd_smi", "monitor_cpx_nps4_mi300x_cli_doc.txt"))
    result = amd_smi.check_idle(cpx, max_temp_c=85)
    # Only each physical GPU's primary XCP reports sensors; the six others are counted.
    assert result.passed and result.numbers["gpus"] == 2
    assert result.numbers["rows_without_sensors"] == 6


def test_amd_smi_na_utilization_fails_idle() -> None:
    def na(gpus: list[dict[str, Any]]) -> None:
        gpus[2]["usage"]["gfx_activity"] = "N/A"

    result = amd_smi.check_idle(amd_smi.parse_metric_json(_metric(na)), max_temp_c=85)
    assert result.findings == ["gpu 2: GFX activity is N/A; idle cannot be confirmed"]


def test_amd_smi_uncorrectable_ecc_fails_and_correctable_is_reported() -> None:
    def errors(gpus: list[dict[str, Any]]) -> None:
        gpus[1]["ecc"]["total_correctable_count"] = 12
        gpus[6]["ecc"]["total_uncorrectable_count"] = 2

    result = amd_smi.check_ecc(amd_smi.parse_metric_json(_metric(errors)))
    assert result.passed is False and len(result.findings) == 1
    assert result.findings[0].startswith("gpu 6: 2 uncorrectable ECC errors")
    assert result.numbers["correctable_total"] == 12

    def correctable_only(gpus: list[dict[str, Any]]) -> None:
        gpus[1]["ecc"]["total_correctable_count"] = 12

    ok = amd_smi.check_ecc(amd_smi.parse_metric_json(_metric(correctable_only)))
    assert ok.passed and "gpu 1: 12" in ok.reason


def test_amd_smi_na_ecc_fails_closed() -> None:
    def na(gpus: list[dict[str, Any]]) -> None:
        gpus[0]["ecc"] = "N/A"

    result = amd_smi.check_ecc(amd_smi.parse_metric_json(_metric(na)))
    assert result.findings == ["gpu 0: the uncorrectable ECC count is N/A or was not collected"]


def test_amd_smi_both_json_envelopes_read_the_same() -> None:
    listed = amd_smi.parse_metric_json(sample("amd_smi", "constructed_metric_list.json"))
    wrapped = amd_smi.parse_metric_json(
        json.dumps({"gpu_data": json.loads(sample("amd_smi", "constructed_metric_list.json"))})
    )
    assert listed == wrapped


@pytest.mark.parametrize(
    ("name", "parse", "compute", "memory"),
    [
        (
            "partition_current_spx_issue4477.txt",
            parse_partition_text,
            "SPX",
            "NPS1",
        ),
        (
            "partition_current_dpx_partition_doc.txt",
            parse_partition_text,
            "DPX",
            "NPS2",
        ),
        (
            "constructed_partition_current.json",
            parse_partition_json,
            "spx",
            "nps1",
        ),
        (
            "constructed_static_partition.json",
            parse_partition_json,
            "SPX",
            "NPS1",
        ),
        (
            "constructed_static_partition_rocm6.json",
            parse_partition_json,
            "SPX",
            "NPS1",
        ),
    ],
)
def test_amd_smi_partitions_pass_when_expected(
    name: str,
    parse: Callable[[str], list[GpuPartition]],
    compute: str,
    memory: str,
) -> None:
    result = check_partitions(parse(sample("amd_smi", name)), compute=compute, memory=memory)
    assert result.passed, result.findings


def test_amd_smi_wrong_partition_fails() -> None:
    parts = parse_partition_text(sample("amd_smi", "partition_current_spx_issue4477.txt"))
    result = check_partitions(parts, compute="CPX", memory="NPS4")
    assert result.passed is False and len(result.findings) == 8
    assert result.findings[0].startswith("gpu 0: accelerator partition SPX, expected CPX")
    edited = sample("amd_smi", "partition_current_spx_issue4477.txt").replace(
        "2       NPS1    SPX", "2       NPS4    CPX"
    )
    result = check_partitions(parse_partition_text(edited), compute="SPX", memory="NPS1")
    assert [f.split(":")[0] for f in result.findings] == ["gpu 2", "gpu 2"]


def test_amd_smi_partition_na_from_rocm_issue_4477_fails() -> None:
    parts = parse_partition_text(sample("amd_smi", "partition_current_na_issue4477.txt"))
    assert [(p.compute, p.memory, p.partition_id) for p in parts] == [(None, "NPS1", None)] * 4
    result = check_partitions(parts, compute="SPX", memory="NPS1")
    assert result.passed is False and "ROCm/ROCm#4477" in result.findings[0]


def test_amd_smi_partition_expectations_are_checked() -> None:
    with pytest.raises(SglxError, match="not an accelerator partition mode"):
        check_partitions([], compute="XPX", memory="NPS1")
    with pytest.raises(SglxError, match="not a memory partition mode"):
        check_partitions([], compute="SPX", memory="NPS3")


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda g: g[3]["usage"].pop("gfx_activity"), ("gpu 3: usage.gfx_activity is missing",)),
        (lambda g: g[3].pop("usage"), ("gpu 3: usage is missing",)),
        (
            lambda g: g[1]["ecc"].pop("total_uncorrectable_count"),
            ("gpu 1: ecc.total_uncorrectable_count is missing",),
        ),
        (
            lambda g: g[0]["temperature"]["hotspot"].update(unit="F"),
            ("gpu 0: temperature.hotspot is in 'F'",),
        ),
        (
            lambda g: g[0]["usage"]["gfx_activity"].update(value="busy"),
            ("gpu 0: usage.gfx_activity is 'busy', not a number",),
        ),
        (
            lambda g: g[0]["ecc"].update(total_uncorrectable_count=-1),
            ("total_uncorrectable_count is -1",),
        ),
        (lambda g: g[4].update(gpu=2), ("gpu 2: appears twice",)),
        (lambda g: g[4].update(gpu=True), ("entry 4: gpu is True, not a GPU index",)),
    ],
)
def test_amd_smi_malformed_metric_is_refused(
    edit: Callable[[list[dict[str, Any]]], Any], words: tuple[str, ...]
) -> None:
    error = refused(amd_smi.parse_metric_json, _metric(edit), "amd-smi metric --json:", *words)
    assert error.code == "corrupt"


def test_amd_smi_metric_sections_the_caller_needs() -> None:
    ecc_only = json.dumps(
        [{"gpu": 0, "ecc": {"total_correctable_count": 0, "total_uncorrectable_count": 0}}]
    )
    refused(amd_smi.parse_metric_json, ecc_only, "gpu 0: usage is missing")
    readings = amd_smi.parse_metric_json(ecc_only, require=("ecc",))
    assert amd_smi.check_ecc(readings).passed


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('{"gpu_data": [', ("amd-smi metric --json: the output is not valid JSON",)),
        ("'CTRL' + 'C' to stop watching output:\n[]", ("not valid JSON",)),
        ('{"gpus": []}', ("neither a list of GPU objects",)),
        ("[]", ("lists no GPU",)),
        ('[{"gpu": 0, "gpu": 1}]', ("repeats the key 'gpu'",)),
        ("[" * 100 + "]" * 100, ("nested more than",)),
    ],
)
def test_amd_smi_broken_json_is_refused(text: str, words: tuple[str, ...]) -> None:
    refused(amd_smi.parse_metric_json, text, *words)


def test_amd_smi_truncated_monitor_row_is_refused() -> None:
    text = sample("amd_smi", "monitor_putm_mi300x_blog.txt")
    cut = text[: text.index("  4  118 W") + 20]
    refused(amd_smi.parse_monitor, cut, "amd-smi monitor: line 6: has 3 values for 8 columns")
    refused(amd_smi.parse_monitor, "GPU  POWER\n  0  182 W\n", "no GFX% / GFX_UTIL")
    refused(amd_smi.parse_monitor, "no table here\n", "has no `GPU ...` header")
    refused(parse_partition_text, "CURRENT_PARTITION:\n", "lacks GPU_ID")
    bad_mode = sample("amd_smi", "partition_current_spx_issue4477.txt").replace("SPX", "ZPX", 1)
    refused(parse_partition_text, bad_mode, "gpu 0: ACCELERATOR_TYPE is 'ZPX'")


# -- rvs ---------------------------------------------------------------------------------------


def test_rvs_gst_met_true_passes_and_met_false_fails() -> None:
    text = sample("rvs", "gst_mi300x_acceptance_doc.txt")
    report = rvs.parse_rvs(text)
    (action,) = report.actions
    assert action.module == "gst" and action.passed
    assert action.numbers == {"min_gflops": 1687129.0, "target_gflops": 1215000.0, "gpus": 1}
    assert rvs.check_rvs(report, modules=["gst"]).passed
    failed = rvs.check_rvs(rvs.parse_rvs(text.replace("met: TRUE", "met: FALSE")))
    assert failed.passed is False
    assert failed.findings == [
        "gst-1215Tflops-4K4K8K-rand-fp8: GPU 28851 reached 1.68713e+06 GFLOPS, target "
        "1.215e+06: met: FALSE"
    ]


def test_rvs_before_march_2024_wrote_gst_and_iet_lines_without_the_gpu_tag() -> None:
    """The older formats, written from RVS's source before commit b476897e (no published
    sample): `gst <gpu> GFLOPS x Target stress : t met :TRUE`, `iet <gpu> pass: TRUE`."""
    log = (
        "[RESULT] [497564.86904 ] Action name :action_1\n"
        "[RESULT] [497564.87000 ] Module name :gst\n"
        "[RESULT] [497570.1     ] [action_1] gst 33367 GFLOPS 5200.000000\n"
        "[RESULT] [497583.130945] [action_1] gst 33367 GFLOPS 6521.049418 Target stress : "
        "5000.000000 met :TRUE\n"
        "[RESULT] [497590.0     ] [action_2] iet 3254 pass: FALSE\n"
    )
    report = rvs.parse_rvs(log)
    assert [(a.name, a.module, a.passed) for a in report.actions] == [
        ("action_1", "gst", True),
        ("action_2", "iet", False),
    ]
    assert report.actions[0].numbers["target_gflops"] == 5000.0


def test_rvs_user_guide_samples_pass_with_their_summary_table() -> None:
    for module in ("gst", "iet", "mem", "pebb", "pbqt"):
        report = rvs.parse_rvs(sample("rvs", f"{module}_mi355x_user_guide.txt"))
        (action,) = report.actions
        assert (action.module, action.summary, action.passed) == (module, "PASS", True)
        assert rvs.check_rvs(report, modules=[module]).passed


def test_rvs_summary_fail_row_fails_even_with_clean_lines() -> None:
    text = sample("rvs", "pebb_mi355x_user_guide.txt").replace(
        "| PEBB           | PASS", "| PEBB           | \x1b[31mFAIL"
    )
    result = rvs.check_rvs(rvs.parse_rvs(text))
    assert result.findings == ["pcie_h2d_bandwidth: the RVS summary reports FAIL"]


def test_rvs_iet_pass_false_fails() -> None:
    text = sample("rvs", "iet_mi355x_user_guide.txt").replace(
        "[GPU:: 17010] pass: TRUE", "[GPU:: 17010] pass: FALSE"
    )
    result = rvs.check_rvs(rvs.parse_rvs(text), modules=["iet"])
    # The log's own summary row still says PASS: the per-GPU line is what fails it.
    assert result.findings == [
        "iet-stress-1400W-true: GPU 17010 did not reach its target power: pass: FALSE"
    ]


def test_rvs_mem_errors_and_bandwidth_floor() -> None:
    text = sample("rvs", "mem_mi300x_acceptance_doc.txt")
    report = rvs.parse_rvs(text)
    assert report.actions[0].numbers == {"tests_passed": 8, "min_bandwidth_gbps": 1994.768433}
    assert rvs.check_rvs(report, mem_min_gbps=1900).passed
    low = rvs.check_rvs(report, mem_min_gbps=2000)
    assert low.findings == ["action_1: memory bandwidth 1994.77 GB/s, under 2000 GB/s"]
    broken = text + "[RESULT] [214815.5] [action_1] mem Number of errors :3\n"
    assert rvs.check_rvs(rvs.parse_rvs(broken)).findings == ["action_1: 3 memory errors reported"]


def test_rvs_pbqt_peers_false_and_unmeasured_bandwidth_fail() -> None:
    text = sample("rvs", "pbqt_mi355x_user_guide.txt")
    not_peers = text.replace(
        "[GPU:: 4 - 36479 - 0000:65:00.0] peers:true",
        "[GPU:: 4 - 36479 - 0000:65:00.0] peers:false",
    )
    result = rvs.check_rvs(rvs.parse_rvs(not_peers))
    assert result.findings == [
        "xgmi_d2d_unidir_bandwidth: GPU 42583 and GPU 36479 are not peers (peers:false)"
    ]
    unmeasured = text.replace(
        "bidirectional: false 59.704 GBps duration: 0.233798 secs",
        "bidirectional: false (not measured)",
    )
    result = rvs.check_rvs(rvs.parse_rvs(unmeasured))
    assert result.findings == [
        "xgmi_d2d_unidir_bandwidth: gpu 57875 - gpu 36479: no bandwidth measured"
    ]


def test_rvs_pebb_bandwidth_and_distance() -> None:
    report = rvs.parse_rvs(sample("rvs", "pebb_mi300x_acceptance_doc.txt"))
    (action,) = report.actions
    assert action.distances == 16 and action.numbers["transfers"] == 3
    zero = sample("rvs", "pebb_mi355x_user_guide.txt").replace("57.678 GBps", "0.000 GBps")
    assert "cpu 0 - gpu 42583: bandwidth 0 GBps" in rvs.check_rvs(rvs.parse_rvs(zero)).reason


def test_rvs_abridged_actions_without_results_fail() -> None:
    """AMD's acceptance page cuts its IET sample after the second action's header: an action
    that never printed its verdict is a failure, not a pass."""
    result = rvs.check_rvs(rvs.parse_rvs(sample("rvs", "iet_mi300x_acceptance_doc.txt")))
    assert result.findings == [
        "iet-wait-750W-28K-rand-dgemm: no GPU reached its final `pass:` line"
    ]


def test_rvs_errors_and_missing_modules() -> None:
    text = sample("rvs", "peqt_mi300x_acceptance_doc.txt")
    assert rvs.check_rvs(rvs.parse_rvs(text), modules=["peqt"]).passed
    assert rvs.check_rvs(rvs.parse_rvs(text), modules=["gst"]).findings == [
        "no gst action in the log: was its conf file run?"
    ]
    failed = text.replace("[pcie_act_17] peqt true", "[pcie_act_17] peqt false")
    assert "peqt false" in rvs.check_rvs(rvs.parse_rvs(failed)).reason
    errored = text + "RVS-ERROR [PEQT] [pcie_act_1] could not read the link status\n"
    assert rvs.check_rvs(rvs.parse_rvs(errored)).findings == [
        "pcie_act_1: RVS-ERROR [PEQT] [pcie_act_1] could not read the link status"
    ]


def test_rvs_non_log_is_refused() -> None:
    refused(rvs.parse_rvs, "Segmentation fault (core dumped)\n", "rvs log: has no RVS action")


# -- all_reduce_perf ---------------------------------------------------------------------------


def test_all_reduce_reads_amds_mi300x_numbers() -> None:
    report = rccl_tests.parse_all_reduce(sample("rccl_tests", "all_reduce_mi300x_8rank_mpi.txt"))
    assert len(report.rows) == 31 and report.avg_busbw_gbps == 110.464
    last = report.rows[-1]
    assert (last.size_bytes, last.count, last.dtype, last.redop) == (
        8 << 30,
        2 << 30,
        "float",
        "sum",
    )
    assert last.in_place == rccl_tests.Half(47584.0, 180.52, 315.91, 0)
    assert last.out_of_place is not None and last.out_of_place.busbw_gbps == 315.69
    result = rccl_tests.check_all_reduce(report, min_busbw_gbps=304)
    assert result.numbers["inplace_busbw_gbps"] == 315.91


def test_all_reduce_low_busbw_fails() -> None:
    report = rccl_tests.parse_all_reduce(sample("rccl_tests", "all_reduce_mi300x_8rank_mpi.txt"))
    result = rccl_tests.check_all_reduce(report, min_busbw_gbps=350)
    assert result.passed is False
    assert result.findings == ["in-place busbw at 8 GiB is 315.91 GB/s, under the 350 GB/s floor"]
    avg = rccl_tests.check_all_reduce(report, min_busbw_gbps=304, min_avg_busbw_gbps=150)
    assert avg.findings == ["average bus bandwidth 110.464 GB/s, under 150 GB/s"]
    short = rccl_tests.check_all_reduce(report, min_busbw_gbps=304, min_size_bytes=16 << 30)
    assert short.findings[0].startswith("the largest message is 8 GiB; the floor is for 16 GiB")


def test_all_reduce_wrong_elements_fail() -> None:
    text = sample("rccl_tests", "all_reduce_mi300x_8rank_mpi.txt")
    row = "  1073741824     268435456     float     sum      -1   5990.7  179.24  313.66      0"
    wrong = text.replace(row, row[:-1] + "5")
    wrong = wrong.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 1 FAILED")
    result = rccl_tests.check_all_reduce(rccl_tests.parse_all_reduce(wrong), min_busbw_gbps=304)
    assert result.passed is False
    assert result.findings == [
        "1 GiB float out-of-place: 5 wrong elements: the collective returned corrupt data",
        "1 out-of-bounds values reported",
    ]
    assert result.numbers["wrong_total"] == 5


def test_all_reduce_unchecked_results_fail() -> None:
    text = sample("rccl_tests", "all_reduce_mi350x_acceptance_doc.txt")
    unchecked = re.sub(r"(\S+)\s+0\n", r"\1    N/A\n", text)
    report = rccl_tests.parse_all_reduce(unchecked)
    assert all(r.in_place is not None and r.in_place.wrong is None for r in report.rows)
    result = rccl_tests.check_all_reduce(report, min_busbw_gbps=304)
    assert result.findings == [
        "2 results were not checked (#wrong N/A): run without -c 0 so every result is verified"
    ]


def test_all_reduce_header_variants() -> None:
    """rccl-tests' newer `algo proto nchannels` columns and an mpirun --tag-output prefix."""
    text = sample("rccl_tests", "all_reduce_mi350x_acceptance_doc.txt")
    extra = text.replace("busbw  #wrong\n", "busbw  #wrong     algo     proto   nchannels\n")
    extra = re.sub(r"(\s+0)\n", r"\1    RING    SIMPLE          32\n", extra)
    tagged = "".join(f"[1,0]<stdout>:{line}\n" for line in extra.splitlines())
    report = rccl_tests.parse_all_reduce(tagged)
    assert report.rows[-1].in_place is not None and report.rows[-1].in_place.busbw_gbps == 367.51
    in_place_only = text.replace(
        "#                                                              out-of-place "
        "                      in-place",
        "#       in-place",
    )
    lines = [line for line in in_place_only.splitlines() if "size" not in line]
    header = "#       size         count      type   redop    root     time   algbw   busbw #wrong"
    rows = "           8             2     float     sum      -1    49.68    0.00    0.00       0"
    one_half = "\n".join([*lines[:8], header, rows, *lines[-3:]]) + "\n"
    only = rccl_tests.parse_all_reduce(one_half)
    assert only.rows[0].out_of_place is None and only.rows[0].in_place is not None


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda t: t[: t.index("# Out of bounds")], ("ends before its `# Out of bounds values`",)),
        (lambda t: t[: t.index("  8589934592") + 40], ("columns, fewer than the header's 13",)),
        (lambda t: t[: t.index("#       size")], ("has no `#  size  count  type",)),
        (lambda t: t.replace("315.91", "fast"), ("busbw is 'fast', not a number",)),
        (lambda t: t.replace("#wrong", "error"), ("predates nccl-tests 2.x",)),
        (lambda t: t + t[t.index("#       size") :], ("a second result table",)),
    ],
)
def test_all_reduce_broken_output_is_refused(
    edit: Callable[[str], str], words: tuple[str, ...]
) -> None:
    text = edit(sample("rccl_tests", "all_reduce_mi300x_8rank_mpi.txt"))
    refused(rccl_tests.parse_all_reduce, text, "all_reduce_perf:", *words)


def test_all_reduce_floor_cannot_be_negative() -> None:
    report = rccl_tests.parse_all_reduce(sample("rccl_tests", "all_reduce_mi300x_8rank_mpi.txt"))
    with pytest.raises(SglxError, match="cannot be negative"):
        rccl_tests.check_all_reduce(report, min_busbw_gbps=-1)


# -- xpu-smi -----------------------------------------------------------------------------------


def test_xpu_smi_table_reads_four_p800s() -> None:
    readings = xpu_smi.parse_table(sample("xpu_smi", "table_p800_oam_flagos.txt"))
    assert [(r.index, r.bus_id, r.name) for r in readings] == [
        (0, "00000000:03:00.0", "P800 OAM"),
        (1, "00000000:16:00.0", "P800 OAM"),
        (2, "00000000:1c:00.0", "P800 OAM"),
        (3, "00000000:2e:00.0", "P800 OAM"),
    ]
    first = readings[0]
    assert (first.utilization, first.temperature_c) == (0.0, 39.0)
    assert (first.memory_used_mib, first.memory_total_mib) == (31058, 98304)
    assert first.ecc == {"volatile_uncorr": 0}
    assert xpu_smi.check_idle(readings, max_temp_c=85).passed
    assert xpu_smi.check_ecc(readings).passed
    held = xpu_smi.check_idle(readings, max_temp_c=85, max_memory_used_mib=1024)
    assert held.findings == [
        "XPU 0 (00000000:03:00.0): 31058 MiB of device memory in use (at most 1024 MiB when "
        "free): another process holds the card"
    ]


def test_xpu_smi_table_hot_busy_and_ecc_fail() -> None:
    text = sample("xpu_smi", "table_p800_oam_flagos.txt")
    hot = text.replace("| N/A   44C  N/A     93W", "| N/A   88C  N/A     93W")
    busy = hot.replace("0MiB / 98304MiB |      0%", "0MiB / 98304MiB |     97%", 1)
    result = xpu_smi.check_idle(xpu_smi.parse_table(busy), max_temp_c=85)
    assert result.findings == [
        "XPU 1 (00000000:16:00.0): utilization 97 % (idle is at most 0 %)",
        "XPU 2 (00000000:1c:00.0): temperature 88 °C is not under 85 °C",
    ]
    ecc = text.replace(
        "| 00000000:2E:00.0 N/A |                    0 |",
        "| 00000000:2E:00.0 N/A |                    3 |",
    )
    result = xpu_smi.check_ecc(xpu_smi.parse_table(ecc))
    assert result.findings[0].startswith(
        "XPU 3 (00000000:2e:00.0): 3 uncorrectable ECC errors (volatile_uncorr)"
    )


def test_xpu_smi_query_reads_health_fields() -> None:
    (reading,) = xpu_smi.parse_query(sample("xpu_smi", "query_p800_pcie_zstack.txt"))
    assert reading == xpu_smi.XpuReading(
        bus_id="00000000:01:00.0",
        index=0,
        name="P800 PCIe",
        utilization=0.0,
        temperature_c=46.0,
        memory_used_mib=0,
        memory_total_mib=98304,
        ecc={
            "volatile.dram_correctable": 0,
            "volatile.dram_uncorrectable": 0,
            "aggregate.dram_correctable": 0,
            "aggregate.dram_uncorrectable": 0,
        },
        ecc_mode="Enabled",
    )
    assert xpu_smi.check_idle([reading], max_temp_c=85).passed
    assert xpu_smi.check_ecc([reading]).passed
    assert not xpu_smi.check_idle([reading], max_temp_c=46).passed


def test_xpu_smi_query_ecc_and_mode_fail() -> None:
    text = sample("xpu_smi", "query_p800_pcie_zstack.txt")
    aggregate = text.index("Aggregate")
    broken = text[:aggregate] + text[aggregate:].replace(
        "DRAM Uncorrectable            : 0", "DRAM Uncorrectable            : 4", 1
    )
    broken = broken.replace(
        "Current                           : Enabled",
        "Current                           : Disabled",
    )
    result = xpu_smi.check_ecc(xpu_smi.parse_query(broken))
    assert result.findings == [
        "XPU 0 (00000000:01:00.0): 4 uncorrectable ECC errors (aggregate.dram_uncorrectable): "
        "the card's memory is failing",
        "XPU 0 (00000000:01:00.0): ECC mode is Disabled, not Enabled",
    ]


def test_xpu_smi_malformed_output_is_refused() -> None:
    query = sample("xpu_smi", "query_p800_pcie_zstack.txt")
    no_temp = query.replace("        XPU Current Temp                  : 46 C\n", "")
    refused(
        xpu_smi.parse_query,
        no_temp,
        "xpu-smi -q: XPU 00000000:01:00.0: Temperature.XPU Current Temp is missing",
    )
    refused(
        xpu_smi.parse_query,
        query.replace(": 46 C", ": warm"),
        "Temperature.XPU Current Temp is 'warm', not a value in C",
    )
    refused(xpu_smi.parse_query, "Attached XPUs : 0\n", "has no `XPU <bus id>` block")
    table = sample("xpu_smi", "table_p800_oam_flagos.txt")
    refused(xpu_smi.parse_table, table.replace("39C", "39F"), "XPU 0: Temp is '39F'")
    refused(xpu_smi.parse_table, table.replace("XPU-Util", "XPU-Load"), "no `XPU-Util` column")
    cut = table[: table.index("|   2  P800") + 40]
    refused(xpu_smi.parse_table, cut, "has 2 cells, not 3")
    refused(xpu_smi.parse_table, "nvidia-smi: command not found\n", "no `XPU-SMI` banner")


# -- bounds shared by every parser -------------------------------------------------------------

PARSERS: list[tuple[str, Callable[[Any], Any]]] = [
    ("amd-smi metric --json", amd_smi.parse_metric_json),
    ("amd-smi monitor", amd_smi.parse_monitor),
    ("amd-smi partition", parse_partition_json),
    ("amd-smi partition", parse_partition_text),
    ("rvs log", rvs.parse_rvs),
    ("all_reduce_perf", rccl_tests.parse_all_reduce),
    ("xpu-smi", xpu_smi.parse_table),
    ("xpu-smi -q", xpu_smi.parse_query),
]


@pytest.mark.parametrize(("what", "parse"), PARSERS)
def test_oversized_binary_and_empty_input_is_refused(
    what: str, parse: Callable[[Any], Any]
) -> None:
    big = refused(parse, b" " * (MAX_OUTPUT_BYTES + 1), f"{what}: the output is", "4 MiB")
    assert big.code == "too_large"
    refused(parse, b"\xff\xfe\x00junk", f"{what}: the output is not UTF-8 text")
    refused(parse, "GPU\x00\x00", f"{what}: the output holds NUL characters")
    refused(parse, "  \n", f"{what}: the output is empty")


# -- absent tools and the result shape ---------------------------------------------------------


@pytest.mark.parametrize("located", [None, "", "  \n"])
def test_an_absent_tool_is_not_run_never_passed(located: str | None) -> None:
    assert is_absent(located)
    result = absent("amd-smi", located)
    assert result == ToolResult("amd-smi", False, None, "amd-smi not found on PATH")
    assert result.to_dict()["passed"] is None


def test_a_present_tool_is_run() -> None:
    assert absent("xpu-smi", "/usr/local/bin/xpu-smi") is None
    assert absent("rvs", shutil.which("sh")) is None
    assert absent("all_reduce_perf", shutil.which("no-such-tool-sglx")) == not_run(
        "all_reduce_perf", "all_reduce_perf not found on PATH"
    )


def test_result_invariants() -> None:
    with pytest.raises(ValueError, match="did not run has no verdict"):
        ToolResult("rvs", False, True, "x")
    with pytest.raises(ValueError, match="must pass or fail"):
        ToolResult("rvs", True, None, "x")
    with pytest.raises(ValueError, match="cannot carry findings"):
        ToolResult("rvs", True, True, "x", ["problem"])
    failed = verdict("rvs", ["a", "b", "c"], {}, "fine")
    assert (failed.passed, failed.reason) == (False, "a (and 2 more)")
    assert verdict("rvs", [], {"n": 1}, "fine").to_dict() == {
        "tool": "rvs",
        "ran": True,
        "passed": True,
        "reason": "fine",
        "findings": [],
        "numbers": {"n": 1},
    }


def test_all_reduce_a_second_verdict_never_overrides_the_first() -> None:
    """Issue 37 item 5: a `0 OK` footer after `12 FAILED` passed a failing collective."""
    text = sample("rccl_tests", "all_reduce_mi300x_8rank_mpi.txt")
    forged = text.replace(
        "# Out of bounds values : 0 OK",
        "# Out of bounds values : 12 FAILED\n# Out of bounds values : 0 OK",
    )
    refused(rccl_tests.parse_all_reduce, forged, "a second `# Out of bounds values` verdict")
    contradicts = text.replace("# Out of bounds values : 0 OK", "# Out of bounds values : 3 OK")
    refused(rccl_tests.parse_all_reduce, contradicts, "the count and the verdict disagree")


def test_all_reduce_a_superscript_digit_is_refused_not_a_traceback() -> None:
    """Issue 37 item 9: `str.isdigit` takes '²', which int() then raises ValueError on."""
    text = sample("rccl_tests", "all_reduce_mi300x_8rank_mpi.txt")
    row = "  1073741824     268435456     float     sum      -1   5990.7  179.24  313.66      0"
    forged = text.replace(row, row.replace("1073741824", "²073741824", 1))
    try:
        rccl_tests.parse_all_reduce(forged)
    except SglxError as error:
        assert error.hint is not None


@pytest.mark.parametrize(
    ("tool", "name", "parse"),
    [
        ("amd_smi", "monitor_putm_mi300x_blog.txt", "amd"),
        ("xpu_smi", "query_p800_pcie_zstack.txt", "xpu"),
        ("rccl_tests", "all_reduce_mi300x_8rank_mpi.txt", "rccl"),
    ],
)
def test_a_non_ascii_digit_is_refused_by_every_parser(tool: str, name: str, parse: str) -> None:
    """Issue 37 item 9: '²' passed str.isdigit and int() raised ValueError in three parsers."""
    parsers = {
        "amd": amd_smi.parse_monitor,
        "xpu": xpu_smi.parse_query,
        "rccl": rccl_tests.parse_all_reduce,
    }
    text = sample(tool, name)
    forged = text.replace("1", "\u00b9", 1)
    refused(parsers[parse], forged, "the digit '\u00b9'")


def test_an_rvs_figure_that_is_no_number_is_refused() -> None:
    """Issue 37 item 9: `[0-9.]+` matched 1.2.3 and float() raised ValueError."""
    for path in sorted((DATA / "rvs").glob("*.txt")):
        text = path.read_text(encoding="utf-8")
        forged = re.sub(r"(bandwidth\s*=\s*)[0-9.]+", r"\g<1>1.2.3", text, count=1)
        forged = re.sub(r"(Power\(W\)\s+)[0-9.]+", r"\g<1>1.2.3", forged, count=1)
        if forged != text:
            refused(rvs.parse_rvs, forged, "'1.2.3' is not a number")
            return
    pytest.skip("no RVS sample carries a bandwidth or power figure")


def test_xpu_smi_a_counter_given_twice_is_refused_not_the_last_kept() -> None:
    """Issue 37 item 5: a second `DRAM Uncorrectable : 0` hid the first's errors."""
    text = sample("xpu_smi", "query_p800_pcie_zstack.txt")
    line = "            DRAM Uncorrectable            : 0\n"
    assert line in text
    forged = text.replace(line, line.replace(": 0", ": 12") + line, 1)
    refused(xpu_smi.parse_query, forged, "DRAM Uncorrectable is given twice")


def test_amd_smi_a_gpu_with_every_sensor_na_fails_idle_unless_a_secondary_partition() -> None:
    """Issue 37 item 5: a metric-JSON GPU whose every sensor is N/A was skipped as a
    "secondary partition", so a GPU that answered nothing passed the idle check."""
    document = json.loads(sample("amd_smi", "constructed_metric_gpu_data.json"))
    entry = document["gpu_data"][0]
    entry["usage"] = "N/A"
    entry["temperature"] = "N/A"
    readings = amd_smi.parse_metric_json(json.dumps(document), require=("usage", "temperature"))
    result = amd_smi.check_idle(readings, max_temp_c=90)
    assert result.passed is False
    assert any("gpu 0: GFX activity is N/A" in f for f in result.findings), result.findings
    # The monitor table says which rows are secondary partitions (XCP 1 and up): those count.
    secondary = amd_smi.GpuReading(gpu=0, gfx_activity=None, xcp=1)
    primary = amd_smi.GpuReading(gpu=0, gfx_activity=0.0, temperatures={"GPU_T": 40.0}, xcp=0)
    assert amd_smi.check_idle([primary, secondary], max_temp_c=90).passed is True


def test_rvs_a_mem_log_cut_after_a_test_started_fails() -> None:
    """Issue 37 item 5: a mem log cut after a test's errors (its PASS lines never came) passed."""
    for name in ("mem_mi300x_acceptance_doc.txt", "mem_mi355x_user_guide.txt"):
        text = sample("rvs", name)
        assert rvs.check_rvs(rvs.parse_rvs(text)).passed is True
    text = sample("rvs", "mem_mi300x_acceptance_doc.txt")
    cut = text + "[RESULT] [214815.5] [action_1] mem Test 2: Moving inversions, ones and zeros\n"
    result = rvs.check_rvs(rvs.parse_rvs(cut))
    assert result.passed is False
    assert any("the log ends inside mem Test 2" in f for f in result.findings), result.findings

"""The collective smoke's report: the bandwidth formulas, the plugin's summary of a group, and
the host's bounded reader of the JSON a node prints (sglx_core.gate.collective).

The smoke itself (processes, a rendezvous, gloo) runs in
tests/integration/test_collective_smoke.py; here everything is pure and takes milliseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sglx_core.errors import SglxError
from sglx_core.gate.collective import (
    MAX_REPORT_BYTES,
    CollectiveReport,
    algorithm_bandwidth,
    bus_bandwidth,
    parse_report,
    read_report,
)
from sglx_runtime.collective_smoke import Settings, settings, summarize


def _settings(**change: Any) -> Settings:
    base: dict[str, Any] = {
        "nnodes": 2,
        "node_rank": 0,
        "nproc_per_node": 2,
        "master_addr": "10.0.0.1",
        "master_port": 29500,
        "hosts": ("h0", "h1"),
        "backend": "nccl",
        "device_type": "cuda",
        "size_bytes": 64 << 20,
        "iters": 20,
        "warmup": 5,
        "timeout_s": 60.0,
        "floor_gbps": None,
    }
    return Settings(**{**base, **change})


def _arrived(*ranks: int) -> dict[int, dict[str, Any]]:
    return {r: {"hostname": f"host{r // 2}", "pid": 100 + r} for r in ranks}


def _results(seconds: dict[int, float], **extra: dict[str, Any]) -> dict[int, dict[str, Any]]:
    out = {
        r: {"seconds": t, "wrong": None, "error": None, "error_code": None}
        for r, t in seconds.items()
    }
    for rank, fields in extra.items():
        out[int(rank.removeprefix("r"))].update(fields)
    return out


# ---------------------------------------------------------------------------------------------
# The formulas
# ---------------------------------------------------------------------------------------------


def test_bus_bandwidth_is_nccl_tests_allreduce_factor() -> None:
    assert bus_bandwidth(100.0, 8) == pytest.approx(175.0)  # 2 * 7 / 8
    assert bus_bandwidth(100.0, 2) == pytest.approx(100.0)
    assert bus_bandwidth(100.0, 1) == 0.0  # one rank moves nothing over a bus
    with pytest.raises(ValueError, match="0 ranks"):
        bus_bandwidth(1.0, 0)


def test_algorithm_bandwidth_is_decimal_gigabytes_per_second() -> None:
    assert algorithm_bandwidth(1_000_000_000, 0.5) == pytest.approx(2.0)
    for seconds in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="measures nothing"):
            algorithm_bandwidth(1024, seconds)


# ---------------------------------------------------------------------------------------------
# The plugin's summary of a group
# ---------------------------------------------------------------------------------------------


def test_the_slowest_rank_sets_the_group_bandwidth() -> None:
    s = _settings(floor_gbps=1.0)
    report = summarize(s, _arrived(0, 1, 2, 3), _results({0: 0.01, 1: 0.01, 2: 0.02, 3: 0.01}))
    assert report.ok and report.exit_code == 0
    algbw = (64 << 20) / 0.02 / 1e9
    assert report.algbw_gbps == pytest.approx(algbw, rel=1e-5)
    assert report.busbw_gbps == pytest.approx(algbw * 1.5, rel=1e-5)
    assert [r.host for r in report.ranks] == ["h0", "h0", "h1", "h1"]


def test_below_the_floor_is_a_finding_with_both_numbers() -> None:
    report = summarize(_settings(floor_gbps=304.0), _arrived(0, 1, 2, 3),
                       _results(dict.fromkeys(range(4), 0.01)))  # fmt: skip
    assert report.exit_code == 1
    (finding,) = report.findings
    assert finding.code == "below_floor"
    assert "below the floor 304 GB/s" in finding.message


def test_one_rank_is_never_held_against_a_floor() -> None:
    s = _settings(nnodes=1, nproc_per_node=1, hosts=("h0",), floor_gbps=304.0)
    report = summarize(s, _arrived(0), _results({0: 0.01}))
    assert report.ok and report.busbw_gbps == 0.0


def test_missing_ranks_are_named_by_node_and_host() -> None:
    report = summarize(_settings(), _arrived(0, 1), {})
    assert [(m.rank, m.host) for m in report.missing] == [(2, "h1"), (3, "h1")]
    (finding,) = report.findings
    assert finding.code == "missing_rank"
    assert "ranks 2-3 of node 1 (h1) never arrived" in finding.message
    assert finding.hint is not None and "--node-rank 1" in finding.hint
    assert report.exit_code == 1 and report.busbw_gbps is None


def test_a_wrong_sum_and_a_silent_rank_are_findings() -> None:
    wrong = {"wrong": "3 of 16 elements of the sum are wrong (first at index 0: 2.0, expected 3.0)"}
    results = _results({0: 0.01, 1: 0.01, 2: 0.01}, r1=wrong)
    report = summarize(_settings(), _arrived(0, 1, 2, 3), results)
    codes = {f.code: f.message for f in report.findings}
    assert codes["wrong_sum"].startswith("rank 1 on h0: 3 of 16 elements")
    assert codes["no_result"] == "rank 3 on h1 posted no result within 60 s"
    assert report.busbw_gbps is None  # not every rank measured


def test_settings_refuse_names_the_profile_does_not_use() -> None:
    with pytest.raises(SglxError, match="BKCL answers to torch's 'nccl'"):
        settings(["--backend", "bkcl"])
    with pytest.raises(SglxError, match="pass --device-type cuda"):
        settings(["--device-type", "xpu"])
    with pytest.raises(SglxError, match="--node-rank 2 is not below --nnodes 2"):
        settings(["--nnodes", "2", "--node-rank", "2"])
    with pytest.raises(SglxError, match="--hosts names 1 node"):
        settings(["--nnodes", "2", "--hosts", "h0"])


def test_settings_default_to_the_backend_and_size_of_the_device() -> None:
    cpu = settings([])
    assert (cpu.backend, cpu.size_bytes) == ("gloo", 8 << 20)
    device = settings(["--device-type", "cuda", "--size-bytes", "1001"])
    assert (device.backend, device.size_bytes) == ("nccl", 1000)  # whole float32 elements


# ---------------------------------------------------------------------------------------------
# The host's reader
# ---------------------------------------------------------------------------------------------


def _document() -> dict[str, Any]:
    report = summarize(_settings(floor_gbps=1.0), _arrived(0, 1, 2, 3),
                       _results(dict.fromkeys(range(4), 0.01)))  # fmt: skip
    return report.to_json()


def test_a_report_reads_back_as_it_was_written() -> None:
    document = _document()
    report = parse_report(json.dumps(document))
    assert isinstance(report, CollectiveReport)
    assert report.to_json() == document


def test_a_missing_rank_report_reads_back() -> None:
    document = summarize(_settings(), _arrived(0, 1), {}).to_json()
    report = parse_report(json.dumps(document).encode())
    assert not report.ok and [m.rank for m in report.missing] == [2, 3]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["ranks"][1].update(host=7), "ranks[1].host is 7, not a string"),
        (lambda d: d["ranks"][2].pop("arrived"), "ranks[2].arrived is missing"),
        (lambda d: d["ranks"][0].update(rank=4), "ranks[0].rank is 4, not an integer from 0 to 3"),
        (lambda d: d["ranks"][3].update(rank=0), "ranks[3] repeats rank 0"),
        (lambda d: d.update(busbw_gbps=-1), "busbw_gbps is -1, not null or GB/s"),
        (lambda d: d.update(busbw_gbps="fast"), 'busbw_gbps is "fast", not null or GB/s'),
        (lambda d: d.update(world_size=True), "world_size is true, not an integer"),
        (lambda d: d.update(extra=1), "(top level) has the unknown key 'extra'"),
        (lambda d: d.update(format_version=2), "format_version is 2; this sglx reads version 1"),
        (lambda d: d.update(ok=False), "ok is false, but the report lists 0 missing rank(s)"),
        (lambda d: d.update(findings=[{"code": "x", "message": "m"}]), "findings[0].hint is"),
        (
            lambda d: d.update(missing=[{"rank": 0, "node_rank": 0, "host": "h0"}], ok=False),
            "missing[0] names rank 0, which ranks lists as arrived",
        ),
    ],
)
def test_a_damaged_report_is_refused_naming_the_field(change: Any, message: str) -> None:
    document = _document()
    change(document)
    with pytest.raises(SglxError) as raised:
        parse_report(json.dumps(document), where="stdout on h1")
    assert raised.value.code == "corrupt"
    assert str(raised.value).startswith("stdout on h1: ")
    assert message in raised.value.message


def test_text_that_is_not_one_json_document_is_refused() -> None:
    with pytest.raises(SglxError, match="not valid JSON"):
        parse_report("sglx collective smoke: rank 0/2 on h0 arrived\n{}")
    with pytest.raises(SglxError, match="repeats the key 'ok'"):
        parse_report('{"ok": true, "ok": false}')


def test_an_oversized_report_is_refused_before_parsing(tmp_path: Path) -> None:
    raw = b" " * MAX_REPORT_BYTES + b"{}"
    with pytest.raises(SglxError) as raised:
        parse_report(raw, where="stdout on h0")
    assert raised.value.code == "too_large"
    path = tmp_path / "collective.json"
    path.write_bytes(raw)
    with pytest.raises(SglxError) as from_file:
        read_report(path)
    assert from_file.value.code == "too_large"


def test_a_report_file_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "collective.json"
    path.write_text(json.dumps(_document()))
    assert read_report(path).world_size == 4

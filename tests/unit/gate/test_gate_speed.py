"""The serving gate's speed part: bench_serving's command line and result file
(sglx_core.gate.bench), and the fleet's verdicts (sglx_core.gate.speed).

The result sample, tests/data/gate/bench_serving-0.5.23.jsonl, is one line as sglang 0.5.23's
bench_serving writes it: the keys of `result` in `benchmark()` (sglang/benchmark/serving.py,
lines ~1855-1911) and `GoodputMetrics` (sglang/benchmark/goodput.py), values from sglang's own
`calculate_metrics` and `calculate_goodput`. tests/data/gate/bench_serving-0.5.23.md says how.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sglx.hosts.junit import read_report
from sglx_core.errors import SglxError
from sglx_core.gate.bench import (
    BENCH_MODULE,
    MAX_RESULT_BYTES,
    BenchResult,
    BenchSettings,
    bench_serving_argv,
    parse_result,
    read_result,
)
from sglx_core.gate.speed import (
    DEFAULT_FRACTION,
    Floors,
    fleet_outliers,
    judge,
    junit_name,
    write_junit,
    write_report,
)

SAMPLE = Path(__file__).resolve().parents[2] / "data" / "gate" / "bench_serving-0.5.23.jsonl"
# What the sample was made with (its .md note).
SAMPLE_SETTINGS = BenchSettings(
    concurrency=8,
    num_prompts=32,
    input_len=128,
    output_len=64,
    goodput_ttft_ms=400,
    goodput_tpot_ms=40,
)


def _sample_line() -> dict[str, object]:
    line = json.loads(SAMPLE.read_text().splitlines()[-1])
    assert isinstance(line, dict)
    return line


def _write(path: Path, *lines: dict[str, object]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _result(tok_s: float, **changes: object) -> BenchResult:
    """A parsed sample with another throughput (and any other field changed)."""
    base = parse_result(SAMPLE.read_bytes(), path=SAMPLE, settings=SAMPLE_SETTINGS)
    return dataclasses.replace(base, output_tok_s=tok_s, **changes)  # type: ignore[arg-type]


# -- the command line -------------------------------------------------------------------------


def test_argv_runs_sglangs_bench_serving_on_random_ids_at_the_profiles_concurrency() -> None:
    argv = bench_serving_argv(
        BenchSettings(concurrency=64, num_prompts=256, goodput_ttft_ms=60000, goodput_tpot_ms=150),
        host="127.0.0.1",
        port=30000,
        tokenizer_path="/models/llama",
        output_file="/tmp/run.jsonl",
    )
    assert argv[:3] == ["python3", "-m", BENCH_MODULE]
    flags = {flag: argv[i + 1] for i, flag in enumerate(argv) if flag.startswith("--")}
    assert flags["--backend"] == "sglang"
    assert flags["--dataset-name"] == "random-ids"  # `random` would download ShareGPT
    assert flags["--max-concurrency"] == "64"
    assert flags["--num-prompts"] == "256"
    assert flags["--random-input-len"] == flags["--random-output-len"] == "1024"
    assert flags["--random-range-ratio"] == "1"
    assert flags["--tokenizer"] == flags["--model"] == "/models/llama"
    assert flags["--output-file"] == "/tmp/run.jsonl"
    assert "--disable-tqdm" in argv
    assert argv[-3:] == ["--goodput", "ttft:60000", "tpot:150"]


def test_argv_keeps_numbers_exact_and_leaves_goodput_out_without_slos() -> None:
    argv = bench_serving_argv(
        BenchSettings(concurrency=1, num_prompts=1, range_ratio=0.123456789),
        host="h",
        port=1,
        tokenizer_path="t",
        output_file="o",
        python="/opt/venv/bin/python",
    )
    assert argv[0] == "/opt/venv/bin/python"
    assert argv[argv.index("--random-range-ratio") + 1] == "0.123456789"
    assert "--goodput" not in argv


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"num_prompts": 4}, "num_prompts 4 is below the concurrency 8"),
        ({"output_len": 1}, "output_len"),
        ({"range_ratio": 1.5}, "range_ratio"),
        ({"goodput_tpot_ms": math.inf}, "goodput_tpot_ms"),
        ({"seed": -1}, "seed"),
    ],
)
def test_settings_refuse_what_bench_serving_would_misreport(
    changes: dict[str, object], field: str
) -> None:
    with pytest.raises(SglxError, match=field):
        dataclasses.replace(SAMPLE_SETTINGS, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(("host", "port"), [("--help", 1), ("", 1), ("h", 0), ("h", 70000)])
def test_argv_refuses_a_host_or_port_argparse_would_misread(host: str, port: int) -> None:
    with pytest.raises(SglxError, match=r"bench_serving (host|port)"):
        bench_serving_argv(
            SAMPLE_SETTINGS, host=host, port=port, tokenizer_path="t", output_file="o"
        )


# -- the result file --------------------------------------------------------------------------


def test_the_real_sample_parses_into_the_gates_numbers() -> None:
    result = read_result(SAMPLE, settings=SAMPLE_SETTINGS)
    line = _sample_line()
    assert result.output_tok_s == line["output_throughput"]
    assert result.ttft_ms_p50 == line["median_ttft_ms"]
    assert result.ttft_ms_p99 == line["p99_ttft_ms"]
    assert result.tpot_ms_mean == line["mean_tpot_ms"]
    assert result.tpot_ms_p90 == line["p90_tpot_ms"]
    assert result.duration_s == line["duration"]
    assert (result.completed, result.num_prompts, result.shortfall()) == (32, 32, None)
    assert result.slo_attainment == line["slo_attainment"]
    assert result.request_goodput == line["request_goodput"]
    assert result.slo_attainment_by_metric == {"ttft": 0.9375, "tpot": 1.0}
    assert result.to_json()["goodput"]["slos_ms"] == {"ttft": 400.0, "tpot": 40.0}


def test_the_last_line_is_the_run_when_bench_serving_appended(tmp_path: Path) -> None:
    older = _sample_line() | {"output_throughput": 1.0}
    newer = _sample_line() | {"output_throughput": 99.5}
    path = _write(tmp_path / "run.jsonl", older, newer)
    assert read_result(path, settings=SAMPLE_SETTINGS).output_tok_s == 99.5


def test_a_run_with_failed_requests_is_a_finding(tmp_path: Path) -> None:
    path = _write(tmp_path / "run.jsonl", _sample_line() | {"completed": 30})
    result = read_result(path, settings=SAMPLE_SETTINGS)
    assert result.shortfall() == "30 of 32 requests completed; 2 failed"
    report = judge({"host-a": result})
    assert [f.message for f in report.findings()] == [
        "host-a: 30 of 32 requests completed; 2 failed"
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"mean_tpot_ms": None}, "mean_tpot_ms is None, not a number"),
        ({"p99_ttft_ms": "12"}, "p99_ttft_ms is '12', not a number"),
        ({"output_throughput": True}, "output_throughput is True, not a number"),
        ({"output_throughput": math.nan}, "output_throughput is nan, not a finite"),
        ({"duration": -1.0}, "duration is -1.0, not a finite number >= 0"),
        ({"completed": 31.5}, "completed is 31.5, not a whole number"),
        ({"completed": 33}, "completed is 33, more than the 32 requests sent"),
        ({"max_concurrency": 16}, "max_concurrency is 16, this run asked for 8"),
        ({"dataset_name": "random"}, "dataset_name is 'random', this run asked for 'random-ids'"),
        ({"random_output_len": 128}, "random_output_len is 128"),
        ({"goodput_slos_ms": {"ttft": 500.0, "tpot": 40.0}}, "goodput_slos_ms"),
        ({"slo_attainment": 1.5}, "slo_attainment is 1.5, not a fraction"),
        ({"slo_attainment_by_metric": {"ttft": 1.0}}, "slo_attainment_by_metric"),
    ],
)
def test_a_malformed_line_is_refused_naming_the_key(
    tmp_path: Path, changes: dict[str, object], message: str
) -> None:
    path = _write(tmp_path / "run.jsonl", _sample_line() | changes)
    with pytest.raises(SglxError, match="bench_serving result") as caught:
        read_result(path, settings=SAMPLE_SETTINGS)
    assert message in caught.value.message
    assert caught.value.hint is not None


@pytest.mark.parametrize("key", ["p90_tpot_ms", "completed", "request_goodput"])
def test_a_missing_key_is_named(tmp_path: Path, key: str) -> None:
    line = _sample_line()
    del line[key]
    path = _write(tmp_path / "run.jsonl", line)
    with pytest.raises(SglxError, match=f"key '{key}' is missing"):
        read_result(path, settings=SAMPLE_SETTINGS)


def test_a_run_without_slos_reads_no_goodput(tmp_path: Path) -> None:
    line = {
        k: v for k, v in _sample_line().items() if not k.startswith(("goodput", "slo", "request_g"))
    }
    settings = dataclasses.replace(SAMPLE_SETTINGS, goodput_ttft_ms=None, goodput_tpot_ms=None)
    result = read_result(_write(tmp_path / "run.jsonl", line), settings=settings)
    assert result.slo_attainment is None
    assert result.to_json()["goodput"] is None


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "holds no line"),
        (b"\n  \n", "holds no line"),
        (b"{not json\n", "not valid JSON"),
        (b"[1, 2]\n", "the last line is list, not an object"),
        (b'{"a": 1, "a": 2}\n', "repeats the key"),
        (b"\xff\xfe\n", "not UTF-8"),
    ],
)
def test_a_damaged_file_is_refused(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "run.jsonl"
    path.write_bytes(content)
    with pytest.raises(SglxError, match=message):
        read_result(path, settings=SAMPLE_SETTINGS)


def test_an_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    with path.open("wb") as handle:
        handle.truncate(MAX_RESULT_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(SglxError, match="larger than 8 MiB") as caught:
        read_result(path, settings=SAMPLE_SETTINGS)
    assert caught.value.code == "too_large"
    with pytest.raises(SglxError, match="larger than 8 MiB"):
        parse_result(b" " * (MAX_RESULT_BYTES + 1), path=path, settings=SAMPLE_SETTINGS)


def test_a_fifo_is_refused_without_hanging(tmp_path: Path) -> None:
    path = tmp_path / "run.jsonl"
    os.mkfifo(path)
    with pytest.raises(SglxError, match="FIFO"):
        read_result(path, settings=SAMPLE_SETTINGS)


# -- the fleet --------------------------------------------------------------------------------


def test_a_fleet_of_two_has_no_median_to_be_an_outlier_of_and_says_so() -> None:
    """Issue 37: with two hosts the "median" is their mean, so one fast host made the other an
    outlier (a healthy host measured while its neighbour was busy was rolled back)."""
    verdicts = fleet_outliers({"host-a": _result(100.0), "host-b": _result(20.0)})
    assert {v.outcome for v in verdicts.values()} == {"skipped"}
    assert verdicts["host-b"].message == (
        "host-b: fleet all has 2 hosts; below 3 there is no median to be an outlier of: judged "
        "by the floors only (set floors to check a small fleet's speed)"
    )


def test_a_fleet_of_two_is_judged_by_its_floors() -> None:
    report = judge(
        {"host-a": _result(100.0), "host-b": _result(20.0)},
        floors=Floors(min_output_tok_s=50.0),
    )
    assert [v.host for v in report.verdicts if not v.passed] == ["host-b"]
    assert all(v.median_output_tok_s is None for v in report.verdicts)
    (finding,) = report.findings()
    assert finding.code == "speed_min_output_tok_s"


def test_a_half_speed_host_is_flagged_in_a_fleet_of_three() -> None:
    verdicts = fleet_outliers(
        {"host-a": _result(85.9), "host-b": _result(41.2), "host-c": _result(88.0)}
    )
    assert [k for k, v in verdicts.items() if v.outcome == "failed"] == ["host-b"]
    assert verdicts["host-b"].message == (
        "host-b: 41.2 output tok/s is 0.48 of the fleet median 85.9 (fraction 0.7): an outlier"
    )


def test_in_a_fleet_of_five_the_median_ignores_a_fast_host_and_the_slow_one() -> None:
    speeds = {"h1": 100.0, "h2": 98.0, "h3": 102.0, "h4": 250.0, "h5": 69.0}
    verdicts = fleet_outliers({host: _result(s) for host, s in speeds.items()})
    assert [k for k, v in verdicts.items() if v.outcome == "failed"] == ["h5"]  # 69 / 100
    assert "of the fleet median 100.0" in verdicts["h4"].message  # fast is never an outlier


def test_the_fraction_is_settable_and_checked() -> None:
    results = {"h1": _result(100.0), "h2": _result(100.0), "h3": _result(85.0)}
    assert fleet_outliers(results)["h3"].outcome == "passed"
    assert fleet_outliers(results, fraction=0.9)["h3"].outcome == "failed"
    assert "(fraction 0.9)" in fleet_outliers(results, fraction=0.9)["h3"].message
    for bad in (0, 1.5, math.nan, True):
        with pytest.raises(SglxError, match="fraction"):
            fleet_outliers(results, fraction=bad)


def test_a_fleet_of_one_host_has_no_outlier_check_and_says_so() -> None:
    report = judge({"host-a": _result(10.0)})
    (verdict,) = report.verdicts
    outlier = next(c for c in verdict.checks if c.name == "outlier")
    assert outlier.outcome == "skipped"
    assert "fleet all has 1 host; below 3 there is no median" in outlier.message
    assert verdict.passed and verdict.median_output_tok_s is None and verdict.ratio is None
    assert report.findings() == ()


def test_hosts_are_compared_only_within_their_bundle_and_profile() -> None:
    results = {
        "a1": _result(100.0),
        "a2": _result(50.0),
        "a3": _result(98.0),
        "b1": _result(50.0),
        "b2": _result(49.0),
    }
    fleet = {"a1": "sha256:aa/tp8", "a2": "sha256:aa/tp8", "a3": "sha256:aa/tp8"}
    fleet |= {"b1": "sha256:aa/tp4", "b2": "sha256:aa/tp4"}
    verdicts = fleet_outliers(results, fleet=fleet)
    assert [k for k, v in verdicts.items() if v.outcome == "failed"] == ["a2"]
    with pytest.raises(SglxError, match="host b2 has no fleet key"):
        fleet_outliers(results, fleet={k: v for k, v in fleet.items() if k != "b2"})


def test_hosts_of_one_fleet_must_have_run_the_same_benchmark() -> None:
    other = dataclasses.replace(SAMPLE_SETTINGS, concurrency=4)
    with pytest.raises(SglxError, match="ran different benchmarks"):
        fleet_outliers({"a": _result(1.0), "b": _result(1.0, settings=other)})


def test_a_fleet_that_served_nothing_fails_every_host() -> None:
    verdicts = fleet_outliers({"a": _result(0.0), "b": _result(0.0), "c": _result(0.0)})
    assert all(
        v.outcome == "failed" and "no host of it served" in v.message for v in verdicts.values()
    )


def test_no_results_is_a_usage_error() -> None:
    with pytest.raises(SglxError, match="no host results"):
        judge({})


# -- floors -----------------------------------------------------------------------------------

CVS_70B = Floors(min_output_tok_s=900, max_tpot_mean_ms=150, min_goodput=0.99)


def test_floors_fail_the_host_that_misses_them_alone() -> None:
    result = _result(812.0, tpot_ms_mean=171.3, ttft_ms_p99=500.0)
    floors = Floors(
        min_output_tok_s=900, max_tpot_mean_ms=150, max_ttft_p99_ms=1000, min_goodput=0.99
    )
    report = judge({"host-b": result}, floors=floors)
    outcomes = {c.name: (c.outcome, c.message) for c in report.verdicts[0].checks}
    assert outcomes["min_output_tok_s"] == (
        "failed",
        "host-b: 812.0 output tok/s is below the floor 900",
    )
    assert outcomes["max_tpot_mean_ms"] == (
        "failed",
        "host-b: mean TPOT 171.3 ms is above the ceiling 150 ms",
    )
    assert outcomes["max_ttft_p99_ms"][0] == "passed"
    assert outcomes["min_goodput"] == (
        "failed",
        "host-b: goodput 0.938 (requests within ttft:400 tpot:40 ms) is below the floor 0.99",
    )
    assert {f.code for f in report.findings()} == {
        "speed_min_output_tok_s",
        "speed_max_tpot_mean_ms",
        "speed_min_goodput",
    }


def test_a_goodput_floor_without_measured_goodput_fails() -> None:
    result = _result(1000.0, slo_attainment=None, request_goodput=None)
    report = judge({"h": result}, floors=Floors(min_goodput=0.99))
    check = report.verdicts[0].checks[-1]
    assert (check.name, check.outcome) == ("min_goodput", "failed")
    assert "no goodput was measured" in check.message


def test_floors_per_fleet_apply_only_to_their_fleet() -> None:
    results = {"a": _result(950.0, slo_attainment=1.0), "b": _result(100.0)}
    report = judge(results, fleet={"a": "tp8", "b": "tp1"}, floors={"tp8": CVS_70B})
    assert report.passed
    assert [c.name for c in report.verdicts[1].checks] == ["completed", "outlier"]


@pytest.mark.parametrize(
    "changes",
    [{"min_output_tok_s": 0}, {"max_tpot_mean_ms": math.inf}, {"min_goodput": 1.2}],
)
def test_floors_refuse_nonsense(changes: dict[str, float]) -> None:
    with pytest.raises(SglxError, match="speed floors"):
        Floors(**changes)


# -- the report and JUnit ---------------------------------------------------------------------


def _three_hosts() -> dict[str, BenchResult]:
    return {"host-a": _result(85.9), "host-b": _result(41.2), "host-c": _result(88.0)}


def test_the_json_report_is_one_document_across_hosts(tmp_path: Path) -> None:
    report = judge(_three_hosts(), floors=Floors(max_ttft_p99_ms=2000))
    path = tmp_path / "speed.json"
    write_report(report, path)
    document = json.loads(path.read_text())
    assert document["sglx_gate_speed_version"] == "1"
    assert document["status"] == "findings"
    assert document["fraction"] == DEFAULT_FRACTION
    assert document["fleets"] == [
        {
            "fleet": "all",
            "hosts": ["host-a", "host-b", "host-c"],
            "median_output_tok_s": 85.9,
            "floors": {
                "min_output_tok_s": None,
                "max_tpot_mean_ms": None,
                "max_ttft_p99_ms": 2000,
                "min_goodput": None,
            },
        }
    ]
    hosts = {h["host"]: h for h in document["hosts"]}
    assert hosts["host-b"]["verdict"] == "failed"
    assert hosts["host-b"]["ratio_to_median"] == pytest.approx(41.2 / 85.9)
    assert hosts["host-a"]["numbers"]["ttft_ms"]["p99"] == _sample_line()["p99_ttft_ms"]
    assert hosts["host-a"]["settings"]["concurrency"] == 8
    assert [f["message"] for f in document["findings"]] == [
        "host-b: 41.2 output tok/s is 0.48 of the fleet median 85.9 (fraction 0.7): an outlier"
    ]


def test_the_table_has_a_row_per_host() -> None:
    text = judge(_three_hosts()).table().render()
    lines = text.splitlines()
    assert "0.7 x its fleet's median" in lines[0]
    assert len(lines) == 3 + 3
    row_b = next(line for line in lines if line.startswith("host-b"))
    assert "41.2" in row_b and "0.48" in row_b and "FAILED" in row_b
    assert judge(_three_hosts()).result(("gate", "speed")).exit_code == 1


def test_junit_per_host_is_well_formed_and_reads_back(tmp_path: Path) -> None:
    report = judge(_three_hosts(), floors=Floors(min_output_tok_s=50))
    paths = write_junit(report, tmp_path / "junit")
    assert [p.name for p in paths] == ["speed-host-a.xml", "speed-host-b.xml", "speed-host-c.xml"]
    root = ET.parse(paths[1]).getroot()
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("hostname")) == (
        "3",
        "2",
        "host-b",
    )
    failures = {case.get("name"): case.find("failure") for case in suite.iter("testcase")}
    outlier = failures["outlier[host-b]"]
    assert outlier is not None
    assert outlier.get("message", "").startswith(
        "host-b: 41.2 output tok/s is 0.48 of the fleet median 85.9 (fraction 0.7): an outlier."
        " Fix: look at the host itself"
    )
    assert failures["completed[host-b]"] is None
    # the host checks' reader takes it as it takes theirs
    checks = {c.check: c for c in read_report(paths[1])}
    assert checks["outlier"].outcome == "failed"
    assert checks["outlier"].fix.startswith("look at the host itself")
    assert checks["completed"].outcome == "passed"
    assert checks["completed"].message == "host-b: 32 of 32 requests completed"


def test_junit_marks_the_one_host_outlier_check_skipped(tmp_path: Path) -> None:
    xml = judge({"solo": _result(5.0)}).junit("solo")
    suite = ET.fromstring(xml).find("testsuite")
    assert suite is not None and suite.get("skipped") == "1"
    path = tmp_path / "solo.xml"
    path.write_bytes(xml)
    (skipped,) = [c for c in read_report(path) if c.outcome == "skipped"]
    assert skipped.check == "outlier"
    with pytest.raises(SglxError, match="no result for host 'other'"):
        judge({"solo": _result(5.0)}).junit("other")


def test_junit_file_names_are_safe_and_distinct(tmp_path: Path) -> None:
    assert junit_name("gpu-01.dc1/rack 4") == "speed-gpu-01.dc1_rack_4.xml"
    report = judge({"a/b": _result(1.0), "a_b": _result(1.0)})
    with pytest.raises(SglxError, match="would share the JUnit file"):
        write_junit(report, tmp_path)
    assert list(tmp_path.iterdir()) == []

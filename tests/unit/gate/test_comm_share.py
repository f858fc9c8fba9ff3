"""The communication share of a profiled server (sglx_core/comm_share.py, `sglx trace
comm-share`; seed S0-36). Traces in the Chrome-trace format torch's profiler writes: a device
trace whose kernels include RCCL's and sglang's custom all-reduce, on two streams; a host trace
of gloo collectives; and the bounds on what is read. The real gloo trace of a serving group is
read in tests/integration/test_serving_group_cpu.py."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from sglx_core import comm_share
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile

RULES = load_profile("gfx942").gate.comm_share


def kernel(name: str, ts: float, dur: float, stream: int = 7) -> dict[str, Any]:
    return {"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": stream, "ts": ts,
            "dur": dur, "args": {"stream": stream}}  # fmt: skip


def op(name: str, ts: float, dur: float, cat: str = "cpu_op") -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": 1, "ts": ts, "dur": dur}


def write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def test_a_device_trace_counts_collective_kernels_over_busy_kernel_time(tmp_path: Path) -> None:
    """Two streams: a GEMM from 0 to 600 us, RCCL's all-reduce from 500 to 900 on another
    stream (overlapping the GEMM by 100), sglang's custom all-reduce from 1000 to 1100; host ops
    around them do not count on a device trace."""
    events = [
        kernel("Cijk_Alik_Bljk_BBS_BH_MT256x256x64", 0, 600),
        kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 500, 400, stream=9),
        kernel("cross_device_reduce_1stage<__hip_bfloat16, 8>", 1000, 100),
        op("aten::mm", 0, 5000),
        op("c10d::allreduce_", 0, 5000),
    ]
    share = comm_share.measure(write(tmp_path / "TP-0.trace.json.gz", events), RULES)
    assert share.side == "device"
    assert (share.comm_us, share.busy_us) == (500.0, 1000.0)  # 400 + 100 over 0-900 and 1000-1100
    assert share.share == 0.5
    assert share.top[0] == ("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", 400.0)


def test_a_host_trace_counts_an_op_and_the_annotation_inside_it_once(tmp_path: Path) -> None:
    events = [
        op("aten::linear", 0, 700),
        op("c10d::allreduce_", 700, 300),
        op("gloo:all_reduce", 710, 280, cat="user_annotation"),
        op("aten::linear", 1000, 1000),
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": 0, "dur": 99999},
        {"ph": "i", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 5},  # not a span
    ]
    share = comm_share.measure(write(tmp_path / "t.json.gz", events), RULES)
    assert (share.side, share.comm_us, share.busy_us) == ("host", 300.0, 2000.0)
    assert share.share == 0.15


def test_the_cli_names_a_rank_above_the_threshold_with_the_fixes(
    tmp_path: Path, sglx_json: Any
) -> None:
    busy = write(tmp_path / "TP-0.trace.json.gz",
                 [kernel("gemm", 0, 100), kernel("ncclDevKernel_AllReduce", 100, 300)])  # fmt: skip
    calm = write(tmp_path / "TP-1.trace.json.gz",
                 [kernel("gemm", 0, 900), kernel("ncclDevKernel_AllReduce", 900, 100)])  # fmt: skip
    code, out = sglx_json("trace", "comm-share", str(busy), str(calm), "--arch", "gfx942")
    assert code == 1
    (finding,) = out["findings"]
    assert finding["message"].startswith(f"{busy}: collectives take 75% of the device's busy")
    assert "fewer tensor-parallel ranks per replica" in finding["hint"]
    assert [t["share"] for t in out["data"]["traces"]] == [0.75, 0.1]
    code, out = sglx_json("trace", "comm-share", str(calm), "--arch", "gfx942")
    assert code == 0


def test_the_share_lands_as_series_for_the_textfile_collector(
    tmp_path: Path, sglx_json: Any
) -> None:
    """`--textfile`: the highest rank's share, the profile's bound and when, parsed back by the
    Prometheus client's own parser, in a file the node exporter's user can read; a path that is
    no regular file is refused before anything is read."""
    from prometheus_client.parser import text_string_to_metric_families

    busy = write(tmp_path / "TP-0.trace.json.gz",
                 [kernel("gemm", 0, 100), kernel("ncclDevKernel_AllReduce", 100, 300)])  # fmt: skip
    calm = write(tmp_path / "TP-1.trace.json.gz",
                 [kernel("gemm", 0, 900), kernel("ncclDevKernel_AllReduce", 900, 100)])  # fmt: skip
    out = tmp_path / "node-exporter" / "sglx_comm_share.prom"
    code, _ = sglx_json("trace", "comm-share", str(busy), str(calm), "--arch", "gfx942",
                        "--textfile", str(out))  # fmt: skip
    assert code == 1  # the finding stands; the series say the same to Prometheus
    series = {
        sample.name: sample.value
        for family in text_string_to_metric_families(out.read_text())
        for sample in family.samples
    }
    assert series["sglx_comm_share_ratio"] == 0.75
    assert series["sglx_comm_share_max_ratio"] == RULES.max_share
    assert series["sglx_comm_share_measured_timestamp_seconds"] > 1.7e9
    assert out.stat().st_mode & 0o777 == 0o644
    (tmp_path / "folder").mkdir()
    code, said = sglx_json("trace", "comm-share", str(busy), "--arch", "gfx942",
                           "--textfile", str(tmp_path / "folder"))  # fmt: skip
    assert code == 2 and "--textfile" in said["errors"][0]["message"], said


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (b"\x1f\x8b" + b"\x00" * 20, "not a readable gzip file"),
        (json.dumps({"events": []}).encode(), "no traceEvents list"),
        (b"[1, 2", "is not valid JSON"),
        (gzip.compress(b" " * ((1 << 20) + 10)), "inflates to more than 1 MiB"),
    ],
)
def test_a_file_that_is_no_trace_is_refused_and_bounded(
    tmp_path: Path, content: bytes, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(comm_share, "MAX_TRACE_BYTES", 1 << 20)  # 512 MiB in use
    (tmp_path / "t").write_bytes(content)
    with pytest.raises(SglxError, match=said):
        comm_share.measure(tmp_path / "t", RULES)

"""The fallback profiler attributes op time to implementations and flags fallbacks over 5%."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from sglx_platform.profiling import FallbackProfiler, classify


def test_fallbacks_above_five_percent_of_op_time_are_flagged(tmp_path: Path) -> None:
    profiler = FallbackProfiler(tmp_path)
    profiler.record("RMSNorm", "triton", 0.90)
    profiler.record("SiluAndMul", "native", 0.08)  # 8% of op time: flagged
    profiler.record("GeluAndMul", "composite", 0.02)  # 2%: under the threshold
    profiler.record("RotaryEmbedding", "vendor", 0.001)
    rows = {(r.op, r.impl): r for r in profiler.rows()}
    assert rows[("SiluAndMul", "native")].flagged
    assert not rows[("GeluAndMul", "composite")].flagged
    assert not rows[("RMSNorm", "triton")].flagged  # not a fallback
    profiler.flush()
    (report,) = [json.loads(p.read_text()) for p in tmp_path.glob("fallbacks-*.json")]
    assert report["flagged"] == ["SiluAndMul:native"]
    assert "FALLBACK > 5%" in profiler.summary()


def test_calls_accumulate_per_op_and_implementation() -> None:
    profiler = FallbackProfiler()
    for _ in range(3):
        profiler.record("RMSNorm", "native", 0.01)
    (row,) = profiler.rows()
    assert (row.calls, round(row.seconds, 3), row.share) == (3, 0.03, 1.0)


def test_sglang_forwards_are_classified_by_their_method() -> None:
    class Op:
        def forward_native(self) -> None: ...
        def forward_triton(self) -> None: ...
        def forward_aiter(self) -> None: ...

    op = Op()
    assert classify(SimpleNamespace(_forward_method=op.forward_native)) == "native"
    assert classify(SimpleNamespace(_forward_method=op.forward_triton)) == "triton"
    assert classify(SimpleNamespace(_forward_method=op.forward_aiter)) == "vendor"


def test_the_reports_of_a_servers_processes_merge_into_one_table(tmp_path: Path) -> None:
    """What sglx-serve prints after `docker stop`: every process's report since the server
    started (an older report in the folder, from an earlier run, is left out)."""
    import os
    import time

    from sglx_platform.profiling import summary_of_reports

    stale = tmp_path / "fallbacks-1.json"
    stale.write_text(
        json.dumps({"ops": [{"op": "Old", "impl": "native", "calls": 9, "seconds": 9}]})
    )
    os.utime(stale, (time.time() - 3600, time.time() - 3600))
    started = time.time() - 1
    for pid, calls in ((2, 5), (3, 7)):
        (tmp_path / f"fallbacks-{pid}.json").write_text(
            json.dumps(
                {"ops": [{"op": "RMSNorm", "impl": "composite", "calls": calls, "seconds": 0.5}]}
            )
        )
    (tmp_path / "fallbacks-4.json").write_text("{not json")
    table = summary_of_reports(tmp_path, since=started)
    assert table is not None
    (row,) = [line for line in table.splitlines() if line.startswith("RMSNorm")]
    assert row.split()[:3] == ["RMSNorm", "composite", "12"]
    assert "Old" not in table
    assert summary_of_reports(tmp_path / "none", since=started) is None


def test_a_running_profiler_keeps_its_report_current(tmp_path: Path) -> None:
    """sglang ends its schedulers with SIGKILL: the report must not wait for an exit."""
    import threading
    import time

    from sglx_platform import profiling

    profiler = FallbackProfiler(tmp_path)
    profiler.record("RMSNorm", "native", 0.01)

    threading.Thread(target=profiling._flush_while_running, args=(profiler,), daemon=True).start()
    deadline = time.monotonic() + 10
    while not list(tmp_path.glob("fallbacks-*.json")) and time.monotonic() < deadline:
        time.sleep(0.1)
    (report,) = [json.loads(p.read_text()) for p in tmp_path.glob("fallbacks-*.json")]
    assert report["ops"][0]["calls"] == 1

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

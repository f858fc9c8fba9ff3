"""Property-based tests of every reader of tool output and gate record, and of the gate's entry
points (issue 37): on any input, random or a real sample damaged at random, the outcome is a
clean refusal naming the input (an SglxError with a hint) or success; never another exception,
a traceback, or an "unexpected ... bug in sglx" from an entry point.

Hypothesis draws the inputs (no example database is kept: `database=None`), each test bounded
in examples so the whole module runs in well under a minute on two cores.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglx.gate.tools import amd_smi, rccl_tests, rvs, xpu_smi
from sglx_core.errors import SglxError
from sglx_core.gate.bench import BenchSettings, parse_result
from sglx_core.gate.golden import parse_golden
from sglx_core.gate.speed_record import parse_record

DATA = Path(__file__).resolve().parents[1] / "data"
SETTINGS = BenchSettings(
    concurrency=8, num_prompts=32, input_len=128, output_len=64,
    goodput_ttft_ms=400, goodput_tpot_ms=40,
)  # fmt: skip
BENCH_LINE = (DATA / "gate" / "bench_serving-0.5.23.jsonl").read_text().splitlines()[-1]

# Each reader with the real samples its damage starts from.
READERS: dict[str, tuple[Callable[[str], Any], list[Path]]] = {
    "amd-smi metric --json": (
        amd_smi.parse_metric_json,
        sorted((DATA / "vendor" / "amd_smi").glob("constructed_metric*.json")),
    ),
    "amd-smi monitor": (
        amd_smi.parse_monitor,
        sorted((DATA / "vendor" / "amd_smi").glob("monitor_*.txt")),
    ),
    "amd-smi partition --json": (
        amd_smi.parse_partition_json,
        sorted((DATA / "vendor" / "amd_smi").glob("constructed_*partition*.json")),
    ),
    "amd-smi partition": (
        amd_smi.parse_partition_text,
        sorted((DATA / "vendor" / "amd_smi").glob("partition_current_*.txt")),
    ),
    "xpu-smi -q": (
        xpu_smi.parse_query,
        [DATA / "vendor" / "xpu_smi" / "query_p800_pcie_zstack.txt"],
    ),
    "xpu-smi table": (
        xpu_smi.parse_table,
        [DATA / "vendor" / "xpu_smi" / "table_p800_oam_flagos.txt"],
    ),
    "all_reduce_perf": (
        rccl_tests.parse_all_reduce,
        sorted((DATA / "vendor" / "rccl_tests").glob("*.txt")),
    ),
    "rvs": (rvs.parse_rvs, sorted((DATA / "vendor" / "rvs").glob("*.txt"))),
    "bench_serving result": (
        lambda text: parse_result(text.encode(), path=Path("bench.jsonl"), settings=SETTINGS),
        [DATA / "gate" / "bench_serving-0.5.23.jsonl"],
    ),
    "speed record": (
        lambda text: parse_record("host-a", text),
        [],
    ),
    "golden file": (
        lambda text: parse_golden(json.loads(text)) if text.lstrip().startswith("{") else None,
        [],
    ),
}
HOSTILE_WORDS = [
    "N/A", "\x00", "\n", "\x1b[2J", "²", "٣", "1.2.3", "-1", "nan", "inf", "1e400",
    "9" * 5000, "{", "}", "[", "]", '"', ":", ",", "# Out of bounds values : 0 OK",
    "GPU", "XPU 0000:01:00.0", "PASS", "FAILED", "%", "C", "MiB", "\t", " " * 200,
]  # fmt: skip


def _damaged(samples: list[Path]) -> st.SearchStrategy[str]:
    """A sample with a random slice replaced by hostile words or random text."""
    texts = [path.read_text(encoding="utf-8") for path in samples] or ["{}"]

    @st.composite
    def damage(draw: st.DrawFn) -> str:
        text = draw(st.sampled_from(texts))
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 200)))
        middle = draw(
            st.lists(st.sampled_from(HOSTILE_WORDS) | st.text(max_size=20), max_size=5).map("".join)
        )
        return text[:start] + middle + text[end:]

    return damage()


def _record_text() -> st.SearchStrategy[str]:
    base = {
        "version": 1,
        "host": "host-a",
        "fleet": "f",
        "measured_at": "2026-12-04T00:00:00+00:00",
    }
    values = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
        st.sampled_from([BENCH_LINE, BENCH_LINE[:100], "9" * 5000]),
    )  # fmt: skip
    return st.dictionaries(
        st.sampled_from(["version", "host", "fleet", "measured_at", "line", "extra"]), values
    ).map(lambda extra: json.dumps({**base, "line": BENCH_LINE, **extra}))


def _outcome(reader: Callable[[str], Any], text: str) -> None:
    try:
        reader(text)
    except SglxError as error:
        assert error.hint, error.message
    except json.JSONDecodeError:
        pass  # the golden reader's own json.loads, standing for the bounded reader above it


@pytest.mark.parametrize("name", sorted(READERS))
def test_every_reader_refuses_damaged_input_cleanly(name: str) -> None:
    reader, samples = READERS[name]
    strategy = (
        _record_text() if name == "speed record" else _damaged(samples) | st.text(max_size=300)
    )

    @settings(max_examples=150, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
    @given(strategy)
    def check(text: str) -> None:
        _outcome(reader, text)

    check()


# -- the gate's entry points ---------------------------------------------------------------------


def _envelope(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    out = capsys.readouterr().out
    document: dict[str, Any] = json.loads(out)
    return document


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(
    peers=st.binary(max_size=400) | _record_text().map(lambda r: json.dumps({"h": r}).encode()),
    floors=st.sampled_from(
        [
            "{}",
            "[]",
            '{"min_output_tok_s": 1e400}',
            '{"x": 1}',
            "9" * 5000,
            '{"min_goodput": 2}',
            '{"min_output_tok_s": -1}',
        ]
    ),
    # the gate, and its confirmation beside a peer (issue 37): the same records, read alike
    mode=st.sampled_from([[], ["--confirm-with", "g"], ["--confirm-with", "h"]]),
)
def test_the_speed_gate_never_fails_unexpectedly(
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    peers: bytes,
    floors: str,
    mode: list[str],
) -> None:
    from sglx_platform import speed_gate

    path = tmp_path_factory.mktemp("peers") / "peers.json"
    path.write_bytes(peers)
    argv = ["--url", "http://127.0.0.1:1", "--host", "h", "--fleet", "f", "--json",
            "--peers", str(path), "--floors", floors, "--timeout", "1", *mode]  # fmt: skip
    code = speed_gate.main(argv)
    envelope = _envelope(capsys)
    assert code in ((0, 1, 2) if mode else (1, 2)), envelope
    codes = [e["code"] for e in envelope["errors"]]
    assert "internal_error" not in codes, envelope


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(golden=st.binary(max_size=400) | _damaged([]).map(str.encode))
def test_the_golden_replay_never_fails_unexpectedly(
    tmp_path_factory: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str], golden: bytes
) -> None:
    from sglx_platform import golden_replay

    path = tmp_path_factory.mktemp("golden") / "golden.json"
    path.write_bytes(golden)
    argv = ["--golden", str(path), "--url", "http://127.0.0.1:1", "--json", "--timeout", "1"]
    code = golden_replay.main(argv)
    envelope = _envelope(capsys)
    assert code == 2, envelope
    assert "internal_error" not in [e["code"] for e in envelope["errors"]], envelope


def test_an_entry_point_turns_an_unexpected_exception_into_bug_in_sglx_exit_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglx_platform import speed_gate

    def broken(**_: Any) -> Any:
        raise KeyError("boom")

    monkeypatch.setattr(speed_gate, "gate", broken)
    monkeypatch.delenv("SGLX_DEBUG", raising=False)
    code = speed_gate.main(["--url", "http://127.0.0.1:1", "--host", "h", "--fleet", "f", "--json"])
    envelope = _envelope(capsys)
    assert code == 2
    (error,) = envelope["errors"]
    assert error["code"] == "internal_error" and "bug in sglx" in error["hint"]
    assert error["message"] == "unexpected KeyError: 'boom'"
    assert os.environ.get("SGLX_DEBUG") is None


# -- a model folder's config.json and the files it must carry (issue 40) ------------------------

GPT_OSS_CONFIG = json.dumps(
    {"architectures": ["GptOssForCausalLM"], "text_config": {"layer_types": ["sliding_attention"]}}
)


@settings(max_examples=80, deadline=None, database=None)
@given(
    config=st.text(max_size=300)
    | st.builds(
        lambda cut, junk: GPT_OSS_CONFIG[:cut] + junk,
        st.integers(0, len(GPT_OSS_CONFIG)),
        st.text(max_size=20),
    ),
    asset=st.sampled_from(["missing", "folder", "link", "file"]),
    content=st.binary(max_size=200),
)
def test_a_model_folder_is_read_cleanly_whatever_it_holds(
    config: str, asset: str, content: bytes
) -> None:
    """The plugin's config.json reader (rules' model facts) and the model-asset check never raise
    on a folder's contents: facts are a dict, problems a list of lines."""
    import tempfile

    from sglx_core import model_assets
    from sglx_core.profile import load_profile
    from sglx_platform.model_config import model_facts, read_config

    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        (folder / "config.json").write_text(config)
        target = folder / "o200k_base.tiktoken"
        if asset == "folder":
            target.mkdir()
        elif asset == "link":
            target.symlink_to("/dev/zero")
        elif asset == "file":
            target.write_bytes(content)
        assert isinstance(model_facts(str(folder)), dict)
        found = model_assets.problems(load_profile("cpu"), read_config(str(folder)), folder)
        assert all(isinstance(line, str) for line in found)

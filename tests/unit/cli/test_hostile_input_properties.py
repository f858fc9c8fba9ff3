"""Property-based tests of every reader of tool output and gate record, of the gate's entry
points (issue 37), of the supply-chain readers (VEX, OSV, SBOM; issue 42) and of the tuned
tables and profiler traces a host hands back (issue 40 items 9 and S0-36): on any input,
random or a real sample damaged at random, the outcome is a clean refusal naming the input (an
SglxError with a hint) or success; never another exception, a traceback, or an "unexpected ...
bug in sglx" from an entry point.

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
from helpers import tuned_files
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sglx_core.errors import SglxError
from sglx_core.gate.bench import BenchSettings, parse_result
from sglx_core.gate.golden import parse_golden
from sglx_core.gate.speed_record import parse_record
from sglx_core.gate.tools import amd_smi, amd_smi_partition, rccl_tests, rvs, xpu_smi

DATA = Path(__file__).resolve().parents[2] / "data"
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
        amd_smi_partition.parse_partition_json,
        sorted((DATA / "vendor" / "amd_smi").glob("constructed_*partition*.json")),
    ),
    "amd-smi partition": (
        amd_smi_partition.parse_partition_text,
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
    return _damaged_texts([path.read_text(encoding="utf-8") for path in samples])


def _damaged_texts(texts: list[str]) -> st.SearchStrategy[str]:
    texts = texts or ["{}"]

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
    from sglx_runtime import speed_gate

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
    from sglx_runtime import golden_replay

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
    from sglx_runtime import speed_gate

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


# -- the supply-chain readers: VEX, OSV advisories, SBOMs (issue 42) -----------------------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 10**6) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=15), inner,
                                                                max_size=5),
    max_leaves=25,
)  # fmt: skip
# Shapes near the real documents, so the draws reach past the first type check.
_VEX = st.fixed_dictionaries({"statements": st.lists(st.fixed_dictionaries({
    "vulnerability": _JSON | st.fixed_dictionaries({"name": _JSON}), "products": _JSON,
    "status": st.sampled_from(["not_affected", "fixed", "affected", 3]) | _JSON,
    "justification": _JSON}), max_size=3)}) | st.fixed_dictionaries(
    {"vulnerabilities": st.lists(st.fixed_dictionaries(
        {"id": _JSON, "analysis": _JSON, "affects": _JSON}), max_size=3)})  # fmt: skip
_ADVISORY = st.fixed_dictionaries({
    "id": st.text(min_size=1, max_size=12), "affected": st.lists(st.fixed_dictionaries({
        "package": st.fixed_dictionaries({"ecosystem": st.sampled_from(
            ["PyPI", "Debian:12", "Debian", "npm"]) | _JSON, "name": st.sampled_from(
            ["jinja2", "glibc"]) | _JSON}),
        "ranges": st.lists(st.fixed_dictionaries({
            "type": st.sampled_from(["ECOSYSTEM", "SEMVER", "GIT"]) | _JSON,
            "events": st.lists(st.dictionaries(st.sampled_from(
                ["introduced", "fixed", "last_affected", "limit"]),
                st.sampled_from(["0", "3.1.2", "1:2.36-9", "x.y", ""]) | _JSON,
                max_size=2), max_size=3)}), max_size=2),
        "versions": _JSON}), max_size=2),
    "severity": _JSON, "database_specific": _JSON, "aliases": _JSON})  # fmt: skip
_SBOM = st.fixed_dictionaries({"bomFormat": st.just("CycloneDX"), "specVersion": st.just("1.6"),
    "components": st.lists(st.fixed_dictionaries({
        "type": st.sampled_from(["library", "file", "operating-system"]) | _JSON,
        "name": _JSON, "version": _JSON,
        "purl": st.sampled_from(["pkg:pypi/jinja2@3.1.2", "pkg:deb/debian/libc6@2.36-9",
                                 "pkg:pypi/", "pkg:deb/debian/@"]) | _JSON,
        "properties": _JSON}), max_size=4),
    "metadata": _JSON})  # fmt: skip


def _clean(call: Callable[[], Any]) -> None:
    """`call` succeeds or refuses with an SglxError: nothing else escapes."""
    try:
        call()
    except SglxError as exc:
        assert exc.message and exc.hint, exc


@settings(max_examples=80, deadline=None, database=None)
@given(document=_VEX | _JSON)
# CI found it: a status that is a list was looked up in the set of statuses (TypeError)
@example(document={"statements": [{"vulnerability": "", "products": None, "status": []}]})
def test_a_vex_document_is_read_or_refused_cleanly(document: Any) -> None:
    import tempfile

    from sglx.audit import vex

    with tempfile.TemporaryDirectory() as name:
        path = Path(name, "vex.json")
        path.write_text(json.dumps(document))
        _clean(lambda: vex.read(path))


@settings(max_examples=80, deadline=None, database=None)
@given(advisories=st.lists(_ADVISORY | _JSON, min_size=1, max_size=3),
       sbom=_SBOM | _JSON)  # fmt: skip
def test_an_audit_of_any_sbom_against_any_advisories_ends_cleanly(
    advisories: list[Any], sbom: Any
) -> None:
    """The SBOM's components (components_of), the OSV loader and the matching, end to end."""
    import tempfile

    from sglx.audit.report import audit
    from sglx.progress import Progress

    with tempfile.TemporaryDirectory() as name:
        db = Path(name, "osv")
        db.mkdir()
        for n, advisory in enumerate(advisories):
            (db / f"a{n}.json").write_text(json.dumps(advisory))
        _clean(lambda: audit(json.dumps(sbom), "sbom.cdx.json", db, [], "high",
                             Progress("t", quiet=True)))  # fmt: skip


@settings(max_examples=60, deadline=None, database=None)
@given(sbom=_SBOM | _JSON)
def test_an_sbom_is_summed_up_and_converted_or_refused_cleanly(sbom: Any) -> None:
    """`bundle inspect`'s summary never fails; the SPDX conversion refuses what it cannot read."""
    from sglx.sbom.document import summary
    from sglx.sbom.spdx import from_cyclonedx

    summary(json.dumps(sbom))
    _clean(lambda: from_cyclonedx(json.dumps(sbom), where="sbom.cdx.json"))


# -- tuned tables, a tuned set's manifest, profiler traces (issue 40: item 9, S0-36) -------------

TUNED_SAMPLES = {
    "bf16_tuned_gemm.csv": tuned_files.table(
        tuned_files.BF16_HEADER, tuned_files.BF16_ROW, ("gfx942", 304), ("gfx950", 256)
    ),
    "a8w8_blockscale_tuned_gemm.csv": tuned_files.table(
        tuned_files.BLOCKSCALE_HEADER, tuned_files.BLOCKSCALE_ROW, ("", 304)
    ),
    "tunableop_results0.csv": tuned_files.TUNABLEOP,
    "hipblaslt_tuning.txt": tuned_files.HIPBLASLT,
}


@settings(max_examples=150, deadline=None, database=None)
@given(name=st.sampled_from(sorted(TUNED_SAMPLES)), data=st.data())
def test_a_tuned_table_is_checked_or_refused_cleanly(name: str, data: st.DataObject) -> None:
    """Each library's file, damaged at random or replaced by random text: a record whose facts
    are lists of strings, or a refusal naming the file."""
    import tempfile

    from sglx_core import tuned
    from sglx_core.profile import load_profile

    text = data.draw(_damaged_texts([TUNED_SAMPLES[name]]) | st.text(max_size=300))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, name)
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
        try:
            record = tuned.check_file(path, load_profile("gfx942"))
        except SglxError as exc:
            assert exc.hint and str(path) in exc.message, exc
        else:
            assert all(isinstance(v, str) for values in record.facts.values() for v in values)


@pytest.fixture(scope="module")
def tuned_manifest(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The manifest of a set captured from a tuning run, as sglx wrote it."""
    from sglx_core import tuned
    from sglx_core.profile import load_profile

    root = tmp_path_factory.mktemp("tuned")
    run = tuned_files.write_tuning_run(root / "run")
    tuned.capture(
        run, root / "set", load_profile("gfx942"), captured_from=str(run), host="h", sglx="t"
    )
    return (root / "set" / tuned.MANIFEST).read_text()


@settings(max_examples=100, deadline=None, database=None)
@given(data=st.data())
def test_a_tuned_set_manifest_is_read_or_refused_cleanly(
    tuned_manifest: str, data: st.DataObject
) -> None:
    import tempfile

    from sglx_core import tuned

    text = data.draw(_damaged_texts([tuned_manifest]) | _JSON.map(json.dumps))
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, tuned.MANIFEST).write_text(text, errors="surrogateescape")
        _clean(lambda: tuned.read_manifest(Path(folder)))


_TRACE_NUMBER = (
    st.integers(-(10**39), 10**39) | st.floats() | st.booleans() | st.none() | st.text(max_size=5)
)
_TRACE_EVENT = st.fixed_dictionaries(
    {
        "ph": st.sampled_from(["X", "B", "i"]) | _JSON,
        "cat": st.sampled_from(["kernel", "cpu_op", "user_annotation", "gpu_memcpy"]) | _JSON,
        "name": st.sampled_from(
            ["ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "gloo:all_reduce", "aten::mm"]
        )
        | _JSON,
        "ts": _TRACE_NUMBER,
        "dur": _TRACE_NUMBER,
    }
)


@settings(max_examples=100, deadline=None, database=None)
@given(
    trace=st.fixed_dictionaries({"traceEvents": st.lists(_TRACE_EVENT | _JSON, max_size=8)})
    | _JSON,
    packing=st.sampled_from(["plain", "gzip", "cut gzip"]),
)
def test_a_profiler_trace_is_measured_or_refused_cleanly(trace: Any, packing: str) -> None:
    """Any event shape and number (huge, NaN, negative, of the wrong type), plain or gzip or a
    cut gzip stream: a share between 0 and 1, or a refusal naming the trace."""
    import gzip
    import tempfile

    from sglx_core import comm_share
    from sglx_core.profile import load_profile

    raw = json.dumps(trace).encode()
    if packing != "plain":
        raw = gzip.compress(raw)
        raw = raw[: len(raw) // 2] if packing == "cut gzip" else raw
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "TP-0.trace.json.gz")
        path.write_bytes(raw)
        try:
            share = comm_share.measure(path, load_profile("gfx942").gate.comm_share)
        except SglxError as exc:
            assert exc.hint and str(path) in exc.message, exc
        else:
            assert 0.0 <= share.share <= 1.0, share
            json.dumps(share.to_json(), allow_nan=False)

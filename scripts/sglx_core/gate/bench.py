"""sglang's own serving benchmark, run against one server, and its result read back.

The gate writes no load generator of its own. It runs sglang's `bench_serving` (sglang 0.5.23:
`sglang/benchmark/serving.py`; `sglang.bench_serving` is its deprecated alias, which warns on
every start) from the image's venv against a host's server, or a serving group's rank 0, at the
serving profile's concurrency. The dataset is `random-ids`: random token ids of the asked
lengths, drawn from the tokenizer's vocabulary alone. Its sibling `random` first samples
ShareGPT text, a download an air-gapped site cannot make.

Every host of a fleet runs the same work: fixed lengths (range ratio 1.0 by default: sglang
draws each length from [len x ratio, len]), one seed, one prompt count. `--model` is the local
tokenizer folder too: left out, bench_serving asks the server for its model name and loads that
name's tokenizer config, which reaches for the Hugging Face hub on a host that has none.

bench_serving appends one JSON line per run to `--output-file` (the `result` dict of
`benchmark()`, lines ~1855-1911 of 0.5.23, plus `GoodputMetrics` from
`sglang/benchmark/goodput.py` when `--goodput` is given). That file is tool output: `read_result`
reads it bounded as a regular file, takes the last line, checks that the line is this run's
(dataset, concurrency, lengths, SLOs) and that every number the gate reads is finite, each
error naming the key. The request count is not in the line: it comes from the settings.

Stdlib only: the host tool, the host checks and the plugin all import this.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.untrusted import parse_json, read_bounded

BENCH_MODULE = "sglang.benchmark.serving"
"""What `python -m` runs (sglang 0.5.23; `sglang.bench_serving` is the deprecated alias)."""
DATASET = "random-ids"
BACKEND = "sglang"
MAX_RESULT_BYTES = 8 << 20
"""A result line is a few KiB (most of it the server's /server_info); the cap leaves room for
many appended runs, and refuses a file that is not bench_serving's."""

_SETTINGS_HINT = "set the gate's benchmark settings (concurrency, prompts, lengths, SLOs) anew"
_RERUN_HINT = (
    "bench_serving appends one line per run: give each run a fresh --output-file and run it again"
)


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SglxError(
            f"benchmark settings: {name} is {value!r}; it must be a whole number of at least 1",
            hint=_SETTINGS_HINT,
            code="usage",
        )


def _positive_ms(name: str, value: object) -> None:
    if value is None:
        return
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise SglxError(
            f"benchmark settings: {name} is {value!r}; it must be a finite number of "
            "milliseconds above 0",
            hint=_SETTINGS_HINT,
            code="usage",
        )


@dataclass(frozen=True)
class BenchSettings:
    """One bench_serving run: the same on every host of a fleet, so their numbers compare."""

    concurrency: int  # the serving profile's: requests in flight at once (--max-concurrency)
    num_prompts: int  # requests sent; at least `concurrency`, or the run never holds that many
    input_len: int = 1024  # prompt tokens per request (CVS's ISL)
    output_len: int = 1024  # output tokens per request (CVS's OSL; EOS is ignored)
    range_ratio: float = 1.0  # lengths drawn from [len x ratio, len]: 1.0 = fixed lengths
    goodput_ttft_ms: float | None = None  # goodput SLO on time to first token
    goodput_tpot_ms: float | None = None  # goodput SLO on time per output token
    seed: int = 42  # bench_serving's default; one seed = the same prompts on every host

    def __post_init__(self) -> None:
        _positive_int("concurrency", self.concurrency)
        _positive_int("num_prompts", self.num_prompts)
        _positive_int("input_len", self.input_len)
        _positive_int("output_len", self.output_len)
        if self.num_prompts < self.concurrency:
            raise SglxError(
                f"benchmark settings: num_prompts {self.num_prompts} is below the concurrency "
                f"{self.concurrency}: the run would never hold {self.concurrency} requests at once",
                hint=f"send at least {self.concurrency} prompts (a few times more measures a "
                "steady state)",
                code="usage",
            )
        if self.output_len < 2:
            raise SglxError(
                "benchmark settings: output_len is 1; TPOT needs at least 2 output tokens",
                hint="set output_len to 2 or more (CVS uses 1024)",
                code="usage",
            )
        ratio = self.range_ratio
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not 0 <= ratio <= 1:
            raise SglxError(
                f"benchmark settings: range_ratio is {ratio!r}; it must be in [0, 1]",
                hint="1.0 gives every request the full lengths, the same work on every host",
                code="usage",
            )
        _positive_ms("goodput_ttft_ms", self.goodput_ttft_ms)
        _positive_ms("goodput_tpot_ms", self.goodput_tpot_ms)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise SglxError(
                f"benchmark settings: seed is {self.seed!r}; it must be a whole number >= 0",
                hint=_SETTINGS_HINT,
                code="usage",
            )

    @property
    def goodput_slos_ms(self) -> dict[str, float]:
        """The SLOs as bench_serving names them (`--goodput ttft:MS tpot:MS`); empty: none."""
        slos = {"ttft": self.goodput_ttft_ms, "tpot": self.goodput_tpot_ms}
        return {name: float(ms) for name, ms in slos.items() if ms is not None}

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "num_prompts": self.num_prompts,
            "input_len": self.input_len,
            "output_len": self.output_len,
            "range_ratio": self.range_ratio,
            "goodput_slos_ms": self.goodput_slos_ms,
            "seed": self.seed,
        }


def bench_serving_argv(
    settings: BenchSettings,
    *,
    host: str,
    port: int,
    tokenizer_path: str,
    output_file: str,
    python: str = "python3",
) -> list[str]:
    """The command that runs sglang's bench_serving for `settings` against host:port.

    `tokenizer_path` is a local folder on the machine that runs the command (the served
    model's); `output_file` should not exist yet (bench_serving appends to it). `python` is the
    interpreter of the venv that holds sglang."""
    _argument("host", host)
    _argument("tokenizer path", tokenizer_path)
    _argument("output file", output_file)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise SglxError(
            f"bench_serving port is {port!r}; it must be in 1-65535",
            hint="pass the server's --port",
            code="usage",
        )
    argv = [
        python,
        "-m",
        BENCH_MODULE,
        "--backend",
        BACKEND,
        "--host",
        host,
        "--port",
        str(port),
        "--model",
        tokenizer_path,
        "--tokenizer",
        tokenizer_path,
        "--dataset-name",
        DATASET,
        "--num-prompts",
        str(settings.num_prompts),
        "--max-concurrency",
        str(settings.concurrency),
        "--random-input-len",
        str(settings.input_len),
        "--random-output-len",
        str(settings.output_len),
        "--random-range-ratio",
        _number(settings.range_ratio),
        "--seed",
        str(settings.seed),
        "--disable-tqdm",
        "--output-file",
        output_file,
    ]
    slos = settings.goodput_slos_ms
    if slos:
        argv += ["--goodput", *(f"{name}:{_number(ms)}" for name, ms in slos.items())]
    return argv


def _number(value: float) -> str:
    """`value` as argparse reads it back to the same float (`:g` would round 1234567 off)."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _argument(name: str, value: str) -> None:
    """A value that argparse would take for an option, or that is empty, is refused."""
    if not value or value.startswith("-"):
        raise SglxError(
            f"bench_serving {name} is {value!r}; it must be non-empty and not start with '-'",
            hint=f"pass the {name} itself",
            code="usage",
        )


@dataclass(frozen=True)
class BenchResult:
    """What the gate reads from one bench_serving run. Times in milliseconds."""

    settings: BenchSettings
    output_tok_s: float
    ttft_ms_mean: float
    ttft_ms_p50: float
    ttft_ms_p90: float
    ttft_ms_p99: float
    tpot_ms_mean: float
    tpot_ms_p50: float
    tpot_ms_p90: float
    tpot_ms_p99: float
    completed: int
    duration_s: float
    request_goodput: float | None = None  # requests per second that met every SLO
    slo_attainment: float | None = None  # good requests / requests sent, in [0, 1]
    slo_attainment_by_metric: Mapping[str, float] = field(default_factory=dict)

    @property
    def num_prompts(self) -> int:
        return self.settings.num_prompts

    @property
    def failed_requests(self) -> int:
        return self.num_prompts - self.completed

    def shortfall(self) -> str | None:
        """A sentence when some requests failed (a finding), else None."""
        if self.completed >= self.num_prompts:
            return None
        return (
            f"{self.completed} of {self.num_prompts} requests completed; "
            f"{self.failed_requests} failed"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "output_tok_s": self.output_tok_s,
            "ttft_ms": {
                "mean": self.ttft_ms_mean,
                "p50": self.ttft_ms_p50,
                "p90": self.ttft_ms_p90,
                "p99": self.ttft_ms_p99,
            },
            "tpot_ms": {
                "mean": self.tpot_ms_mean,
                "p50": self.tpot_ms_p50,
                "p90": self.tpot_ms_p90,
                "p99": self.tpot_ms_p99,
            },
            "completed": self.completed,
            "num_prompts": self.num_prompts,
            "duration_s": self.duration_s,
            "goodput": None
            if self.slo_attainment is None
            else {
                "request_goodput": self.request_goodput,
                "slo_attainment": self.slo_attainment,
                "slo_attainment_by_metric": dict(self.slo_attainment_by_metric),
                "slos_ms": self.settings.goodput_slos_ms,
            },
        }


class _Line:
    """One result line, each read naming the key and the file on error."""

    def __init__(self, path: Path, document: Mapping[str, Any]) -> None:
        self.path = path
        self.document = document

    def _error(self, message: str, *, hint: str = _RERUN_HINT) -> SglxError:
        return SglxError(
            f"{self.path}: bench_serving result: {message}",
            hint=hint,
            code="corrupt",
            path=str(self.path),
        )

    def get(self, key: str) -> Any:
        if key not in self.document:
            raise self._error(f"key {key!r} is missing")
        return self.document[key]

    def number(self, key: str) -> float:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._error(f"{key} is {value!r}, not a number")
        if not math.isfinite(value) or value < 0:
            raise self._error(f"{key} is {value!r}, not a finite number >= 0")
        return float(value)

    def count(self, key: str) -> int:
        value = self.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self._error(f"{key} is {value!r}, not a whole number >= 0")
        return value

    def same(self, key: str, expected: object, actual: object) -> None:
        if actual != expected:
            raise self._error(
                f"{key} is {actual!r}, this run asked for {expected!r}: the line is from "
                "another run"
            )

    def fraction(self, key: str, value: object) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or not 0 <= value <= 1
        ):
            raise self._error(f"{key} is {value!r}, not a fraction in [0, 1]")
        return float(value)


def _last_line(raw: bytes, path: Path) -> str:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SglxError(
            f"{path}: bench_serving result is not UTF-8 text",
            hint=_RERUN_HINT,
            code="corrupt",
            path=str(path),
        ) from None
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise SglxError(
            f"{path}: bench_serving result holds no line: the run stopped before it wrote one",
            hint="read bench_serving's output on the host (server not ready, all requests "
            "failed, tokenizer not found) and run it again",
            code="corrupt",
            path=str(path),
        )
    return lines[-1]


def parse_result(raw: bytes, *, path: Path, settings: BenchSettings) -> BenchResult:
    """The last line of bench_serving's JSONL `raw` (read from `path`), checked against the
    `settings` the run was started with."""
    if len(raw) > MAX_RESULT_BYTES:
        raise SglxError(
            f"{path}: bench_serving result is larger than {MAX_RESULT_BYTES >> 20} MiB; "
            "no real one is",
            hint=_RERUN_HINT,
            code="too_large",
            path=str(path),
        )
    document = parse_json(
        _last_line(raw, path), path=path, what="bench_serving result", hint=_RERUN_HINT
    )
    if not isinstance(document, dict):
        raise SglxError(
            f"{path}: bench_serving result: the last line is {type(document).__name__}, "
            "not an object",
            hint=_RERUN_HINT,
            code="corrupt",
            path=str(path),
        )
    line = _Line(path, document)
    line.same("dataset_name", DATASET, line.get("dataset_name"))
    line.same("max_concurrency", settings.concurrency, line.get("max_concurrency"))
    line.same("random_input_len", settings.input_len, line.get("random_input_len"))
    line.same("random_output_len", settings.output_len, line.get("random_output_len"))
    line.same("random_range_ratio", settings.range_ratio, line.get("random_range_ratio"))
    result = BenchResult(
        settings=settings,
        output_tok_s=line.number("output_throughput"),
        ttft_ms_mean=line.number("mean_ttft_ms"),
        ttft_ms_p50=line.number("median_ttft_ms"),
        ttft_ms_p90=line.number("p90_ttft_ms"),
        ttft_ms_p99=line.number("p99_ttft_ms"),
        tpot_ms_mean=line.number("mean_tpot_ms"),
        tpot_ms_p50=line.number("median_tpot_ms"),
        tpot_ms_p90=line.number("p90_tpot_ms"),
        tpot_ms_p99=line.number("p99_tpot_ms"),
        completed=line.count("completed"),
        duration_s=line.number("duration"),
    )
    if result.completed > settings.num_prompts:
        raise line._error(
            f"completed is {result.completed}, more than the {settings.num_prompts} requests "
            "sent: the line is from another run"
        )
    slos = settings.goodput_slos_ms
    if not slos:
        return result
    line.same("goodput_slos_ms", slos, line.get("goodput_slos_ms"))
    by_metric = line.get("slo_attainment_by_metric")
    if not isinstance(by_metric, dict) or set(by_metric) != set(slos):
        raise line._error(
            f"slo_attainment_by_metric is {by_metric!r}; it must name each SLO ({', '.join(slos)})"
        )
    return replace(
        result,
        request_goodput=line.number("request_goodput"),
        slo_attainment=line.fraction("slo_attainment", line.get("slo_attainment")),
        slo_attainment_by_metric={
            name: line.fraction(f"slo_attainment_by_metric.{name}", value)
            for name, value in by_metric.items()
        },
    )


def read_result_line(path: Path) -> str:
    """The last line of the file bench_serving wrote at `path` (read bounded, regular files
    only): this run's result, as it wrote it."""
    raw = read_bounded(
        path, what="bench_serving result", max_bytes=MAX_RESULT_BYTES, hint=_RERUN_HINT
    )
    return _last_line(raw, path)


def read_result(path: Path, *, settings: BenchSettings) -> BenchResult:
    """`parse_result` of the file bench_serving wrote at `path` (read bounded, regular files
    only)."""
    return parse_result(read_result_line(path).encode(), path=path, settings=settings)

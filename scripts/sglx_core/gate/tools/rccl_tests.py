"""`all_reduce_perf` output (rccl-tests, nccl-tests) read into rows, and the gate's check.

The table is printed by nccl-tests' src/util.cu (github.com/NVIDIA/nccl-tests, the rccl-tests
fork prints the same from src/common.cu): a header
`#       size         count      type   redop    root     time   algbw   busbw #wrong ...`,
then one row per message size and data type with the out-of-place and in-place halves (time
in us, algbw and busbw in GB/s, #wrong elements, or N/A when run with -c 0), then
`# Out of bounds values : N OK|FAILED` and `# Avg bus bandwidth    : X`. The columns are read
from the header, so the variants all parse: in-place only (rccl-tests without out-of-place),
`cputime` for `-C 1`, nccl-tests' per-iteration columns (`-R`), trailing timestamps, and
rccl-tests' `algo proto nchannels` columns. Lines that are not the table (NCCL INFO logs,
`rccl-tests: Version`, `RCCL version :`, the `Using devices` list) are skipped, and an
`mpirun --tag-output` prefix (`[1,0]<stdout>:`) is removed. nccl-tests before 2.x printed a
max-error column (`error`) instead of a #wrong count; that table is refused.

What passes (AMD's acceptance criterion, github.com/ROCm/system-acceptance-docs at 23e73127,
page system-acceptance-docs/docs/common/rccl-benchmarking.md): `all_reduce_perf -b 8 -e 8G
-f 2 -g 8` with an **in-place** busbw at the 8 GB message of at least 304 GB/s on MI300X
(350 GB/s on MI350X/MI355X and for 2-node runs of those). The floor is the caller's argument;
any row with #wrong above 0, or an out-of-bounds count above 0, fails.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sglx_core.errors import SglxError
from sglx_core.gate.tools._input import bounded_text, field_error
from sglx_core.gate.tools.result import Number, ToolResult, verdict

TOOL = "all_reduce_perf"
MAX_ROWS = 100_000

_WHAT = "all_reduce_perf"
_HINT = (
    "capture the whole output of `all_reduce_perf -b 8 -e 8G -f 2 -g 8` again, from its "
    "`# nThread` line to `# Avg bus bandwidth`"
)
_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:", re.ASCII)
_OUT_OF_BOUNDS = re.compile(
    r"^#\s*Out of bounds values\s*:\s*(?P<n>\d+)\s*(?P<s>OK|FAILED)?", re.ASCII
)
_AVG_BUSBW = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<v>\S+)", re.ASCII)
_TIME_COLUMNS = ("time", "cputime")


@dataclass(frozen=True)
class Half:
    """One half of a row: out-of-place or in-place. `wrong` is None when not checked (-c 0)."""

    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    wrong: int | None


@dataclass(frozen=True)
class Row:
    size_bytes: int
    count: int
    dtype: str
    redop: str
    out_of_place: Half | None
    in_place: Half | None


@dataclass(frozen=True)
class AllReduceReport:
    rows: list[Row]
    out_of_bounds: int
    avg_busbw_gbps: float


@dataclass(frozen=True)
class _Layout:
    """Where the columns are: size/count/type/redop indices, and per half the index of its
    time column (algbw, busbw and #wrong follow it)."""

    size: int
    count: int
    dtype: int
    redop: int
    out_of_place: int | None
    in_place: int | None

    @property
    def width(self) -> int:
        return max(i for i in (self.out_of_place, self.in_place) if i is not None) + 4


def parse_all_reduce(data: str | bytes) -> AllReduceReport:
    """The rows and footer of one `all_reduce_perf` run's output."""
    text = bounded_text(data, what=_WHAT, hint=_HINT)
    layout: _Layout | None = None
    label = ""
    rows: list[Row] = []
    out_of_bounds: int | None = None
    avg: float | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = _TAG.sub("", raw).strip()
        if not line:
            continue
        if line.startswith("#"):
            tokens = line.lstrip("#").split()
            if "out-of-place" in tokens or "in-place" in tokens:
                label = line
            elif tokens[:2] == ["size", "count"] or ("size" in tokens and "busbw" in tokens):
                if rows:
                    raise field_error(
                        _WHAT,
                        f"line {number}",
                        "a second result table: the output holds more than one run",
                        "give one run's output per check",
                    )
                layout = _layout(tokens, label, number)
            elif match := _OUT_OF_BOUNDS.match(line):
                # A second verdict must not override the first (a `12 FAILED` followed by a
                # `0 OK` footer passed), nor may the word contradict the count.
                if out_of_bounds is not None:
                    raise field_error(
                        _WHAT, f"line {number}", "a second `# Out of bounds values` verdict", _HINT
                    )
                out_of_bounds = int(match["n"])
                if match["s"] is not None and (match["s"] == "OK") != (out_of_bounds == 0):
                    raise field_error(
                        _WHAT,
                        f"line {number}",
                        f"`{out_of_bounds} {match['s']}`: the count and the verdict disagree",
                        _HINT,
                    )
            elif match := _AVG_BUSBW.match(line):
                if avg is not None:
                    raise field_error(
                        _WHAT, f"line {number}", "a second `# Avg bus bandwidth` line", _HINT
                    )
                avg = _number(match["v"], number, "the average bus bandwidth")
            continue
        first = line.split()[0]
        if not (first.isascii() and first.isdigit()):
            continue
        if layout is None:
            raise field_error(
                _WHAT, f"line {number}", "a result row before the column header", _HINT
            )
        if out_of_bounds is not None:
            raise field_error(_WHAT, f"line {number}", "a result row after the footer", _HINT)
        rows.append(_row(line.split(), layout, number))
        if len(rows) > MAX_ROWS:
            raise field_error(_WHAT, "", f"more than {MAX_ROWS} result rows", _HINT)
    if layout is None:
        raise field_error(
            _WHAT,
            "",
            "has no `#  size  count  type  redop ...` header: not all_reduce_perf output, or the "
            "run failed before its first result",
            _HINT,
        )
    if not rows:
        raise field_error(_WHAT, "", "has a header but no result rows", _HINT)
    if out_of_bounds is None or avg is None:
        missing = "# Out of bounds values" if out_of_bounds is None else "# Avg bus bandwidth"
        raise field_error(
            _WHAT,
            "",
            f"ends before its `{missing}` line: the run did not finish, or the output was cut",
            _HINT,
        )
    return AllReduceReport(rows=rows, out_of_bounds=out_of_bounds, avg_busbw_gbps=avg)


def _layout(tokens: list[str], label: str, number: int) -> _Layout:
    where = f"line {number}"
    if "error" in tokens and "#wrong" not in tokens:
        raise field_error(
            _WHAT,
            where,
            "the table has a max-error column (`error`), not a `#wrong` count: this "
            "all_reduce_perf predates nccl-tests 2.x",
            "rebuild rccl-tests or nccl-tests from a current release",
        )
    for name in ("size", "count", "type", "redop"):
        if name not in tokens:
            raise field_error(_WHAT, where, f"the header has no `{name}` column", _HINT)
    halves = [i for i, t in enumerate(tokens) if t in _TIME_COLUMNS]
    for i in halves:
        if tokens[i + 1 : i + 4] != ["algbw", "busbw", "#wrong"]:
            raise field_error(
                _WHAT,
                where,
                f"`{tokens[i]}` is not followed by `algbw busbw #wrong`",
                _HINT,
            )
    labels = label.split()
    if len(halves) == 2:
        oop, ip = halves
    elif len(halves) == 1 and "out-of-place" in labels and "in-place" not in labels:
        oop, ip = halves[0], None
    elif len(halves) == 1:
        oop, ip = None, halves[0]
    else:
        raise field_error(
            _WHAT, where, f"the header has {len(halves)} time columns, not 1 or 2", _HINT
        )
    return _Layout(
        size=tokens.index("size"),
        count=tokens.index("count"),
        dtype=tokens.index("type"),
        redop=tokens.index("redop"),
        out_of_place=oop,
        in_place=ip,
    )


def _row(cells: list[str], layout: _Layout, number: int) -> Row:
    if len(cells) < layout.width:
        raise field_error(
            _WHAT,
            f"line {number}",
            f"a result row with {len(cells)} columns, fewer than the header's {layout.width}: "
            "the output was cut",
            _HINT,
        )
    size = cells[layout.size]
    count = cells[layout.count]
    if not (size.isascii() and size.isdigit() and count.isascii() and count.isdigit()):
        raise field_error(
            _WHAT, f"line {number}", f"size {size!r} or count {count!r} is not an integer", _HINT
        )
    return Row(
        size_bytes=int(size),
        count=int(count),
        dtype=cells[layout.dtype],
        redop=cells[layout.redop],
        out_of_place=_half(cells, layout.out_of_place, number),
        in_place=_half(cells, layout.in_place, number),
    )


def _half(cells: list[str], at: int | None, number: int) -> Half | None:
    if at is None:
        return None
    wrong_cell = cells[at + 3].rstrip("*")
    if wrong_cell == "N/A":
        wrong = None
    else:
        value = _number(wrong_cell, number, "#wrong")
        if value != int(value):
            raise field_error(_WHAT, f"line {number}", f"#wrong is {wrong_cell!r}", _HINT)
        wrong = int(value)
    return Half(
        time_us=_number(cells[at], number, "time"),
        algbw_gbps=_number(cells[at + 1], number, "algbw"),
        busbw_gbps=_number(cells[at + 2], number, "busbw"),
        wrong=wrong,
    )


def _number(cell: str, number: int, name: str) -> float:
    try:
        value = float(cell)
    except ValueError:
        raise field_error(
            _WHAT, f"line {number}", f"{name} is {cell!r}, not a number", _HINT
        ) from None
    if not math.isfinite(value) or value < 0:
        raise field_error(_WHAT, f"line {number}", f"{name} is {cell!r}", _HINT)
    return value


def check_all_reduce(
    report: AllReduceReport,
    *,
    min_busbw_gbps: float,
    min_avg_busbw_gbps: float | None = None,
    min_size_bytes: int | None = None,
) -> ToolResult:
    """In-place busbw at the largest message size at least `min_busbw_gbps`, no wrong
    element anywhere, no out-of-bounds value.

    `min_avg_busbw_gbps` adds a floor for the `# Avg bus bandwidth` line (the mean over every
    size, so far below the large-message figure: 110 GB/s in AMD's MI350X example whose 8 GB
    in-place busbw is 367 GB/s). `min_size_bytes` requires the run to reach a message size
    (8 GiB for AMD's criterion, `-e 8G`)."""
    if min_busbw_gbps < 0 or (min_avg_busbw_gbps is not None and min_avg_busbw_gbps < 0):
        raise SglxError("a bus bandwidth floor cannot be negative", code="usage")
    findings: list[str] = []
    largest = max(r.size_bytes for r in report.rows)
    top = [r for r in report.rows if r.size_bytes == largest]
    in_place = [r.in_place.busbw_gbps for r in top if r.in_place is not None]
    if not in_place:
        findings.append("the output has no in-place results")
    elif min(in_place) < min_busbw_gbps:
        findings.append(
            f"in-place busbw at {_size(largest)} is {min(in_place):g} GB/s, under the "
            f"{min_busbw_gbps:g} GB/s floor"
        )
    if min_size_bytes is not None and largest < min_size_bytes:
        findings.append(
            f"the largest message is {_size(largest)}; the floor is for {_size(min_size_bytes)} "
            "(run with a larger -e)"
        )
    if min_avg_busbw_gbps is not None and report.avg_busbw_gbps < min_avg_busbw_gbps:
        findings.append(
            f"average bus bandwidth {report.avg_busbw_gbps:g} GB/s, under "
            f"{min_avg_busbw_gbps:g} GB/s"
        )
    wrong_total = 0
    unchecked = 0
    for row in report.rows:
        for name, half in (("out-of-place", row.out_of_place), ("in-place", row.in_place)):
            if half is None:
                continue
            if half.wrong is None:
                unchecked += 1
            elif half.wrong > 0:
                wrong_total += half.wrong
                findings.append(
                    f"{_size(row.size_bytes)} {row.dtype} {name}: {half.wrong} wrong elements: "
                    "the collective returned corrupt data"
                )
    if unchecked:
        findings.append(
            f"{unchecked} results were not checked (#wrong N/A): run without -c 0 so every "
            "result is verified"
        )
    if report.out_of_bounds > 0:
        findings.append(f"{report.out_of_bounds} out-of-bounds values reported")
    numbers: dict[str, Number] = {
        "largest_size_bytes": largest,
        "inplace_busbw_gbps": min(in_place) if in_place else None,
        "avg_busbw_gbps": report.avg_busbw_gbps,
        "floor_busbw_gbps": min_busbw_gbps,
        "rows": len(report.rows),
        "wrong_total": wrong_total,
        "out_of_bounds": report.out_of_bounds,
    }
    best = min(in_place) if in_place else 0.0
    return verdict(
        TOOL,
        findings,
        numbers,
        f"in-place busbw {best:g} GB/s at {_size(largest)} (floor {min_busbw_gbps:g}), "
        f"average {report.avg_busbw_gbps:g} GB/s, no wrong results",
    )


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"

"""The speed part of the serving gate, judged on the control node across the fleet.

Each host (and each serving group, through its rank 0) has run sglang's bench_serving with the
same settings (`sglx_core.gate.bench`). Here the results meet. A host fails as an outlier when
its output tok/s is below `fraction` (0.7 by default) of the median of the hosts serving the
same bundle and profile, its fleet. The rule needs no absolute number, which no one can give
for every model, arch and profile before the first run, and it still catches the host that
serves at half the speed of its peers: a lowered power cap, a link trained down, a device
throttled or missing. Below MIN_FLEET hosts there is no median to be an outlier of: in a fleet
of two the "median" is the mean of two numbers, so one fast host would make the other an
outlier. Such a fleet is judged by its floors only, and the verdict says so.

An outlier verdict on a fresh measurement is a suspicion, not a finding: the caller measures
the suspect again (`confirm`), and only a host slow twice fails. A host whose neighbour was busy
for a minute is not rolled back.

Absolute floors (CVS-style: min output tok/s, max mean TPOT, max p99 TTFT, min goodput) are
optional, per fleet or for all. A run in which some requests failed is a finding of its own.

Every check is a JUnit testcase per host, and the fleet is one JSON document with a table
across hosts. The module never prints and never runs anything: the caller collects the
results and writes what it wants.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from sglx_core.errors import SglxError
from sglx_core.gate.bench import BENCH_MODULE, DATASET, BenchResult
from sglx_core.output_files import atomic_write_bytes, atomic_write_text
from sglx_core.report import Finding, Result, Table

DEFAULT_FRACTION = 0.7
MIN_FLEET = 3
"""The fewest hosts whose median an outlier is judged against; smaller fleets: floors only."""
REPORT_VERSION = "1"
ONE_FLEET = "all"
"""The fleet key of every host when the caller names none."""
DETAIL_PROPERTY = "detail"
"""A passed check's message rides in this testcase property (as the host checks do)."""

Outcome = Literal["passed", "failed", "skipped"]

_HOST_HINT = (
    "look at the host itself: device clocks and power caps, link widths, a missing or "
    "throttled device (`sglx hosts check`), then run the gate again"
)


@dataclass(frozen=True)
class Floors:
    """Absolute limits a host must meet alone (None: not checked). CVS-style; optional."""

    min_output_tok_s: float | None = None
    max_tpot_mean_ms: float | None = None
    max_ttft_p99_ms: float | None = None
    min_goodput: float | None = None  # SLO attainment: good requests / requests sent

    def __post_init__(self) -> None:
        for name in ("min_output_tok_s", "max_tpot_mean_ms", "max_ttft_p99_ms"):
            value = getattr(self, name)
            if value is not None and not _finite(value, above=0):
                raise SglxError(
                    f"speed floors: {name} is {value!r}; it must be a finite number above 0",
                    hint=f"set {name} to a positive number, or leave it unset",
                    code="usage",
                )
        if self.min_goodput is not None and not (
            _finite(self.min_goodput, above=0) and self.min_goodput <= 1
        ):
            raise SglxError(
                f"speed floors: min_goodput is {self.min_goodput!r}; it must be in (0, 1]",
                hint="goodput is a fraction of the requests sent, e.g. 0.99",
                code="usage",
            )

    def to_json(self) -> dict[str, float | None]:
        return {
            "min_output_tok_s": self.min_output_tok_s,
            "max_tpot_mean_ms": self.max_tpot_mean_ms,
            "max_ttft_p99_ms": self.max_ttft_p99_ms,
            "min_goodput": self.min_goodput,
        }


def _finite(value: object, *, above: float) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value > above
    )


@dataclass(frozen=True)
class Check:
    """One verdict on one host: a JUnit testcase."""

    name: str  # completed, outlier, min_output_tok_s, max_tpot_mean_ms, ...
    outcome: Outcome
    message: str  # names the host and the numbers
    hint: str | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"name": self.name, "outcome": self.outcome, "message": self.message}


@dataclass(frozen=True)
class HostVerdict:
    host: str
    fleet: str
    result: BenchResult
    fleet_size: int
    median_output_tok_s: float | None  # None in a fleet below MIN_FLEET
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        return all(check.outcome != "failed" for check in self.checks)

    @property
    def ratio(self) -> float | None:
        """Output tok/s over the fleet median (None when there is no median to divide by)."""
        if not self.median_output_tok_s:
            return None
        return self.result.output_tok_s / self.median_output_tok_s

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "fleet": self.fleet,
            "verdict": "passed" if self.passed else "failed",
            "fleet_size": self.fleet_size,
            "median_output_tok_s": self.median_output_tok_s,
            "ratio_to_median": self.ratio,
            "settings": self.result.settings.to_json(),
            "numbers": self.result.to_json(),
            "checks": [check.to_json() for check in self.checks],
        }


@dataclass(frozen=True)
class SpeedReport:
    """The verdicts of one gate run, one per host, sorted by host."""

    fraction: float
    verdicts: tuple[HostVerdict, ...]
    floors: Mapping[str, Floors]  # per fleet key, as applied

    @property
    def passed(self) -> bool:
        return all(verdict.passed for verdict in self.verdicts)

    def findings(self) -> tuple[Finding, ...]:
        return tuple(
            Finding(code=f"speed_{check.name}", message=check.message, hint=check.hint)
            for verdict in self.verdicts
            for check in verdict.checks
            if check.outcome == "failed"
        )

    def fleets(self) -> dict[str, tuple[HostVerdict, ...]]:
        grouped: dict[str, list[HostVerdict]] = {}
        for verdict in self.verdicts:
            grouped.setdefault(verdict.fleet, []).append(verdict)
        return {key: tuple(hosts) for key, hosts in sorted(grouped.items())}

    def to_json(self) -> dict[str, Any]:
        """The one JSON document of the gate's speed part."""
        return {
            "sglx_gate_speed_version": REPORT_VERSION,
            "benchmark": f"python -m {BENCH_MODULE} --dataset-name {DATASET}",
            "status": "ok" if self.passed else "findings",
            "fraction": self.fraction,
            "fleets": [
                {
                    "fleet": key,
                    "hosts": [verdict.host for verdict in hosts],
                    "median_output_tok_s": hosts[0].median_output_tok_s,
                    "floors": self.floors[key].to_json(),
                }
                for key, hosts in self.fleets().items()
            ],
            "hosts": [verdict.to_json() for verdict in self.verdicts],
            "findings": [finding.to_json() for finding in self.findings()],
        }

    def table(self) -> Table:
        rows = []
        for v in self.verdicts:
            r = v.result
            goodput = "-" if r.slo_attainment is None else f"{r.slo_attainment:.3f}"
            ratio = "-" if v.ratio is None else f"{v.ratio:.2f}"
            median = "-" if v.median_output_tok_s is None else f"{v.median_output_tok_s:.1f}"
            rows.append(
                (
                    v.host,
                    v.fleet,
                    f"{r.output_tok_s:.1f}",
                    median,
                    ratio,
                    f"{r.ttft_ms_p50:.0f}/{r.ttft_ms_p99:.0f}",
                    f"{r.tpot_ms_mean:.1f}/{r.tpot_ms_p99:.1f}",
                    goodput,
                    f"{r.completed}/{r.num_prompts}",
                    "passed" if v.passed else "FAILED",
                )
            )
        return Table(
            columns=(
                "host",
                "fleet",
                "out tok/s",
                "median",
                "ratio",
                "TTFT p50/p99 ms",
                "TPOT mean/p99 ms",
                "goodput",
                "completed",
                "verdict",
            ),
            rows=tuple(rows),
            title=f"Serving gate, speed: an outlier is below {self.fraction:g} x its fleet's "
            "median output tok/s",
        )

    def result(self, command: tuple[str, ...]) -> Result:
        """The report as a command result: the document as data, the table, the findings."""
        return Result(
            command=command,
            data=self.to_json(),
            tables=(self.table(),),
            findings=self.findings(),
        )

    def junit(self, host: str) -> bytes:
        """The JUnit XML of one host: one testcase per check, named `check[host]`."""
        verdict = next((v for v in self.verdicts if v.host == host), None)
        if verdict is None:
            raise SglxError(
                f"speed report: no result for host {host!r}",
                hint="name a host the gate measured",
                code="usage",
            )
        return _junit(verdict)


def _median_check(
    host: str, key: str, result: BenchResult, median: float, fraction: float
) -> Check:
    measured = result.output_tok_s
    if median <= 0:
        return Check(
            "outlier",
            "failed",
            f"{host}: {measured:.1f} output tok/s, and the median of fleet {key} is 0: "
            "no host of it served",
            hint="read bench_serving's output on the hosts: the servers answered no request",
        )
    ratio = measured / median
    numbers = (
        f"{host}: {measured:.1f} output tok/s is {ratio:.2f} of the fleet median {median:.1f} "
        f"(fraction {fraction:g})"
    )
    if ratio < fraction:
        return Check("outlier", "failed", f"{numbers}: an outlier", hint=_HOST_HINT)
    return Check("outlier", "passed", numbers)


def _check_fraction(fraction: float) -> None:
    if not _finite(fraction, above=0) or fraction > 1:
        raise SglxError(
            f"speed gate: fraction is {fraction!r}; it must be in (0, 1]",
            hint=f"a host fails below fraction x its fleet's median; the default is "
            f"{DEFAULT_FRACTION}",
            code="usage",
        )


def _fleet_of(
    results: Mapping[str, BenchResult], fleet: Mapping[str, str] | None
) -> dict[str, str]:
    if not results:
        raise SglxError(
            "speed gate: no host results to judge",
            hint="run bench_serving on the hosts first",
            code="usage",
        )
    keys = {}
    for host in results:
        if not isinstance(host, str) or not host:
            raise SglxError(
                f"speed gate: host name {host!r} is not a non-empty string",
                hint="key the results by inventory hostname",
                code="usage",
            )
        key = ONE_FLEET if fleet is None else fleet.get(host)
        if not key:
            raise SglxError(
                f"speed gate: host {host} has no fleet key",
                hint="map every measured host to the bundle and profile it serves",
                code="usage",
            )
        keys[host] = key
    return keys


def _groups(results: Mapping[str, BenchResult], keys: Mapping[str, str]) -> dict[str, list[str]]:
    """The hosts of each fleet, refused when they did not run the same benchmark."""
    groups: dict[str, list[str]] = {}
    for host in sorted(results):
        groups.setdefault(keys[host], []).append(host)
    for key, hosts in groups.items():
        first = hosts[0]
        for host in hosts[1:]:
            if results[host].settings != results[first].settings:
                raise SglxError(
                    f"speed gate: fleet {key}: {first} and {host} ran different benchmarks "
                    f"({results[first].settings.to_json()} and {results[host].settings.to_json()})",
                    hint="run every host of a fleet with the same settings; only like compares "
                    "with like",
                    code="usage",
                )
    return groups


def fleet_outliers(
    results: Mapping[str, BenchResult],
    *,
    fraction: float = DEFAULT_FRACTION,
    fleet: Mapping[str, str] | None = None,
) -> dict[str, Check]:
    """The outlier verdict of each host (keyed like `results`).

    `fleet` maps each host to its fleet key (the bundle and the profile it serves, e.g.
    "sha256:ab12…/mi300x-tp8"); hosts with one key are compared with each other only. None
    puts every host in one fleet. In a fleet below MIN_FLEET hosts the check is `skipped`,
    with the reason: it is judged by its floors only."""
    _check_fraction(fraction)
    keys = _fleet_of(results, fleet)
    verdicts: dict[str, Check] = {}
    for key, hosts in _groups(results, keys).items():
        if len(hosts) < MIN_FLEET:
            for host in hosts:
                verdicts[host] = Check("outlier", "skipped", _too_few(host, key, len(hosts)))
            continue
        median = statistics.median(results[host].output_tok_s for host in hosts)
        for host in hosts:
            verdicts[host] = _median_check(host, key, results[host], median, fraction)
    return verdicts


def _too_few(host: str, key: str, size: int) -> str:
    hosts = "host" if size == 1 else "hosts"
    return (
        f"{host}: fleet {key} has {size} {hosts}; below {MIN_FLEET} there is no median to be an "
        "outlier of: judged by the floors only (set floors to check a small fleet's speed)"
    )


def _floor_checks(host: str, result: BenchResult, floors: Floors) -> list[Check]:
    checks = []
    if floors.min_output_tok_s is not None:
        floor, value = floors.min_output_tok_s, result.output_tok_s
        low = value < floor
        checks.append(
            Check(
                "min_output_tok_s",
                "failed" if low else "passed",
                f"{host}: {value:.1f} output tok/s is {'below' if low else 'at or above'} "
                f"the floor {floor:g}",
                hint=_HOST_HINT if low else None,
            )
        )
    for name, label, value in (
        ("max_tpot_mean_ms", "mean TPOT", result.tpot_ms_mean),
        ("max_ttft_p99_ms", "p99 TTFT", result.ttft_ms_p99),
    ):
        ceiling = getattr(floors, name)
        if ceiling is None:
            continue
        high = value > ceiling
        checks.append(
            Check(
                name,
                "failed" if high else "passed",
                f"{host}: {label} {value:.1f} ms is {'above' if high else 'within'} the "
                f"ceiling {ceiling:g} ms",
                hint=_HOST_HINT if high else None,
            )
        )
    if floors.min_goodput is not None:
        checks.append(_goodput_check(host, result, floors.min_goodput))
    return checks


def _goodput_check(host: str, result: BenchResult, floor: float) -> Check:
    if result.slo_attainment is None:
        return Check(
            "min_goodput",
            "failed",
            f"{host}: no goodput was measured; the floor {floor:g} needs one",
            hint="run bench_serving with goodput SLOs (BenchSettings goodput_ttft_ms, "
            "goodput_tpot_ms)",
        )
    value = result.slo_attainment
    slos = " ".join(f"{name}:{ms:g}" for name, ms in result.settings.goodput_slos_ms.items())
    low = value < floor
    return Check(
        "min_goodput",
        "failed" if low else "passed",
        f"{host}: goodput {value:.3f} (requests within {slos} ms) is "
        f"{'below' if low else 'at or above'} the floor {floor:g}",
        hint=_HOST_HINT if low else None,
    )


def _completed_check(host: str, result: BenchResult) -> Check:
    shortfall = result.shortfall()
    if shortfall is None:
        return Check(
            "completed",
            "passed",
            f"{host}: {result.completed} of {result.num_prompts} requests completed",
        )
    return Check(
        "completed",
        "failed",
        f"{host}: {shortfall}",
        hint="read bench_serving's output and the server's log on the host for the errors",
    )


def judge(
    results: Mapping[str, BenchResult],
    *,
    fraction: float = DEFAULT_FRACTION,
    fleet: Mapping[str, str] | None = None,
    floors: Floors | Mapping[str, Floors] | None = None,
) -> SpeedReport:
    """Every host's verdict: its run completed, it is no outlier of its fleet, it meets the
    floors. `floors` is one set for every fleet, or one per fleet key (a fleet not named gets
    none)."""
    outliers = fleet_outliers(results, fraction=fraction, fleet=fleet)
    keys = _fleet_of(results, fleet)
    groups = _groups(results, keys)
    applied = {key: _floors_for(key, floors) for key in groups}
    verdicts = []
    for host in sorted(results):
        key, result = keys[host], results[host]
        hosts = groups[key]
        median = (
            None
            if len(hosts) < MIN_FLEET
            else statistics.median(results[h].output_tok_s for h in hosts)
        )
        checks = (
            _completed_check(host, result),
            outliers[host],
            *_floor_checks(host, result, applied[key]),
        )
        verdicts.append(HostVerdict(host, key, result, len(hosts), median, checks))
    return SpeedReport(fraction=fraction, verdicts=tuple(verdicts), floors=applied)


def _floors_for(key: str, floors: Floors | Mapping[str, Floors] | None) -> Floors:
    if floors is None:
        return Floors()
    if isinstance(floors, Floors):
        return floors
    return floors.get(key, Floors())


# -- JUnit ------------------------------------------------------------------------------------

SUITE = "sglx-gate-speed"
CLASSNAME = "sglx_core.gate.speed"


def _junit(verdict: HostVerdict) -> bytes:
    checks = verdict.checks
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name=SUITE,
        hostname=verdict.host,
        tests=str(len(checks)),
        failures=str(sum(c.outcome == "failed" for c in checks)),
        skipped=str(sum(c.outcome == "skipped" for c in checks)),
        errors="0",
        time=f"{verdict.result.duration_s:.3f}",
    )
    properties = ET.SubElement(suite, "properties")
    numbers = {
        "fleet": verdict.fleet,
        "result": json.dumps(verdict.result.to_json(), sort_keys=True),
        "median_output_tok_s": ""
        if verdict.median_output_tok_s is None
        else f"{verdict.median_output_tok_s:g}",
    }
    for name, value in numbers.items():
        ET.SubElement(properties, "property", name=name, value=value)
    for check in checks:
        case = ET.SubElement(
            suite, "testcase", classname=CLASSNAME, name=f"{check.name}[{verdict.host}]"
        )
        # "what. Fix: how", as the host checks word theirs (sglx.hosts.junit splits it)
        text = check.message if check.hint is None else f"{check.message}. Fix: {check.hint}"
        if check.outcome == "failed":
            ET.SubElement(case, "failure", message=text).text = text
        elif check.outcome == "skipped":
            ET.SubElement(case, "skipped", message=check.message)
        else:
            props = ET.SubElement(case, "properties")
            ET.SubElement(props, "property", name=DETAIL_PROPERTY, value=check.message)
    ET.indent(suites)
    document: bytes = ET.tostring(suites, encoding="utf-8", xml_declaration=True)
    return document + b"\n"


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def junit_name(host: str) -> str:
    """The file name of a host's JUnit report (characters other than [A-Za-z0-9._-] become
    `_`)."""
    return f"speed-{_UNSAFE.sub('_', host)}.xml"


def write_junit(report: SpeedReport, folder: Path) -> tuple[Path, ...]:
    """One JUnit file per host in `folder`; refused before writing when two hosts would
    share a file name."""
    names: dict[str, str] = {}
    for verdict in report.verdicts:
        name = junit_name(verdict.host)
        if name in names:
            raise SglxError(
                f"speed report: hosts {names[name]!r} and {verdict.host!r} would share the "
                f"JUnit file {name}",
                hint="give the hosts inventory names that differ in [A-Za-z0-9._-]",
                code="usage",
            )
        names[name] = verdict.host
    written = []
    for name, host in names.items():
        path = folder / name
        atomic_write_bytes(path, report.junit(host), label="JUnit report")
        written.append(path)
    return tuple(written)


def write_report(report: SpeedReport, path: Path) -> None:
    """The JSON document, written through a temporary file."""
    text = json.dumps(report.to_json(), indent=2, sort_keys=True, allow_nan=False)
    atomic_write_text(path, text + "\n", label="speed report")

"""ROCm Validation Suite (`rvs -c <conf>`) logs read into per-action verdicts.

The line formats are RVS's own (github.com/ROCm/ROCmValidationSuite at 21584e14: its user guide
ROCmValidationSuite/docs/ug1main.md and the module sources gst.so/src/gst_worker.cpp,
iet.so/src/iet_worker.cpp, mem.so/src/rvs_memtest.cpp, pebb.so/src/action.cpp,
pbqt.so/src/action.cpp, rvs/src/rvsexec_do_yaml.cpp). Every logged
line is `[LEVEL] [timestamp] message`, where LEVEL is RESULT, ERROR, INFO, DEBUG or TRACE and
the timestamp is seconds (`[1101992.16545 ]`); an action starts with `Action name :NAME` and
`Module name :MODULE`, and its messages start with `[NAME]`. Errors go to stderr as
`RVS-ERROR [MODULE] [ACTION] message`. Since RVS 1.6 a summary table ends the log, one
`| action | MODULE | PASS/FAIL |` row per action, its result coloured with ANSI codes.

What passes, per AMD's acceptance criteria for MI300X (github.com/ROCm/system-acceptance-docs at
23e73127: system-acceptance-docs/docs/gpus/mi300x.md and
system-acceptance-docs/docs/common/system-validation.md):

- gst: every GPU's final line `[GPU:: id] GFLOPS max Target GFLOPS: target met: TRUE`
  (RVS sets met when max >= target * (1 - tolerance)).
- iet: every GPU's final `[GPU:: id] pass: TRUE`.
- mem: every `mem Test N : PASS`, no `Number of errors :N` above 0; Test 11's
  `bandwidth = XGB/s` is reported. AMD expects "about 2 TB/s" on MI300X; that is no exact
  floor, so a floor is applied only when the caller passes one.
- pebb: the CPU-GPU distances and a measured bandwidth per transfer; `(not measured)` fails.
- pbqt: `peers:true` for every pair and non-zero throughput.
- peqt: `peqt true` for every action.

An action of another module (gpup, gm, babel, ...) is judged by the summary row when there is
one and otherwise left without a verdict.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from sglx_core.gate.tools._input import bounded_text, field_error, strip_ansi
from sglx_core.gate.tools.result import Number, ToolResult, verdict

TOOL = "rvs"
JUDGED_MODULES = ("gst", "iet", "mem", "pebb", "pbqt", "peqt")
MAX_ACTIONS = 4096

_WHAT = "rvs log"
_HINT = "capture the whole `rvs -c <conf>` output (stdout and stderr, or the -l log file) again"

_PREFIX = re.compile(r"^\[(?P<level>[A-Z]+)\s*\]\s*\[\s*[0-9.]+\s*\]\s?")
_ACTION_NAME = re.compile(r"^\s*Action name\s*:\s*(?P<name>\S+)\s*$")
_MODULE_NAME = re.compile(r"^\s*Module name\s*:\s*(?P<module>\S+)\s*$")
_TAGGED = re.compile(r"^\[(?P<name>[^\]\s]+)\]\s+(?P<rest>.*)$")
_RVS_ERROR = re.compile(r"^RVS-ERROR(?:\s+\[(?P<module>[^\]]*)\])?(?:\s+\[(?P<name>[^\]]*)\])?")
_SUMMARY = re.compile(
    r"^\|\s*(?P<name>\S+)\s*\|\s*(?P<module>[A-Z0-9_]+)\s*\|\s*(?P<r>PASS|FAIL)\b"
)

_GPU = r"\[GPU::\s*(?P<gpu>\d+)\]"
_DEVICE = r"\[GPU::\s*\d+\s*-\s*(?P<{0}>\d+)\s*-\s*[0-9A-Fa-f:.]+\]"
_GST = re.compile(
    _GPU + r"\s+GFLOPS\s+(?P<gflops>[0-9.]+)"
    r"(?:\s+Target GFLOPS:\s*(?P<target>[0-9.]+)\s+met:\s*(?P<met>TRUE|FALSE))?"
)
_IET_POWER = re.compile(_GPU + r"\s+Power\(W\)\s+(?P<watts>[0-9.]+)")
_IET_PASS = re.compile(_GPU + r"\s+pass:\s*(?P<ok>TRUE|FALSE)")
_MEM_PASS = re.compile(r"^mem\s+Test\s+(?P<test>\d+)\s*:\s*PASS\b")
_MEM_BANDWIDTH = re.compile(r"^mem\s+Test\s+\d+:.*bandwidth\s*=\s*(?P<gbps>[0-9.]+)\s*GB/s")
_MEM_ERRORS = re.compile(r"^mem\s+Number of errors\s*:\s*(?P<n>\d+)")
_MEM_STARTED = re.compile(r"^mem\s+Test\s+(?P<test>\d+)\s*:\s*(?!PASS\b)(?!elapsedtime)\S")
_PEBB_DISTANCE = re.compile(
    r"^pcie-bandwidth\s+\[CPU::\s*\d+\]\s+" + _DEVICE.format("gpu") + r"\s+distance:(?P<d>-?\d+)"
)
_PEBB_BANDWIDTH = re.compile(
    r"^pcie-bandwidth\s*\[\s*(?P<ix>\d+)\s*/\s*\d+\]\s+\[CPU::\s*(?P<cpu>\d+)\]\s+"
    + _DEVICE.format("gpu")
    + r"\s+h2d::\w+\s+d2h::\w+\s+(?P<tail>.*)$"
)
_PBQT_PEERS = re.compile(
    r"^p2p\s+" + _DEVICE.format("src") + r"\s+" + _DEVICE.format("dst") + r"\s+peers:(?P<p>\w+)"
)
_PBQT_BANDWIDTH = re.compile(
    r"^p2p-bandwidth\s*\[\s*(?P<ix>\d+)\s*/\s*\d+\]\s+"
    + _DEVICE.format("src")
    + r"\s+"
    + _DEVICE.format("dst")
    + r"\s+bidirectional:\s*\w+\s+(?P<tail>.*)$"
)
_PEQT = re.compile(r"^peqt\s+(?P<ok>true|false)\b")
# RVS before March 2024 (ROCm 6.1 and older) wrote `gst <gpu> GFLOPS x Target stress : t met :TRUE`
# and `iet <gpu> pass: TRUE` (gst.so/src/gst_worker.cpp and iet.so/src/iet_worker.cpp before
# commit b476897e); such a line is rewritten into the current form before it is read.
_OLD_GPU = re.compile(r"^(?P<module>gst|iet)\s+(?P<gpu>\d+)\s+(?P<tail>.*)$")
_OLD_GST_TARGET = re.compile(r"Target stress\s*:\s*(?P<t>[0-9.]+)\s+met\s*:\s*")
_BANDWIDTH = re.compile(r"^(?P<gbps>[0-9.]+)\s*GBps")


@dataclass
class RvsAction:
    """One RVS action as its log lines tell it; `passed` is None for a module not judged here
    when the log has no summary row for it."""

    name: str
    module: str | None = None
    passed: bool | None = None
    findings: list[str] = field(default_factory=list)
    numbers: dict[str, Number] = field(default_factory=dict)
    summary: str | None = None
    # Evidence collected while reading; judged by _judge.
    gst_final: dict[str, tuple[float, float, bool]] = field(default_factory=dict)
    iet_pass: dict[str, bool] = field(default_factory=dict)
    iet_peak_w: dict[str, float] = field(default_factory=dict)
    mem_passes: int = 0
    mem_open: str | None = None  # the test whose description is the last mem line read
    mem_errors: int = 0
    mem_bandwidth: list[float] = field(default_factory=list)
    distances: int = 0
    peers: dict[tuple[str, str], bool] = field(default_factory=dict)
    transfers: dict[str, float | None] = field(default_factory=dict)
    final_transfers: set[str] = field(default_factory=set)
    peqt: list[bool] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class RvsReport:
    """Every action of one RVS log, in the order they ran."""

    actions: list[RvsAction]

    def by_module(self, module: str) -> list[RvsAction]:
        return [a for a in self.actions if a.module == module]


def parse_rvs(data: str | bytes) -> RvsReport:
    """The actions of an `rvs -c <conf>` log, each judged by the rules in the module doc."""
    text = strip_ansi(bounded_text(data, what=_WHAT, hint=_HINT))
    actions: dict[str, RvsAction] = {}
    current: RvsAction | None = None

    def action(name: str) -> RvsAction:
        if name not in actions:
            if len(actions) >= MAX_ACTIONS:
                raise field_error(_WHAT, "", f"names more than {MAX_ACTIONS} actions", _HINT)
            actions[name] = RvsAction(name)
        return actions[name]

    for raw in text.splitlines():
        line = raw.strip()
        if not line:
            continue
        summary = _SUMMARY.match(line)
        if summary and summary["name"] not in ("Action", "Operating"):
            row = action(summary["name"])
            row.summary = summary["r"]
            row.module = row.module or summary["module"].lower()
            continue
        error = _RVS_ERROR.match(line)
        if error:
            target = action(error["name"]) if error["name"] else current
            if target is not None:
                target.errors.append(line)
            continue
        prefixed = _PREFIX.match(line)
        message = line[prefixed.end() :] if prefixed else line
        if prefixed and prefixed["level"] == "ERROR" and current is not None:
            current.errors.append(message)
        named = _ACTION_NAME.match(message)
        if named:
            current = action(named["name"])
            continue
        module = _MODULE_NAME.match(message)
        if module:
            if current is None:
                raise field_error(_WHAT, "", f"'{message}' before any action name", _HINT)
            current.module = module["module"].lower()
            continue
        tagged = _TAGGED.match(message)
        if tagged:
            target = action(tagged["name"])
            _read(target, tagged["rest"].strip())
    if not actions:
        raise field_error(
            _WHAT,
            "",
            "has no RVS action (no `Action name :` line and no `[action]` result): not an rvs "
            "log, or rvs failed before its first action",
            _HINT,
        )
    report = RvsReport(list(actions.values()))
    for a in report.actions:
        _judge(a)
    return report


def _number(text: str) -> float:
    """A figure of the log: `[0-9.]+` matched it, which `1.2.3` also matches."""
    try:
        return float(text)
    except ValueError:
        raise field_error(_WHAT, "", f"{text!r} is not a number", _HINT) from None


def _read(a: RvsAction, rest: str) -> None:
    """File one `[action] rest` message as evidence for `a`."""
    if old := _OLD_GPU.match(rest):
        a.module = a.module or old["module"]
        tail = _OLD_GST_TARGET.sub(r"Target GFLOPS: \g<t> met: ", old["tail"])
        rest = f"[GPU:: {old['gpu']}] {tail}"
    match = _GST.match(rest)
    if match:
        a.module = a.module or "gst"
        if match["met"]:
            a.gst_final[match["gpu"]] = (
                _number(match["gflops"]),
                _number(match["target"]),
                match["met"] == "TRUE",
            )
        return
    match = _IET_PASS.match(rest)
    if match:
        a.module = a.module or "iet"
        a.iet_pass[match["gpu"]] = match["ok"] == "TRUE"
        return
    match = _IET_POWER.match(rest)
    if match:
        a.module = a.module or "iet"
        a.iet_peak_w[match["gpu"]] = max(
            a.iet_peak_w.get(match["gpu"], 0.0), _number(match["watts"])
        )
        return
    if rest.startswith("mem "):
        a.module = a.module or "mem"
        a.mem_open = None
        if match := _MEM_PASS.match(rest):
            a.mem_passes += 1
        elif match := _MEM_STARTED.match(rest):
            a.mem_open = match["test"]
        elif match := _MEM_ERRORS.match(rest):
            a.mem_errors += int(match["n"])
        elif match := _MEM_BANDWIDTH.match(rest):
            a.mem_bandwidth.append(_number(match["gbps"]))
        return
    if match := _PEBB_DISTANCE.match(rest):
        a.module = a.module or "pebb"
        a.distances += 1
        return
    if match := _PEBB_BANDWIDTH.match(rest):
        a.module = a.module or "pebb"
        _transfer(a, f"cpu {match['cpu']} - gpu {match['gpu']}", match["tail"])
        return
    if match := _PBQT_PEERS.match(rest):
        a.module = a.module or "pbqt"
        a.peers[(match["src"], match["dst"])] = match["p"] == "true"
        return
    if match := _PBQT_BANDWIDTH.match(rest):
        a.module = a.module or "pbqt"
        _transfer(a, f"gpu {match['src']} - gpu {match['dst']}", match["tail"])
        return
    if match := _PEQT.match(rest):
        a.module = a.module or "peqt"
        a.peqt.append(match["ok"] == "true")


def _transfer(a: RvsAction, pair: str, tail: str) -> None:
    """A transfer's bandwidth: the final line (with `duration:`) wins over the moving averages
    logged before it; `(pending)` is no figure yet, `(not measured)` a failure."""
    if pair in a.final_transfers:
        return
    final = "duration:" in tail or "(not measured)" in tail
    match = _BANDWIDTH.match(tail)
    if match:
        a.transfers[pair] = _number(match["gbps"])
    elif "(not measured)" in tail:
        a.transfers[pair] = None
    elif "(pending)" in tail:
        a.transfers.setdefault(pair, None)
    if final:
        a.final_transfers.add(pair)


def _judge(a: RvsAction) -> None:
    findings = a.findings
    findings.extend(f"{a.name}: {e}" for e in a.errors)
    if a.module == "gst":
        if not a.gst_final:
            findings.append(f"{a.name}: no GPU reached its final `met:` line")
        for gpu, (gflops, target, met) in sorted(a.gst_final.items()):
            if not met:
                findings.append(
                    f"{a.name}: GPU {gpu} reached {gflops:g} GFLOPS, target {target:g}: met: FALSE"
                )
        if a.gst_final:
            a.numbers["min_gflops"] = min(v[0] for v in a.gst_final.values())
            a.numbers["target_gflops"] = max(v[1] for v in a.gst_final.values())
            a.numbers["gpus"] = len(a.gst_final)
    elif a.module == "iet":
        if not a.iet_pass:
            findings.append(f"{a.name}: no GPU reached its final `pass:` line")
        findings.extend(
            f"{a.name}: GPU {gpu} did not reach its target power: pass: FALSE"
            for gpu, ok in sorted(a.iet_pass.items())
            if not ok
        )
        a.numbers["gpus"] = len(a.iet_pass)
        if a.iet_peak_w:
            a.numbers["min_peak_power_w"] = min(a.iet_peak_w.values())
    elif a.module == "mem":
        if a.mem_passes == 0:
            findings.append(f"{a.name}: no `mem Test N : PASS` line")
        if a.mem_errors:
            findings.append(f"{a.name}: {a.mem_errors} memory errors reported")
        # A test prints its description, then PASS (or its bandwidth) for each GPU: a log whose
        # last mem line is a test's description ends inside that test, cut after what it
        # printed, errors included (issue 37).
        if a.mem_open is not None:
            findings.append(
                f"{a.name}: the log ends inside mem Test {a.mem_open} (its description, no PASS "
                "after it): the log was cut, or the test did not finish"
            )
        a.numbers["tests_passed"] = a.mem_passes
        if a.mem_bandwidth:
            a.numbers["min_bandwidth_gbps"] = min(a.mem_bandwidth)
    elif a.module in ("pebb", "pbqt"):
        _judge_transfers(a)
    elif a.module == "peqt":
        if not a.peqt:
            findings.append(f"{a.name}: no `peqt true|false` line")
        elif not all(a.peqt):
            findings.append(f"{a.name}: peqt false (run rvs as root: actions 6-16 need it)")
    if a.summary == "FAIL":
        findings.append(f"{a.name}: the RVS summary reports FAIL")
    judged = a.module in JUDGED_MODULES
    if judged or a.summary is not None or findings:
        a.passed = not findings


def _judge_transfers(a: RvsAction) -> None:
    if a.module == "pebb" and a.distances == 0:
        a.findings.append(f"{a.name}: no CPU-GPU distance line")
    if a.module == "pbqt":
        if not a.peers:
            a.findings.append(f"{a.name}: no `peers:` line")
        a.findings.extend(
            f"{a.name}: GPU {src} and GPU {dst} are not peers (peers:false)"
            for (src, dst), ok in sorted(a.peers.items())
            if not ok
        )
        a.numbers["pairs"] = len(a.peers)
    if a.module == "pebb" and not a.transfers:
        a.findings.append(f"{a.name}: no bandwidth line")
    measured = [v for v in a.transfers.values() if v is not None]
    for pair, value in sorted(a.transfers.items()):
        if value is None:
            a.findings.append(f"{a.name}: {pair}: no bandwidth measured")
        elif value <= 0:
            a.findings.append(f"{a.name}: {pair}: bandwidth 0 GBps")
    a.numbers["transfers"] = len(a.transfers)
    if measured:
        a.numbers["min_bandwidth_gbps"] = min(measured)


def check_rvs(
    report: RvsReport,
    *,
    modules: Iterable[str] | None = None,
    mem_min_gbps: float | None = None,
) -> ToolResult:
    """Every judged action passed, and each module in `modules` ran at least once.

    `mem_min_gbps` adds a floor for the mem module's Test 11 bandwidth (AMD gives "about
    2 TB/s" for MI300X, no exact figure)."""
    required = tuple(modules) if modules is not None else ()
    unknown = [m for m in required if m not in JUDGED_MODULES]
    if unknown:
        raise ValueError(f"rvs modules {unknown} are not judged here")
    findings: list[str] = []
    for module in required:
        if not report.by_module(module):
            findings.append(f"no {module} action in the log: was its conf file run?")
    numbers: dict[str, Number] = {"actions": len(report.actions)}
    passed = 0
    for a in report.actions:
        if a.passed is None:
            continue
        findings.extend(a.findings)
        passed += bool(a.passed)
        for key, value in a.numbers.items():
            numbers[f"{a.name}.{key}"] = value
        bandwidth = a.numbers.get("min_bandwidth_gbps")
        if (
            a.module == "mem"
            and mem_min_gbps is not None
            and isinstance(bandwidth, float)
            and bandwidth < mem_min_gbps
        ):
            findings.append(
                f"{a.name}: memory bandwidth {bandwidth:g} GB/s, under {mem_min_gbps:g} GB/s"
            )
    numbers["actions_passed"] = passed
    judged = sum(a.passed is not None for a in report.actions)
    return verdict(TOOL, findings, numbers, f"{passed} of {judged} judged RVS actions passed")

"""The vendor's own health tools on a host, as the profile's `gate.vendor` names them.

Each `vendor_*` check in test_preflight.py finds its tool on the host (`command -v`, PATH then
the profile's search_path; xpu-smi at the role's accel_host_xpu_smi), runs it with a timeout
and a bounded output, and hands the output to sglx_core.gate.tools, whose parsers read the tools'
documented formats (pinned in tests/data/vendor) and whose checks judge them. The rule the
checks keep: a tool that is not installed has not run, so its check is skipped with that
reason and counted as skipped, never as passed. Output that does not parse fails the check,
naming the field.
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn, TypeVar

import pytest
from facts import HostFacts
from probes import container_inspect, problem

from sglx_core.errors import SglxError
from sglx_core.gate.tools import MAX_OUTPUT_BYTES
from sglx_core.gate.tools.result import ToolResult, device_count, not_run
from sglx_core.profile.schema import GateVendor

# A passed check's detail, shown by `sglx hosts check` (sglx.hosts.junit reads it back).
DETAIL_PROPERTY = "detail"
# The executable each tool of gate.vendor.tools runs (xpu-smi: the role's path, XPU_SMI_VAR).
BINARIES = {"amd-smi": "amd-smi", "rvs": "rvs", "rccl-tests": "all_reduce_perf"}
XPU_SMI_VAR = "accel_host_xpu_smi"
# Exit status of coreutils `timeout` when it stopped the command.
TIMED_OUT = 124
# Bytes of the tool's standard error kept for a message.
STDERR_BYTES = 2000
# Findings listed in one failure message; the rest are counted.
SHOWN = 5
# How a detail reads when the profile sets no temperature limit (temperature_limit).
_NOT_JUDGED = "temperature not judged (the profile sets no limit)"
_RC = re.compile(r"sglx-rc=(\d*)\s*$")

T = TypeVar("T")

# The devices the host's kernel shows, by the kind of the profile's device probe
# (devices.probe): a shell count, its source in words, and the device's name. The probe root
# is $SGLX_PROBE_ROOT (sglx_core.serving.hardware's; unset on a host, so /).
# - kfd: the KFD topology's GPU nodes (a CPU node has simd_count 0). A partitioned GPU shows
#   one node per partition, and amd-smi lists one GPU per partition ("each partition appears
#   as a separate logical GPU": rocm-systems projects/amdsmi/docs/conceptual/partition.md),
#   so the two counts agree in every mode.
# - kunlun: the kunlun driver's /dev/xpuN nodes, one per card xpu-smi lists.
DEVICE_COUNTS = {
    "kfd": (
        "grep -ls '^simd_count [1-9]' "
        '"${SGLX_PROBE_ROOT:-}"/sys/class/kfd/kfd/topology/nodes/*/properties | wc -l',
        "GPU nodes of /sys/class/kfd/kfd/topology",
        "GPU",
    ),
    "kunlun": (
        "ls \"${SGLX_PROBE_ROOT:-}\"/dev | grep -cE '^xpu[0-9]+$'",
        "/dev/xpuN nodes",
        "XPU",
    ),
}


@dataclass(frozen=True)
class Output:
    """What one bounded run of a tool left: its command line as shown in messages, standard
    output (at most one byte over the parsers' limit, so that a larger one is refused), the
    head of standard error and the exit status."""

    command: str
    stdout: bytes
    stderr: str
    rc: int


def settings(facts: HostFacts, tool: str) -> GateVendor:
    """The profile's gate.vendor when it names `tool`; otherwise the check does not apply."""
    vendor = facts.profile.gate.vendor
    if not vendor.tools:
        pytest.skip(f"the {facts.arch} profile names no vendor tools (gate.vendor.tools)")
    if tool not in vendor.tools:
        pytest.skip(
            f"the {facts.arch} profile does not name {tool} (gate.vendor.tools: "
            f"{', '.join(vendor.tools)})"
        )
    return vendor


def absent(result: ToolResult, fix: str) -> NoReturn:
    """Skip the check as not run: the tool is not there, which is no pass."""
    pytest.skip(f"{result.reason} ({fix})")


def locate(host: Any, facts: HostFacts, tool: str) -> str:
    """The tool's path on the host; the check is skipped as not run when it is absent."""
    if tool == "xpu-smi":
        path = str(facts[XPU_SMI_VAR])
        if not host.file(path).exists:
            absent(
                not_run(tool, f"{tool} is not installed on this host: not run"),
                f"{path} is absent: install the Kunlunxin driver's xpu-smi, or set {XPU_SMI_VAR} "
                "to where it is",
            )
        return path
    binary = BINARIES[tool]
    folders = facts.profile.gate.vendor.search_path
    search = "".join(f":{shlex.quote(folder)}" for folder in folders)
    found = host.run(f'PATH="$PATH{search}" command -v {shlex.quote(binary)}')
    path = found.stdout.strip() if found.rc == 0 else ""
    if not path:
        where = ", ".join(("PATH", *folders))
        absent(
            not_run(tool, f"{tool} is not installed on this host: not run"),
            f"no {binary} on {where}; install it to have the host checked with it",
        )
    return path


def devices_free(host: Any, facts: HostFacts, what: str) -> None:
    """Skip `what` while the server runs on the devices: idle readings and stress runs are for
    a host before a rollout, and a stress run would take the devices from the server."""
    inspect = container_inspect(host, facts)
    if inspect is not None and inspect.get("State", {}).get("Running"):
        pytest.skip(
            f"not run: the server ({facts.container}) holds the devices; {what} is a check "
            "before a rollout (stop the service to run it)"
        )


def run(host: Any, path: str, args: list[str], timeout_s: int, *, merge_stderr: bool) -> Output:
    """`path ARGS` on the host under `timeout`, its standard output cut one byte past the
    parsers' limit, its standard error to STDERR_BYTES (or merged into the output: RVS writes
    its errors there), and its exit status."""
    words = " ".join(shlex.quote(word) for word in (path, *args))
    errors = "2>&1" if merge_stderr else '2>"$e"'
    script = (
        f'e=$(mktemp) && {{ timeout {int(timeout_s)} {words} {errors}; echo "$?" >"$e.rc"; }} '
        f'| head -c {MAX_OUTPUT_BYTES + 1}; head -c {STDERR_BYTES} "$e" >&2; '
        f'printf "\\nsglx-rc=%s\\n" "$(cat "$e.rc" 2>/dev/null)" >&2; rm -f "$e" "$e.rc"'
    )
    done = host.run(script)
    stderr = done.stderr
    status = _RC.search(stderr)
    rc = int(status.group(1)) if status and status.group(1) else done.rc
    shown = " ".join([path.rsplit("/", 1)[-1], *args])
    if rc == TIMED_OUT:
        problem(
            f"`{shown}` did not finish within {timeout_s} s",
            "check the devices with the vendor tool by hand and the kernel log (dmesg); raise "
            "the profile's gate.vendor timeout only for a run known to be slow",
        )
    head = stderr[: status.start()] if status else stderr
    return Output(shown, done.stdout_bytes, head.strip(), rc)


def counted(host: Any, facts: HostFacts, tool: str, listed: int) -> list[ToolResult]:
    """The tool's device count held against the host's kernel (DEVICE_COUNTS, by the profile's
    device probe); none for a profile whose probe counts no device."""
    kind = getattr(facts.profile.devices.probe, "kind", None)
    if kind not in DEVICE_COUNTS:
        return []
    command, source, unit = DEVICE_COUNTS[kind]
    found = host.run(command)
    present = found.stdout.strip()
    if not (present.isascii() and present.isdigit()):
        problem(
            f"cannot count the {unit}s the host's kernel shows ({source}): "
            f"{_last_line(found.stderr) or 'no count printed'}",
            "check that /sys and /dev are readable by the checks' user (become: root)",
        )
    return [device_count(tool, listed, int(present), source, unit)]


def parse(output: Output, reader: Callable[[bytes], T]) -> T:
    """The tool's output read by `reader`; output that does not parse fails the check with
    the parser's message, which names the field."""
    try:
        value = reader(output.stdout)
    except SglxError as exc:
        said = f" (exit {output.rc}: {_last_line(output.stderr)})" if output.rc else ""
        problem(
            f"`{output.command}` output cannot be read: {exc.message}{said}",
            exc.hint or f"run `{output.command}` by hand on the host",
        )
    return value


def judge(results: list[ToolResult], outputs: list[Output], record_property: Any, fix: str) -> None:
    """Pass with the results' reasons as the check's detail, or fail naming every finding; a
    tool that exited non-zero fails even when its output reads as a pass."""
    findings = [finding for result in results for finding in result.findings]
    findings += [
        f"`{out.command}` exited {out.rc}: {_last_line(out.stderr) or 'no error printed'}"
        for out in outputs
        if out.rc != 0
    ]
    if findings:
        more = f" (and {len(findings) - SHOWN} more)" if len(findings) > SHOWN else ""
        problem("; ".join(findings[:SHOWN]) + more, fix)
    detail = "; ".join(result.reason for result in results)
    record_property(DETAIL_PROPERTY, detail.replace("under inf °C", _NOT_JUDGED))


def temperature_limit(vendor: GateVendor) -> float:
    """The idle temperature limit; none set means temperatures are reported, not judged."""
    limit = vendor.idle.max_temperature_c
    return math.inf if limit is None else limit


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""

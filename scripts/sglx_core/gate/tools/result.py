"""What one vendor tool told the serving gate about a host, in one shape for every tool.

The rule that matters: a tool that is not installed has not passed. The gate runs `amd-smi`,
RVS, `all_reduce_perf` and `xpu-smi` only where they are present; when one is absent its
result says so (`ran=False`, `passed=None`) and the caller decides whether the host may join
without it. Nothing here turns "not run" into a pass, and a result that ran always carries a
verdict.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

Number = float | int | str | None


@dataclass(frozen=True)
class ToolResult:
    """One tool's verdict on one host.

    `passed` is None exactly when the tool did not run; `reason` is one line a person reads;
    `findings` lists every failed criterion (empty on a pass); `numbers` holds the measured
    values the verdict rests on, keyed so that two hosts' results compare field by field.
    """

    tool: str
    ran: bool
    passed: bool | None
    reason: str
    findings: list[str] = field(default_factory=list)
    numbers: dict[str, Number] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.ran and self.passed is not None:
            raise ValueError(f"{self.tool}: a tool that did not run has no verdict")
        if self.ran and self.passed is None:
            raise ValueError(f"{self.tool}: a tool that ran must pass or fail")
        if self.passed and self.findings:
            raise ValueError(f"{self.tool}: a pass cannot carry findings")

    def to_dict(self) -> dict[str, object]:
        return {
            "tool": self.tool,
            "ran": self.ran,
            "passed": self.passed,
            "reason": self.reason,
            "findings": list(self.findings),
            "numbers": dict(self.numbers),
        }


def not_run(tool: str, reason: str) -> ToolResult:
    """The result of a tool that did not run: never a pass, never a failure."""
    return ToolResult(tool=tool, ran=False, passed=None, reason=reason)


def is_absent(located: str | None) -> bool:
    """Whether a `which`-style lookup found nothing.

    `shutil.which` answers None; `command -v` prints nothing (or only whitespace) and exits 1.
    Anything else names the tool."""
    return located is None or not located.strip()


def absent(tool: str, located: str | None) -> ToolResult | None:
    """The not-run result for `tool` when the lookup `located` found nothing, else None.

    `absent("amd-smi", shutil.which("amd-smi"))` is the result to report on a host without
    amd-smi, or None, meaning: run it and parse what it prints."""
    if is_absent(located):
        return not_run(tool, f"{tool} not found on PATH")
    return None


def verdict(
    tool: str, findings: Sequence[str], numbers: dict[str, Number], passed_reason: str
) -> ToolResult:
    """A ran result: passed when there are no findings; its reason is `passed_reason` on a
    pass and the first finding (with a count of the rest) on a failure."""
    problems = list(findings)
    if not problems:
        return ToolResult(tool, True, True, passed_reason, [], numbers)
    reason = problems[0] if len(problems) == 1 else f"{problems[0]} (and {len(problems) - 1} more)"
    return ToolResult(tool, True, False, reason, problems, numbers)


def device_count(tool: str, listed: int, present: int, source: str, unit: str) -> ToolResult:
    """Whether `tool` listed as many devices (`listed`) as the host's kernel shows (`present`,
    read from `source`): a device the tool does not list is a device none of its checks
    judged, so "7 of 8 GPUs idle" is a failure, not a pass."""
    numbers: dict[str, Number] = {"listed": listed, "present": present}
    findings = []
    if listed != present:
        findings.append(
            f"{tool} lists {_many(listed, unit)}, but the host's kernel shows {present} "
            f"({source}): a device the tool does not list is not checked"
        )
    return verdict(tool, findings, numbers, f"{_many(listed, unit)} listed, as the kernel shows")


def _many(count: int, unit: str) -> str:
    return f"{count} {unit}" if count == 1 else f"{count} {unit}s"

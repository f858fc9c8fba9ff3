"""The host checks' JUnit report read back as one record per check and host."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Outcome = Literal["passed", "failed", "pending", "skipped"]
# test_sysctl[ansible://host-a]  ->  check test_sysctl, host host-a
_CASE = re.compile(r"^(?P<check>[^\[]+)\[(?:ansible://)?(?P<host>[^\]]+)\]$")
_FIX = " Fix: "
# pytest's note after a `message` attribute it shortened (_pytest/junitxml.py).
_CUT = re.compile(r"\n\[(?:truncated|\+\d+ more lines?); full report in element text\]$")
DETAIL_PROPERTY = "detail"


@dataclass(frozen=True)
class CheckResult:
    host: str
    check: str
    mode: str
    outcome: Outcome
    message: str = ""

    @property
    def what(self) -> str:
        return self.message.split(_FIX, 1)[0]

    @property
    def fix(self) -> str:
        return self.message.split(_FIX, 1)[1] if _FIX in self.message else ""

    def to_json(self) -> dict[str, str]:
        return {
            "host": self.host,
            "check": self.check,
            "mode": self.mode,
            "outcome": self.outcome,
            "message": self.what,
            "fix": self.fix,
        }


def _message(element: ET.Element) -> str:
    """The check's one line. pytest cuts a long one in the `message` attribute (a note
    "[truncated; full report in element text]" after it); the element's text then holds it
    whole, as the check wrote it (pytest.fail with no traceback), and is read instead."""
    text = element.get("message") or (element.text or "").strip()
    text = re.sub(r"^(Failed|XFailed|Skipped|xfail): ", "", text.strip())
    cut = _CUT.search(text)
    whole = (element.text or "").strip()
    if cut and whole.startswith(text[: cut.start()].removesuffix("...")):
        text = whole
    return text.splitlines()[0] if text else ""


def _detail(case: ET.Element) -> str:
    """What a passed check reports (its `detail` property: record_property in hostchecks)."""
    for prop in case.iter("property"):
        if prop.get("name") == DETAIL_PROPERTY:
            return prop.get("value") or ""
    return ""


def read_report(path: Path) -> list[CheckResult]:
    root = ET.parse(path).getroot()
    results = []
    for case in root.iter("testcase"):
        named = _CASE.match(case.get("name", ""))
        if named is None:
            continue  # not a per-host check
        module = case.get("classname", "").rsplit(".", 1)[-1]
        mode = "acceptance" if module == "test_acceptance" else "preflight"
        outcome: Outcome = "passed"
        message = _detail(case)
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = "failed", _message(child)
            elif child.tag == "skipped":
                pending = child.get("type") == "pytest.xfail"
                outcome, message = ("pending" if pending else "skipped"), _message(child)
        check = named.group("check").removeprefix("test_")
        results.append(CheckResult(named.group("host"), check, mode, outcome, message))
    return results

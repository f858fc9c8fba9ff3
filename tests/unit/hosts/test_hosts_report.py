"""`sglx hosts check` reading the host checks' JUnit report: per host and check, the outcome,
what is wrong and the fix; the summary, the findings and the exit code."""

from __future__ import annotations

from pathlib import Path

from sglx.hosts.check import CheckOptions, _result
from sglx.hosts.junit import read_report

# The shape pytest writes (xunit2) for testinfra-parametrized checks.
REPORT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="1" skipped="2" tests="5">
<testcase classname="test_preflight" name="test_device_nodes[ansible://host-a]" time="0.4"/>
<testcase classname="test_preflight" name="test_device_nodes[ansible://host-b]" time="0.4">
  <failure message="/dev/kfd has mode 0666, not 0660. Fix: run site.yml for this host">
  long text</failure></testcase>
<testcase classname="test_preflight" name="test_kernel_command_line[ansible://host-a]">
  <skipped type="pytest.xfail" message="reboot pending: the running kernel lacks iommu=pt"/>
</testcase>
<testcase classname="test_acceptance" name="test_service_active[ansible://host-a]">
  <skipped type="pytest.skip" message="container x is not running (see service_active)"/>
</testcase>
<testcase classname="test_acceptance" name="test_helper_without_host" time="0.1"/>
<testcase classname="test_acceptance" name="test_serving_profile_selected[ansible://host-a]">
  <properties><property name="detail" value="serving profile mi300x-tp8"/></properties>
</testcase>
</testsuite></testsuites>
"""

OPTIONS = CheckOptions(Path("inv.yml"), "sglx", "acceptance", None, None, None, None)


def _results(tmp_path: Path) -> list:
    report = tmp_path / "junit.xml"
    report.write_text(REPORT)
    return read_report(report)


def test_each_case_is_a_host_and_a_check(tmp_path: Path) -> None:
    results = {(r.host, r.check): r for r in _results(tmp_path)}
    assert set(results) == {
        ("host-a", "device_nodes"),
        ("host-b", "device_nodes"),
        ("host-a", "kernel_command_line"),
        ("host-a", "service_active"),
        ("host-a", "serving_profile_selected"),
    }
    failed = results["host-b", "device_nodes"]
    assert (failed.outcome, failed.mode) == ("failed", "preflight")
    assert failed.what == "/dev/kfd has mode 0666, not 0660."
    assert failed.fix == "run site.yml for this host"
    assert results["host-a", "kernel_command_line"].outcome == "pending"
    assert results["host-a", "service_active"].outcome == "skipped"
    assert results["host-a", "service_active"].mode == "acceptance"


def test_a_failed_check_is_a_finding_that_names_host_check_and_fix(tmp_path: Path) -> None:
    result = _result(OPTIONS, _results(tmp_path))
    assert result.exit_code == 1
    (finding,) = result.findings
    assert finding.code == "host_device_nodes"
    assert finding.message == "host-b: device_nodes: /dev/kfd has mode 0666, not 0660."
    assert finding.hint == "run site.yml for this host"
    assert result.lines == ("1 of 2 host(s) failed 1 check(s)",)
    assert result.data["hosts"] == {
        "host-a": {"passed": 2, "pending": 1, "skipped": 1},
        "host-b": {"failed": 1},
    }
    counts, pending, details = result.tables
    assert details.rows == (("host-a", "serving_profile_selected", "serving profile mi300x-tp8"),)
    assert [row[0] for row in counts.rows] == ["host-a", "host-b"]
    assert pending.rows == (
        ("host-a", "kernel_command_line", "reboot pending: the running kernel lacks iommu=pt"),
    )


def test_pending_and_skipped_checks_pass(tmp_path: Path) -> None:
    passing = [r for r in _results(tmp_path) if r.outcome != "failed"]
    result = _result(OPTIONS, passing)
    assert result.exit_code == 0
    assert result.lines == ("all 1 host(s) passed the acceptance checks",)


def test_a_passed_check_reports_its_detail(tmp_path: Path) -> None:
    """A passed check's `detail` property (record_property in hostchecks) is its message: the
    serving profile each host chose shows in the report."""
    results = {(r.host, r.check): r for r in _results(tmp_path)}
    chosen = results["host-a", "serving_profile_selected"]
    assert (chosen.outcome, chosen.message) == ("passed", "serving profile mi300x-tp8")
    assert results["host-a", "device_nodes"].message == ""


def test_a_long_finding_keeps_its_whole_line_and_fix(tmp_path: Path) -> None:
    """pytest shortens a long failure's `message` attribute (issue 41's group check named the
    image after 800 characters of other keys: the e2e lost that line and the fix); the
    element's text holds the line whole, as the check wrote it."""
    import subprocess
    import sys

    what = "host-b differs from the rest of its group in " + "; ".join(
        f"env:X{n}: 'a' here, 'b' on the others" for n in range(40)
    )
    (tmp_path / "test_long.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('host', ['ansible://host-b'])\n"
        "def test_group(host):\n"
        f"    pytest.fail({what + '. Fix: run rollout.yml for this host'!r}, pytrace=False)\n"
    )
    report = tmp_path / "report.xml"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
         "-o", "junit_family=xunit2", str(tmp_path / "test_long.py")],
        capture_output=True, timeout=120, check=False, cwd=tmp_path,
    )  # fmt: skip
    (result,) = read_report(report)
    assert (result.host, result.check, result.outcome) == ("host-b", "group", "failed")
    assert result.what == what + ".", result.what[-200:]
    assert result.fix == "run rollout.yml for this host"

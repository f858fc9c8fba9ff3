"""`sglx hosts check` passes a host only when it was checked (issue 21, items 1 and 11).

A relative inventory used to reach pytest unchanged, in the suite's folder, where it named
nothing: every check was skipped for a host called `NOTSET` and the run passed. An unreachable
host printed testinfra's `CommandResult(...)` repr once per check. These run the real command
in a child process against hosts at 127.0.0.1 port 1, where nothing listens: no engine, no SSH
server, a few seconds each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sglx.hosts import check
from sglx.hosts.check import CheckOptions, _result, _same_hosts, check_hosts
from sglx.hosts.junit import CheckResult, read_report
from sglx.progress import Progress
from sglx_core.errors import SglxError

SGLX = str(Path(sys.executable).parent / "sglx")
DEAD = {"ansible_host": "127.0.0.1", "ansible_port": 1, "sglx_arch": "cpu"}


def _inventory(path: Path, *hosts: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"sglx": {"hosts": {h: dict(DEAD) for h in hosts}}}))
    return path


def _check(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [SGLX, "hosts", "check", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_a_relative_inventory_checks_its_hosts_and_names_each_unreachable_one_once(
    tmp_path: Path,
) -> None:
    _inventory(tmp_path / "inventory.yml", "dead-a", "dead-b")
    done = _check(tmp_path, "-i", "inventory.yml", "--json", "--junitxml", "out/report.xml")
    assert done.returncode == 1, done.stdout + done.stderr
    envelope = json.loads(done.stdout)
    assert set(envelope["data"]["hosts"]) == {"dead-a", "dead-b"}
    messages = sorted(f["message"] for f in envelope["findings"])
    assert messages == [
        f"{h}: connection: unreachable over SSH at 127.0.0.1:1: connection refused."
        for h in ("dead-a", "dead-b")
    ]
    assert envelope["findings"][0]["code"] == "host_connection"
    # The other checks of an unreachable host are skipped once, not failed with its error.
    outcomes = {(c["host"], c["check"]): c["outcome"] for c in envelope["data"]["checks"]}
    assert {o for (h, c), o in outcomes.items() if c != "connection"} == {"skipped"}
    assert "CommandResult" not in done.stdout + done.stderr
    assert "NOTSET" not in done.stdout + done.stderr
    # The relative --junitxml is written where sglx runs, not in the suite's folder.
    assert (tmp_path / "out" / "report.xml").is_file()


def test_an_inventory_folder_given_relative_says_unreachable_once_per_host(
    tmp_path: Path,
) -> None:
    # Ansible reads a folder of inventory files as one inventory: accepted like a file.
    _inventory(tmp_path / "inventory" / "hosts.yml", "dead-a")
    done = _check(tmp_path, "-i", "inventory", "-q")
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stdout.count("unreachable over SSH at 127.0.0.1:1: connection refused") == 1
    assert "1 of 1 host(s) failed 1 check(s)" in done.stdout
    assert "passed the preflight checks" not in done.stdout
    assert "RuntimeError" not in done.stdout + done.stderr


def test_a_limit_that_matches_nothing_is_exit_2(tmp_path: Path) -> None:
    _inventory(tmp_path / "inventory.yml", "dead-a")
    done = _check(tmp_path, "-i", "inventory.yml", "--limit", "nomatch")
    assert done.returncode == 2
    assert f"no host of {tmp_path / 'inventory.yml'} matches 'nomatch'" in done.stderr
    assert "passed" not in done.stdout


def test_an_inventory_that_is_a_fifo_is_refused_without_reading_it(tmp_path: Path) -> None:
    fifo = tmp_path / "inventory.yml"
    os.mkfifo(fifo)
    done = _check(tmp_path, "-i", "inventory.yml")  # would wait forever for a writer
    assert done.returncode == 2
    assert f"inventory {fifo} is a FIFO, not a file or a folder" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_run_that_did_not_check_every_selected_host_is_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The real suite runs on dead-a; the selection also holds a host it never reports on.
    inventory = _inventory(tmp_path / "inventory.yml", "dead-a")
    monkeypatch.setattr(check, "_selected_hosts", lambda options: ["dead-a", "ghost"])
    junit = tmp_path / "report.xml"
    options = CheckOptions(inventory, "sglx", "preflight", None, None, junit, None)
    with pytest.raises(SglxError) as raised:
        check_hosts(options, Progress("hosts check", quiet=True))
    assert raised.value.code == "hosts_not_checked"
    assert raised.value.message.startswith("the host checks did not check ghost: no verdict")
    assert not junit.exists()  # no report of a run without a verdict


def test_zero_hosts_checked_or_other_hosts_reported_have_no_verdict(tmp_path: Path) -> None:
    with pytest.raises(SglxError, match="the host checks checked none of dead-a: no verdict"):
        _same_hosts(["dead-a"], [])
    # What a run without its inventory reports: pytest's NOTSET, every check skipped.
    report = tmp_path / "junit.xml"
    report.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="test_preflight" name="test_sysctl[NOTSET]">'
        '<skipped type="pytest.skip" message="got empty parameter set"/></testcase>'
        "</testsuite></testsuites>"
    )
    with pytest.raises(SglxError) as raised:
        _same_hosts(["dead-a"], read_report(report))
    assert raised.value.message == (
        "the host checks did not check dead-a, and reported on NOTSET, which the inventory "
        "does not select: no verdict"
    )


def test_a_host_whose_every_check_was_skipped_fails() -> None:
    results = [
        CheckResult("host-a", "sysctl", "preflight", "skipped", "the cpu profile sets none"),
        CheckResult("host-a", "device_nodes", "preflight", "skipped", "no device nodes"),
        CheckResult("host-b", "sysctl", "preflight", "passed"),
    ]
    options = CheckOptions(Path("inv.yml"), "sglx", "preflight", None, None, None, None)
    result = _result(options, results)
    assert result.exit_code == 1
    (finding,) = result.findings
    assert finding.code == "host_not_checked"
    assert finding.message == (
        "host-a: not checked: every check was skipped (the first: the cpu profile sets none)"
    )
    assert result.lines == ("1 of 2 host(s) failed 1 check(s)",)

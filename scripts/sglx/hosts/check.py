"""Run the host checks against an inventory and report them per host.

pytest runs tests/host with testinfra's Ansible backend over the inventory the playbooks use
(`--hosts ansible://PATTERN --ansible-inventory INV --sudo`), spread over pytest-xdist
workers so that a large group is not checked one host at a time. Its JUnit report is read back
into a one-screen summary (the failing host, check, what is wrong and the fix), a JSON envelope
and, on request, a copy of the report itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sglx.errors import SglxError
from sglx.hosts.junit import CheckResult, read_report
from sglx.profile import load_profile
from sglx.progress import Progress
from sglx.report import Finding, Result, Table

ROOT = Path(__file__).resolve().parents[3]
SUITE = ROOT / "tests" / "host"
ANSIBLE_CFG = ROOT / "ansible" / "ansible.cfg"
MODES = ("preflight", "acceptance")
# pytest's own exit codes that mean the checks did not run (interrupted, internal error, usage
# error, nothing collected): exit 2, not findings.
_PYTEST_DID_NOT_RUN = {2, 3, 4, 5}


@dataclass(frozen=True)
class CheckOptions:
    inventory: Path
    limit: str
    mode: str
    arch: str | None
    bundle: Path | None
    junitxml: Path | None
    workers: int | None
    sudo: bool = True


def _need(path: Path, what: str, hint: str) -> None:
    if not path.exists():
        raise SglxError(f"{what} {path} does not exist", hint=hint, code="usage", path=str(path))


def _pytest_argv(options: CheckOptions, report: Path, workers: int) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(SUITE / "pytest.ini"),
        "--rootdir",
        str(SUITE),
        str(SUITE),
        "-v",
        "--no-header",
        "-p",
        "no:cacheprovider",
        f"--hosts=ansible://{options.limit}",
        f"--ansible-inventory={options.inventory}",
        f"--sglx-mode={options.mode}",
        f"--junitxml={report}",
        "-o",
        "junit_family=xunit2",
        "-n",
        str(workers),
    ]
    if options.sudo:
        argv.append("--sudo")  # the checks read root's view: the engine, /proc of the server
    if options.arch:
        argv.append(f"--sglx-arch={options.arch}")
    if options.bundle:
        argv.append(f"--sglx-bundle={options.bundle.resolve()}")
    return argv


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    # testinfra reads the inventory with `ansible-inventory`, which lives beside this Python.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("ANSIBLE_CONFIG", str(ANSIBLE_CFG))
    return env


def _count_hosts(options: CheckOptions) -> int:
    """How many hosts the run checks; every one must have an arch (--arch or sglx_arch)."""
    try:
        from testinfra.utils.ansible_runner import AnsibleRunner
    except ImportError as exc:
        raise SglxError(
            "the host checks need pytest-testinfra and pytest-xdist",
            hint="pip install --require-hashes -r bundles/locks/ansible.txt (make setup does it)",
            code="missing_dependency",
        ) from exc
    os.environ["PATH"] = _environment()["PATH"]
    runner = AnsibleRunner(str(options.inventory))
    try:
        hosts = runner.get_hosts(options.limit)
    except Exception as exc:
        raise SglxError(
            f"cannot read inventory {options.inventory}: {str(exc).strip().splitlines()[-1]}",
            hint="check it with: ansible-inventory -i INVENTORY --list",
            code="usage",
            path=str(options.inventory),
        ) from exc
    if not hosts:
        raise SglxError(
            f"no host of {options.inventory} matches {options.limit!r}",
            hint="name a group or host of the inventory with --limit",
            code="usage",
        )
    if options.arch:
        load_profile(options.arch)  # an unknown arch is a usage error here, not per check
    else:
        lacking = [h for h in hosts if not runner.get_variables(h).get("sglx_arch")]
        if lacking:
            raise SglxError(
                f"no arch for {', '.join(lacking[:5])}: the inventory sets no sglx_arch there",
                hint="pass --arch ARCH, or add group_vars/<arch>/sglx_profile.yml "
                "(sglx ansible vars --arch ARCH --out ...)",
                code="usage",
            )
    return len(hosts)


def check_hosts(options: CheckOptions, progress: Progress) -> Result:
    _need(options.inventory, "inventory", "pass the inventory the playbooks use (-i FILE)")
    _need(SUITE / "conftest.py", "host check suite", "run sglx from its source tree or bundle")
    if options.bundle is not None:
        _need(options.bundle / "bundle.json", "bundle manifest", "--bundle names a bundle folder")
    hosts = _count_hosts(options)
    # testinfra reuses one SSH connection per host only when the control folder exists.
    Path("~/.ansible/cp").expanduser().mkdir(parents=True, exist_ok=True)
    workers = options.workers or min(hosts, 16)
    with tempfile.TemporaryDirectory(prefix="sglx-hosts-") as scratch:
        report = Path(scratch) / "junit.xml"
        progress(
            f"{options.mode} checks on {hosts} host(s) of {options.inventory} ({workers} workers)"
        )
        with subprocess.Popen(
            _pytest_argv(options, report, workers),
            cwd=SUITE,
            env=_environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as run:
            assert run.stdout is not None
            tail: list[str] = []
            for line in run.stdout:
                line = line.rstrip()
                tail = [*tail[-30:], line]
                if (
                    " PASSED " in line
                    or " FAILED " in line
                    or " SKIPPED " in line
                    or " XFAIL " in line
                ):
                    progress(line.split("] ", 1)[-1])
        if run.returncode in _PYTEST_DID_NOT_RUN or not report.exists():
            raise SglxError(
                f"the host checks did not run (pytest exit {run.returncode}): "
                + " | ".join(line for line in tail[-6:] if line.strip()),
                hint="re-run with the same arguments and -v to see pytest's full output",
                code="hosts_check",
            )
        results = read_report(report)
        if options.junitxml is not None:
            tmp = options.junitxml.with_name(f".{options.junitxml.name}.tmp")
            shutil.copyfile(report, tmp)
            tmp.replace(options.junitxml)
    return _result(options, results)


def _result(options: CheckOptions, results: list[CheckResult]) -> Result:
    by_host: dict[str, Counter[str]] = {}
    for r in results:
        by_host.setdefault(r.host, Counter())[r.outcome] += 1
    counts = Table(
        ("host", "passed", "failed", "pending", "skipped"),
        tuple(
            (h, *(str(c[k]) for k in ("passed", "failed", "pending", "skipped")))
            for h, c in sorted(by_host.items())
        ),
        title=f"{options.mode} checks ({options.arch or 'each host its sglx_arch'})",
    )
    # Failures print as findings (one line each, with the fix); pending ones as a table.
    pending = sorted(
        (r for r in results if r.outcome == "pending"), key=lambda r: (r.host, r.check)
    )
    tables = [counts]
    if pending:
        tables.append(
            Table(
                ("host", "check", "pending"), tuple((r.host, r.check, r.message) for r in pending)
            )
        )
    failed = [r for r in results if r.outcome == "failed"]
    findings = tuple(
        Finding(f"host_{r.check}", f"{r.host}: {r.check}: {r.what}", hint=r.fix or None)
        for r in failed
    )
    verdict = (
        f"{len({r.host for r in failed})} of {len(by_host)} host(s) failed {len(failed)} check(s)"
        if failed
        else f"all {len(by_host)} host(s) passed the {options.mode} checks"
    )
    data = {
        "mode": options.mode,
        "arch": options.arch,
        "inventory": str(options.inventory),
        "hosts": {h: dict(c) for h, c in sorted(by_host.items())},
        "checks": [r.to_json() for r in results],
    }
    return Result(
        ("hosts", "check"), data=data, tables=tuple(tables), lines=(verdict,), findings=findings
    )

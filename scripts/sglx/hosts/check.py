"""Run the host checks against an inventory and report them per host.

pytest runs hostchecks with testinfra's Ansible backend over the inventory the playbooks use
(`--hosts ansible://PATTERN --ansible-inventory INV --sudo`), spread over pytest-xdist
workers so that a large group is not checked one host at a time. Its JUnit report is read back
into a one-screen summary (the failing host, check, what is wrong and the fix), a JSON envelope
and, on request, a copy of the report itself.

A host passes only when it was checked: a report about other hosts than the inventory selects
(none, or pytest's `NOTSET`) has no verdict (exit 2), and a host whose every check was skipped
is a finding. An unreachable host fails the `connection` check once, its other checks skipped.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sglx.hosts.junit import CheckResult, read_report
from sglx.progress import Progress
from sglx_core.errors import SglxError
from sglx_core.output_files import atomic_write_bytes, check_output_file
from sglx_core.paths import ansible_dir, bundle_host_checks_dir, host_checks_dir
from sglx_core.profile import load_profile
from sglx_core.report import Finding, Result, Table
from sglx_core.untrusted import file_kind

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


def _absolute(options: CheckOptions) -> CheckOptions:
    """Every path made absolute here: pytest runs in the suite's folder, where a relative
    `-i inventory.yml` names nothing, and testinfra then checks no host at all."""
    return dataclasses.replace(
        options,
        inventory=options.inventory.absolute(),
        bundle=None if options.bundle is None else options.bundle.absolute(),
        junitxml=None if options.junitxml is None else options.junitxml.absolute(),
    )


def _need_inventory(path: Path) -> None:
    """An inventory is a file or a folder (Ansible reads both). Anything else is refused before
    ansible-inventory opens it: a FIFO would hang it, waiting for a writer."""
    hint = "pass the inventory the playbooks use (-i FILE or FOLDER)"
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        mode = None
    except OSError as exc:
        raise SglxError(
            f"inventory {path}: cannot read it: {exc.strerror}",
            hint=hint,
            code="usage",
            path=str(path),
        ) from None
    if mode is None:
        raise SglxError(f"inventory {path} does not exist", hint=hint, code="usage", path=str(path))
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise SglxError(
            f"inventory {path} is {file_kind(mode)}, not a file or a folder",
            hint=hint,
            code="usage",
            path=str(path),
        )


def _suite(options: CheckOptions) -> Path:
    """The suite that runs: with --bundle the bundle's own (the checks of the bundle the hosts
    get, and the only suite on a control node where sglx came from the bundle's wheel, with no
    checkout), else the checkout's."""
    if options.bundle is None:
        return host_checks_dir()
    return bundle_host_checks_dir(options.bundle)


def _pytest_argv(options: CheckOptions, report: Path, workers: int) -> list[str]:
    suite = _suite(options)
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-c",
        str(suite / "pytest.ini"),
        "--rootdir",
        str(suite),
        str(suite),
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
        argv.append(f"--sglx-bundle={options.bundle}")
    return argv


def _environment(options: CheckOptions) -> dict[str, str]:
    env = dict(os.environ)
    # testinfra reads the inventory with `ansible-inventory`, which lives beside this Python.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    # Absolute, like every path handed on: pytest runs in the suite's folder.
    # ansible.cfg beside the suite (the bundle's ansible/, or the checkout's) unless one is set.
    config = env.get("ANSIBLE_CONFIG") or ansible_dir(options.bundle) / "ansible.cfg"
    env["ANSIBLE_CONFIG"] = str(Path(config).absolute())
    return env


def _selected_hosts(options: CheckOptions) -> list[str]:
    """The hosts the run must check; every one must have an arch (--arch or sglx_arch)."""
    try:
        from testinfra.utils.ansible_runner import AnsibleRunner
    except ImportError as exc:
        raise SglxError(
            "the host checks need pytest-testinfra and pytest-xdist",
            hint="pip install --require-hashes -r bundles/locks/ansible.txt (a bundle's "
            "ansible/control-node.txt; make setup does it)",
            code="missing_dependency",
        ) from exc
    # Read the inventory here as the checks will read it: same PATH, same ansible.cfg.
    read_as = _environment(options)
    os.environ.update({k: v for k, v in read_as.items() if k in ("PATH", "ANSIBLE_CONFIG")})
    runner = AnsibleRunner(str(options.inventory))
    try:
        hosts: list[str] = runner.get_hosts(options.limit)
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
        # An unknown arch is a usage error here, not per check; a bundle's checks hold the
        # host to the bundle's own profile, and say so when the arch is another.
        if options.bundle is None:
            load_profile(options.arch)
    else:
        lacking = [h for h in hosts if not runner.get_variables(h).get("sglx_arch")]
        if lacking:
            raise SglxError(
                f"no arch for {', '.join(lacking[:5])}: the inventory sets no sglx_arch there",
                hint="pass --arch ARCH, or add group_vars/<arch>/sglx_profile.yml "
                "(sglx ansible vars --arch ARCH --out ...)",
                code="usage",
            )
    return hosts


def check_hosts(options: CheckOptions, progress: Progress) -> Result:
    options = _absolute(options)
    _need_inventory(options.inventory)
    suite = _suite(options)
    _need(
        suite / "conftest.py",
        "host check suite",
        "pass --bundle BUNDLE (a bundle carries its suite in ansible/host-checks/), or run sglx "
        "from its source checkout",
    )
    if options.bundle is not None:
        _need(options.bundle / "bundle.json", "bundle manifest", "--bundle names a bundle folder")
    if options.junitxml is not None:
        check_output_file(options.junitxml, label="--junitxml")  # refused before any check runs
    hosts = _selected_hosts(options)
    # testinfra reuses one SSH connection per host only when the control folder exists.
    Path("~/.ansible/cp").expanduser().mkdir(parents=True, exist_ok=True)
    workers = options.workers or min(len(hosts), 16)
    with tempfile.TemporaryDirectory(prefix="sglx-hosts-") as scratch:
        report = Path(scratch) / "junit.xml"
        progress(
            f"{options.mode} checks on {len(hosts)} host(s) of {options.inventory} "
            f"({workers} workers)"
        )
        with subprocess.Popen(
            _pytest_argv(options, report, workers),
            cwd=suite,
            env=_environment(options),
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
        _same_hosts(hosts, results)
        if options.junitxml is not None:
            atomic_write_bytes(options.junitxml, report.read_bytes(), label="--junitxml")
    return _result(options, results)


def _same_hosts(selected: list[str], results: list[CheckResult]) -> None:
    """The report must be about exactly the hosts the inventory selected. A run that checked
    no host, or other hosts (`NOTSET`, pytest's name for an empty host list, when testinfra
    read no inventory), is exit 2: the checks did not run as asked, so there is no verdict on
    any host, good or bad."""
    reported = {r.host for r in results}
    missing = [h for h in selected if h not in reported]
    others = sorted(reported - set(selected))
    if not missing and not others:
        return
    parts = [f"did not check {_names(missing)}"] if missing else []
    if others:
        parts.append(f"reported on {_names(others)}, which the inventory does not select")
    what = f"checked none of {_names(selected)}" if not reported else ", and ".join(parts)
    raise SglxError(
        f"the host checks {what}: no verdict",
        hint="check what testinfra reads with: ansible-inventory -i INVENTORY --list; "
        "then re-run with -v to see pytest's full output",
        code="hosts_not_checked",
    )


def _names(hosts: list[str]) -> str:
    shown = ", ".join(hosts[:5])
    return shown + (f" and {len(hosts) - 5} more" if len(hosts) > 5 else "")


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
    # What passed checks report (the serving profile each host chose).
    details = sorted(
        (r for r in results if r.outcome == "passed" and r.message), key=lambda r: (r.host, r.check)
    )
    if details:
        tables.append(
            Table(("host", "check", "detail"), tuple((r.host, r.check, r.message) for r in details))
        )
    failed = [r for r in results if r.outcome == "failed"]
    findings = [
        Finding(f"host_{r.check}", f"{r.host}: {r.check}: {r.what}", hint=r.fix or None)
        for r in failed
    ]
    # A host whose every check was skipped was not checked, which is not a pass.
    unchecked = sorted(h for h, c in by_host.items() if c["skipped"] == c.total())
    for host in unchecked:
        reason = next(r.message for r in results if r.host == host) or "no reason given"
        findings.append(
            Finding(
                "host_not_checked",
                f"{host}: not checked: every check was skipped (the first: {reason})",
                hint="make the checks apply to this host (its arch, --bundle), then run again",
            )
        )
    bad = {r.host for r in failed} | set(unchecked)
    verdict = (
        f"{len(bad)} of {len(by_host)} host(s) failed {len(findings)} check(s)"
        if findings
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
        ("hosts", "check"),
        data=data,
        tables=tuple(tables),
        lines=(verdict,),
        findings=tuple(findings),
    )

"""The host checks: pytest-testinfra over the inventory the playbooks use.

Run through `sglx hosts check --inventory INV [--arch ARCH] [--mode preflight|acceptance]`
(or `make check-hosts`), which passes testinfra's Ansible backend (`--hosts`,
`--ansible-inventory`, `--sudo`), spreads hosts over pytest-xdist workers and turns the JUnit
report into a one-screen summary. Each check names what is wrong and the fix.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from facts import HostFacts, host_facts, use_bundle
from probes import connection_problem

MODES = ("preflight", "acceptance")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("sglx host checks")
    group.addoption(
        "--sglx-arch", default=None, help="arch profile (default: each host's sglx_arch)"
    )
    group.addoption(
        "--sglx-mode",
        choices=MODES,
        default="preflight",
        help="preflight: before a rollout; acceptance: preflight plus the running server",
    )
    group.addoption(
        "--sglx-bundle",
        default=None,
        type=Path,
        help="the bundle folder on this (control) machine: its size and digest",
    )


def pytest_configure(config: pytest.Config) -> None:
    """With --sglx-bundle, the hosts are checked against the bundle's own profile."""
    use_bundle(config.getoption("--sglx-bundle"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Preflight runs the preflight checks only; acceptance runs both kinds."""
    if config.getoption("--sglx-mode") == "acceptance":
        return
    keep = [item for item in items if item.get_closest_marker("acceptance") is None]
    dropped = [item for item in items if item.get_closest_marker("acceptance") is not None]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(scope="module", autouse=True)
def _connected(host: Any, request: pytest.FixtureRequest) -> None:
    """Every check runs commands on its host. When none can run (unreachable, no sudo), the
    `connection` check fails once for that host and its other checks are skipped, not each
    failed with the same SSH error."""
    if request.module.__name__ != "test_connection" and connection_problem(host) is not None:
        pytest.skip("not checked: no command runs on this host (see connection)")


@pytest.fixture(scope="module")
def facts(host: Any, request: pytest.FixtureRequest) -> HostFacts:
    inventory_vars = host.ansible.get_variables()
    try:
        return host_facts(
            inventory_vars["inventory_hostname"],
            inventory_vars,
            request.config.getoption("--sglx-arch"),
        )
    except ValueError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def bundle_dir(request: pytest.FixtureRequest) -> Path | None:
    folder: Path | None = request.config.getoption("--sglx-bundle")
    return folder

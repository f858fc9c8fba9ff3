"""How `make test` splits the run between its two pytest-xdist workers (`--dist loadfile`).

A worker takes whole files, so that a module's fixtures are built once, on one worker. Files
that share a state of the one Docker engine with another file are one unit, run in one worker
in collection order (`SHARED`). The files start in an order that keeps both workers busy
(`start_order`), and the worker that does not run the e2e module yields the CPU to the one that
does (`YIELDING_NICENESS`): the e2e chain is the run's longest path, and two cores are all
there is.

xdist's own grouping (`--dist loadgroup` and the `xdist_group` mark) is not used: with pytest
9.2 it finds no group (xdist 3.8 writes the group into `Item._nodeid`, which pytest 9.2 no
longer reads), so the tests of one module went to both workers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

# Niceness of the worker off the e2e path (its children inherit it: pip, ansible-playbook, sglx).
YIELDING_NICENESS = 10

SHARED = {
    # test_bundle_cpu takes the bundle's image out of the engine and loads it back; the e2e
    # test hosts serve that image.
    "tests/e2e/test_ansible_rollout.py": "cpu-bundle",
    "tests/integration/test_bundle_cpu.py": "cpu-bundle",
    # test_image_prune prunes the deps cache that test_image_cpu's rebuild uses, so it runs
    # after it.
    "tests/integration/test_image_cpu.py": "cpu-build-cache",
    "tests/integration/test_image_prune.py": "cpu-build-cache",
}


class SharedFileScheduling(LoadFileScheduling):  # type: ignore[misc]
    """loadfile, with the files of `SHARED` as one unit each."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return SHARED.get(path, path)


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    return SharedFileScheduling(config, log)


def start_order(item: pytest.Item) -> int:
    """The e2e module first: it waits longest on its chain (cpu base, wheels, image, bundle:
    11 minutes) and runs longest after it. The unit tests meanwhile on the other worker, then
    the engine tests that need no cpu image, and the tests of the cpu image last, when it is
    built."""
    parts = item.path.parts
    if "e2e" in parts:
        return 0
    if "unit" in parts:
        return 1
    return 3 if {"cpu_image", "cpu_bundle"} & set(item.fixturenames) else 2


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files in start order (a file's rank: its latest test's), each keeping its place
    among its equals. The workers send this order to xdist, which hands out files in it."""
    rank: dict[Path, int] = {}
    for item in items:
        rank[item.path] = max(rank.get(item.path, 0), start_order(item))
    items.sort(key=lambda item: rank[item.path])


_first_test_seen = False


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A worker whose first test is not the e2e module's runs niced from then on. The e2e
    worker keeps its priority: its chain (cpu image, bundle) and servers gate the run's end,
    while the other worker's work has room around them."""
    global _first_test_seen
    if _first_test_seen or not hasattr(item.config, "workerinput"):
        return
    _first_test_seen = True
    if start_order(item) != 0:
        os.nice(YIELDING_NICENESS)

"""How `make test` orders the run: two pytest-xdist workers in lanes (the default), or alone.

In lanes (`TEST_WORKERS=2`, `--dist loadfile`): the first worker (`MAIN_WORKER`) takes every
file that uses the engine, in start order, and the other takes the unit files (`lane`), niced
(`YIELDING_NICENESS`, its children too: ansible-playbook, sglx) so that its work fills the
cores the engine work leaves idle and never slows it. The first worker builds the cpu chain
(base, wheels, image, bundle: about eight minutes, on one core mostly) in a thread from its
first test (`_cpu_chain_ahead`); its e2e module starts at once (its hosts need only the base,
its rollout waits for the bundle), then come the engine tests that need no cpu image, and the
tests of the cpu image last. While the e2e runs (twenty minutes, much of it waiting on servers
and Ansible), the same thread builds the vendor image sets (helpers/vendor_images.py, about
eight minutes that the engine tests after the e2e otherwise waited for), scans the cpu bundle
and scans the upstream images (about a minute and a half that test_image_rocm_upstream
otherwise spent after the e2e).

Alone (`TEST_WORKERS=1`): the same thread, with the unit tests first beside it, then the same
order. The unit tests (about eleven minutes) then sat on the run's critical path, ahead of the
e2e module, where in lanes they run beside it.

The engine tests are never split between workers: when they were (xdist's own load
balancing), two workers took 45 to 49 minutes of CI against one's 32, each worker's engine work
(builds, saves, servers) slowing the other's more than the second worker added.

xdist's own grouping (`--dist loadgroup` and the `xdist_group` mark) is not used: with pytest
9.2 it finds no group (xdist 3.8 writes the group into `Item._nodeid`, which pytest 9.2 no
longer reads), so the tests of one module went to both workers.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadFileScheduling

# Niceness of the unit lane's worker (its children inherit it: pip, ansible-playbook, sglx).
YIELDING_NICENESS = 10
# The worker that runs the engine lane (xdist names its workers gw0, gw1, ...).
MAIN_WORKER = "gw0"

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


def lane(scope: str) -> str:
    """A file's lane: `unit` (no engine) or `engine` (everything else, one worker's)."""
    return "unit" if scope.startswith("tests/unit/") else "engine"


def is_main_worker(config: pytest.Config) -> bool:
    """True alone and in the engine lane's worker."""
    workerinput = getattr(config, "workerinput", None)
    return workerinput is None or workerinput["workerid"] == MAIN_WORKER


class LaneScheduling(LoadFileScheduling):  # type: ignore[misc]
    """loadfile, in lanes: `MAIN_WORKER` takes the engine lane's files, the other workers the
    unit lane's, each in start order. The files of `SHARED` are one unit each. A worker whose
    lane is empty is shut down; a lane with no worker left goes to the workers still up."""

    def _split_scope(self, nodeid: str) -> str:
        path = nodeid.split("::", 1)[0]
        return SHARED.get(path, path)

    def _assign_work_unit(self, node: Any) -> None:
        up = {lane_of_worker(other) for other in self.nodes if not other.shutting_down}
        wanted = {lane_of_worker(node)} if len(up) > 1 else {"engine", "unit"}
        scope = next((scope for scope in self.workqueue if lane(scope) in wanted), None)
        if scope is None:
            node.shutdown()
            return
        self.workqueue.move_to_end(scope, last=False)
        super()._assign_work_unit(node)


def lane_of_worker(node: Any) -> str:
    return "engine" if node.workerinput["workerid"] == MAIN_WORKER else "unit"


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    return LaneScheduling(config, log)


def _uses_cpu_image(item: pytest.Item) -> bool:
    return bool({"cpu_image", "cpu_bundle", "cpu_bundle_scan"} & set(item.fixturenames))


def start_order(item: pytest.Item) -> int:
    """The unit tests first (alone, beside the chain's thread; in lanes, their own worker's),
    the e2e module, the engine tests that need no cpu image, the tests of the cpu image last."""
    parts = item.path.parts
    if "unit" in parts:
        return 0
    if "e2e" in parts:
        return 1
    return 3 if _uses_cpu_image(item) else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files in start order (a file's rank: its latest test's), each keeping its place
    among its equals. In lanes, each worker sends this order to xdist, which hands out the
    files of each lane in it."""
    rank: dict[Path, int] = {}
    for item in items:
        rank[item.path] = max(rank.get(item.path, 0), start_order(item))
    items.sort(key=lambda item: rank[item.path])


@pytest.fixture(scope="session", autouse=True)
def _cpu_chain_ahead(request: pytest.FixtureRequest) -> Iterator[None]:
    """A run that will need the cpu bundle builds its chain in a thread from its first test,
    alone or in the engine lane's worker: the chain works one core mostly, and the unit tests
    (first, alone; beside, in lanes) take the other.
    The fixtures that need a part of it wait for that part (run_shared.once's lock); a part
    that failed fails them with its reason."""
    items = request.session.items
    if not is_main_worker(request.config) or not any(
        _uses_cpu_image(item) or "e2e" in item.path.parts for item in items
    ):
        yield
        return
    from helpers.engine_fixtures import make_cpu_bundle, scan_cpu_bundle
    from helpers.vendor_images import (
        build_fixture_images,
        build_upstream_images,
        scan_upstream_images,
    )

    # The vendor image sets (minutes of building each, on the cpu base and wheelhouse only),
    # built beside the e2e for the modules that run after it; only for a run that has them.
    used = {name for item in items for name in item.fixturenames}
    vendor_sets = [
        build
        for fixture, build in (
            ("upstream_set", build_upstream_images),
            ("fixture_set", build_fixture_images),
        )
        if fixture in used
    ]

    try:
        request.getfixturevalue("docker")  # notes the engine's images before the chain adds any
    except Exception:  # no engine: the engine tests fail with its error, the others run
        yield
        return
    arguments = (
        request.config,
        request.getfixturevalue("tmp_path_factory"),
        request.getfixturevalue("run_id"),
    )
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="cpu-chain") as pool:
        ahead = [pool.submit(make_cpu_bundle, *arguments)]
        # Then, beside the e2e, the vendor image sets (their modules run next) and the
        # bundle's one scan (the tests of the cpu image, which run last, read it).
        ahead += [pool.submit(build, *arguments) for build in vendor_sets]
        ahead.append(pool.submit(scan_cpu_bundle, *arguments))
        if build_upstream_images in vendor_sets:  # and the upstream images' scans
            ahead.append(pool.submit(scan_upstream_images, *arguments))
        yield
        for future in ahead:
            future.exception()  # waited for; a failure was reported by the tests that needed it


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """The unit lane's worker runs niced from its start: the engine lane's chain and servers
    gate the run's end, while the unit tests have room around them."""
    if not is_main_worker(config):
        os.nice(YIELDING_NICENESS)

"""How `make test` orders the run, split between two pytest-xdist workers (the default) or
alone.

Alone (`TEST_WORKERS=1`): the cpu chain (base, wheels, image, bundle: about eight minutes, on
one core mostly) is built in a thread from the run's start (`_cpu_chain_ahead`), and the unit
tests take the other core meanwhile; then the e2e module (its hosts need only the base, its
rollout waits for the bundle), the engine tests that need no cpu image, and the tests of the
cpu image last. While the e2e runs (twenty minutes, much of it waiting on servers and
Ansible), the same thread builds the vendor image sets (helpers/vendor_images.py, about eight
minutes that the engine tests after the e2e otherwise waited for), scans the cpu bundle and
scans the upstream images (about a minute and a half that test_image_rocm_upstream otherwise
spent after the e2e).

On this project's two-core machines, alone was once the faster way (two workers took 45 to 49
minutes of CI, one 32, when the e2e was a third of its length). Since the e2e grew to twenty
minutes with a quarter of both cores idle, and the engine tests to ten with two fifths idle,
two workers are: 38:05 of pytest and 40:02 of .ci/run (2026-12-05, the site engines' module
included, every e2e break case passing beside the other worker's builds) against 39:53 to
42:55 of pytest alone. The e2e worker is the longer path (the chain, then the e2e, about a
third slower beside the other worker's builds, then test_bundle_cpu, which shares its engine
state); the other worker ends a few minutes before it.

With workers (`TEST_WORKERS=2`, `--dist loadfile`): a worker takes whole files, so that a
module's fixtures are built once, on one worker. Files that share a state of the one Docker
engine with another file are one unit, run in one worker in collection order (`SHARED`). The
e2e module starts first, and the worker that does not run it yields the CPU to the one that
does (`YIELDING_NICENESS`) until the e2e module is done.

xdist's own grouping (`--dist loadgroup` and the `xdist_group` mark) is not used: with pytest
9.2 it finds no group (xdist 3.8 writes the group into `Item._nodeid`, which pytest 9.2 no
longer reads), so the tests of one module went to both workers.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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


def _uses_cpu_image(item: pytest.Item) -> bool:
    return bool({"cpu_image", "cpu_bundle", "cpu_bundle_scan"} & set(item.fixturenames))


def start_order(item: pytest.Item, *, workers: bool) -> int:
    """Alone: the unit tests first (beside the chain's thread), the e2e module, the engine
    tests that need no cpu image, the tests of the cpu image last. With workers: the e2e
    module first (it waits longest on the chain and runs longest after it), the unit tests
    meanwhile on the other worker, then the same engine tests as alone."""
    parts = item.path.parts
    if "e2e" in parts:
        return 0 if workers else 1
    if "unit" in parts:
        return 1 if workers else 0
    return 3 if _uses_cpu_image(item) else 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files in start order (a file's rank: its latest test's), each keeping its place
    among its equals. With workers, each sends this order to xdist, which hands out files
    in it."""
    workers = hasattr(config, "workerinput")
    rank: dict[Path, int] = {}
    for item in items:
        rank[item.path] = max(rank.get(item.path, 0), start_order(item, workers=workers))
    items.sort(key=lambda item: rank[item.path])


@pytest.fixture(scope="session", autouse=True)
def _cpu_chain_ahead(request: pytest.FixtureRequest) -> Iterator[None]:
    """Alone, a run that will need the cpu bundle builds its chain in a thread from its first
    test: the chain works one core mostly, and the unit tests that run first take the other.
    The fixtures that need a part of it wait for that part (run_shared.once's lock); a part
    that failed fails them with its reason."""
    items = request.session.items
    if hasattr(request.config, "workerinput") or not any(
        _uses_cpu_image(item) or "e2e" in item.path.parts for item in items
    ):
        yield
        return
    from helpers.engine_fixtures import make_cpu_bundle, scan_cpu_bundle
    from helpers.site_engines import engine_images
    from helpers.vendor_images import (
        build_fixture_images,
        build_upstream_images,
        scan_upstream_images,
    )

    # The vendor image sets (minutes of building each, on the cpu base and wheelhouse only) and
    # the site engines' image, built beside the e2e for the modules that run after it; only
    # for a run that has them.
    used = {name for item in items for name in item.fixturenames}
    vendor_sets = [
        build
        for fixture, build in (
            ("upstream_set", build_upstream_images),
            ("fixture_set", build_fixture_images),
            ("site_engine_images", engine_images),  # the site engines' (two minutes each)
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


_first_test_seen = False
_yielded_from: int | None = None  # this worker's niceness before it yielded, while it yields
E2E_DONE = "e2e-done"  # a file in the run's shared folder: the e2e module has finished


def _e2e_done(config: pytest.Config) -> Path:
    from helpers.run_shared import shared_folder

    return shared_folder(config) / E2E_DONE


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A worker whose first test is not the e2e module's runs niced from then on, until the
    e2e module is done. The e2e worker keeps its priority: its chain (cpu image, bundle) and
    servers gate the run's end, while the other worker's work has room around them. Once the
    e2e is done, the rest of the run is both workers' own, and a worker still niced would get
    a tenth of a core from any other process on the machine: it takes its priority back."""
    global _first_test_seen, _yielded_from
    if not hasattr(item.config, "workerinput"):
        return
    if not _first_test_seen:
        _first_test_seen = True
        if start_order(item, workers=True) != 0:
            _yielded_from = os.getpriority(os.PRIO_PROCESS, 0)
            os.nice(YIELDING_NICENESS)
        return
    if _yielded_from is not None and _e2e_done(item.config).exists():
        with contextlib.suppress(PermissionError):  # lowering it takes root
            os.setpriority(os.PRIO_PROCESS, 0, _yielded_from)
        _yielded_from = None


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """The e2e worker marks the e2e module done after its last test."""
    if not hasattr(item.config, "workerinput") or "e2e" not in item.path.parts:
        return
    if nextitem is None or nextitem.path != item.path:
        _e2e_done(item.config).touch()

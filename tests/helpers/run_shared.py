"""What the test processes of one run share: resources built once, and their cleanup.

A session fixture runs once per process, and `make test TEST_WORKERS=2` runs the suite in two
pytest-xdist workers, while a run alone builds the cpu chain in a thread beside its tests: the
cpu base, wheelhouse, image and bundle (eight minutes of building, 20 GB) would be built twice.
Instead the first process or thread that needs one builds it under a file lock in the run's
shared folder and records it there; the others wait on the lock and read the record. A build
that failed is recorded too, so the others fail at once with its reason instead of building it
again.

Nothing recorded is removed by a worker: the other one may still use it. The process that
started the run (xdist's controller, or pytest itself without workers) removes every
recorded image and folder at the end of the run, newest first, and then the untagged images
the run's builds left behind (see `note_engine_images`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from sglx.engine import image_ids

ENGINE_BEFORE = "engine-images-before.json"


@dataclass
class Made:
    """A resource a fixture built: what the tests get, and what the run removes at its end."""

    value: Any
    images: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)


def shared_folder(config: pytest.Config) -> Path:
    """The run's basetemp: a worker's own basetemp is a folder inside it (xdist makes it so)."""
    # xdist itself reads the controller's temp root this way.
    base = Path(config._tmp_path_factory.getbasetemp())  # type: ignore[attr-defined]
    return base.parent if hasattr(config, "workerinput") else base


def _write(path: Path, data: dict[str, Any]) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    with os.fdopen(fd, "w") as handle:
        json.dump(data, handle)
    Path(temp).replace(path)


def once(config: pytest.Config, name: str, make: Callable[[], Made]) -> Any:
    """`make()`'s value, built by the first process of the run that asks for `name`."""
    folder = shared_folder(config)
    record = folder / f"{name}.json"
    with FileLock(str(record) + ".lock"):
        if not record.exists():
            started = time.time()
            try:
                made = make()
            except BaseException as error:  # pytest's Failed is a BaseException
                _write(record, {"ok": False, "error": f"{type(error).__name__}: {error}"})
                raise
            _write(record, {"ok": True, "value": made.value, "images": made.images,
                            "paths": made.paths, "started": started,
                            "seconds": time.time() - started})  # fmt: skip
            return made.value
        data = json.loads(record.read_text())
    if not data["ok"]:
        pytest.fail(f"{name} failed to build earlier in this run: {data['error']}", pytrace=False)
    return data["value"]


def build_times(config: pytest.Config) -> list[str]:
    """One line per resource this run built once, in the order they started: its name, when
    it started (seconds after the first), and how long its build took, waits on the other
    builds it needed included."""
    records = []
    for path in shared_folder(config).glob("*.json"):
        data = json.loads(path.read_text()) if path.name != ENGINE_BEFORE else {}
        if "seconds" in data:
            records.append((data["started"], path.stem, data["seconds"]))
    if not records:
        return []
    first = min(started for started, _, _ in records)
    return [
        f"{name:<24} started at {started - first:6.0f} s, took {seconds:6.0f} s"
        for started, name, seconds in sorted(records)
    ]


# Runs that use the engine now, one file each (the controller's pid): an untagged image is only
# this run's leftover when no other run could have made it meanwhile.
RUNS_USING_THE_ENGINE = Path(tempfile.gettempdir()) / "sglx-test-runs"


def note_engine_images(config: pytest.Config, client: Any) -> None:
    """Remember the engine's image ids the first time a process of the run uses the engine:
    untagged images that are not among them are this run's leftovers, unless another run used
    the engine meanwhile (`RUNS_USING_THE_ENGINE`)."""
    path = shared_folder(config) / ENGINE_BEFORE
    with FileLock(str(path) + ".lock"):
        if not path.exists():
            RUNS_USING_THE_ENGINE.mkdir(exist_ok=True)
            (RUNS_USING_THE_ENGINE / str(_controller_pid(config))).touch()
            _write(path, {"ids": sorted(image_ids(client))})


def _controller_pid(config: pytest.Config) -> int:
    """The pid of the process that started the run (xdist's controller, or pytest itself)."""
    worker = getattr(config, "workerinput", None)
    return int(os.getppid()) if worker is not None else os.getpid()


def _other_runs_alive(config: pytest.Config) -> list[int]:
    """The other runs that noted the engine and are still running (stale files removed)."""
    mine, alive = _controller_pid(config), []
    for marker in RUNS_USING_THE_ENGINE.glob("*"):
        pid = int(marker.name) if marker.name.isdigit() else -1
        if pid == mine:
            continue
        try:
            os.kill(pid, 0)
        except (ProcessLookupError, ValueError):
            marker.unlink(missing_ok=True)
            continue
        except PermissionError:
            pass
        alive.append(pid)
    return alive


def clean_up(config: pytest.Config) -> None:
    """Remove what the run recorded (newest first), then the untagged images it left."""
    if hasattr(config, "workerinput"):
        return
    folder = shared_folder(config)
    records = []
    for path in folder.glob("*.json"):
        if path.name == ENGINE_BEFORE:
            continue
        data = json.loads(path.read_text())
        if data.get("ok"):
            records.append((path.stat().st_mtime, data))
    before_path = folder / ENGINE_BEFORE
    if not records and not before_path.exists():
        return  # the run never used the engine
    from docker.errors import DockerException

    from sglx.engine import docker_client

    client = docker_client()
    for _, data in sorted(records, key=lambda item: item[0], reverse=True):
        for tag in data["images"]:
            with contextlib.suppress(DockerException):
                client.images.remove(tag, force=True)
        for path_text in data["paths"]:
            shutil.rmtree(path_text, ignore_errors=True)
    others = _other_runs_alive(config)
    (RUNS_USING_THE_ENGINE / str(_controller_pid(config))).unlink(missing_ok=True)
    if before_path.exists() and others:
        print(f"\nleft the engine's untagged images: other test runs use it (pids {others})")
    elif before_path.exists():
        before = set(json.loads(before_path.read_text())["ids"])
        for image in client.images.list(filters={"dangling": True}):
            if image.id not in before:
                with contextlib.suppress(DockerException):
                    client.images.remove(image.id)

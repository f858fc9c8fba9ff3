"""Two server containers on one host bring their devices up one after the other (issue 22).

Both are the cpu image, started with the device-init lock's mount and variable exactly as every
`docker run` sglx writes them carry them (`sglx_core.device_lock.lock_dir_words`, behind the unit's
arguments and install.sh's line), the host folder pointed at a folder of this test. Each runs
the plugin's real `init_device` (what the plugin's parallel-runtime hook calls) with a fake
device operation that records its start and end as numbered marker files in a second shared
folder. The first holds its "device" until the test releases it, which the test does only once
the second has logged that it waits for the lock. The order of the markers, never a timing,
shows that the second's init started only after the first's had ended.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sglx_core.device_lock import lock_dir_words
from sglx_core.profile import load_profile

pytestmark = [pytest.mark.docker]

# Run in each container as `python -c PROGRAM NAME`. A marker is a file named by the next free
# number (O_EXCL), so the two containers write one sequence; "first" holds its init until the
# test creates /events/release.
PROGRAM = """
import itertools, logging, os, sys, time
from pathlib import Path
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s", stream=sys.stdout)
from sglx_platform.device_init import init_device
name, events = sys.argv[1], Path("/events")

def note(what):
    for n in itertools.count():
        try:
            fd = os.open(events / f"{n:04d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        os.write(fd, f"{name} {what}".encode())
        os.close(fd)
        return

def touch():
    note("init-start")
    while name == "first" and not (events / "release").exists():
        time.sleep(0.05)
    note("init-end")

init_device(touch, name + " fake device")
print(name + ": done", flush=True)
"""
WAITING = "waiting for the device-init lock /run/lock/sglx:"
# Bounds on waiting for a container to reach a step, not assertions: a slow engine only delays.
STEP_TIMEOUT_S = 120


def markers(events: Path) -> list[str]:
    return [p.read_text() for p in sorted(events.iterdir()) if p.name.isdigit()]


def logs(name: str) -> str:
    done = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
    return done.stdout + done.stderr


def wait_for(what: str, ready: Any, *names: str) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            said = "\n".join(f"--- {n}:\n{logs(n)}" for n in names)
            raise AssertionError(f"never saw {what}\n{said}")
        time.sleep(0.1)


@pytest.fixture
def containers(run_id: str) -> Iterator[list[str]]:
    """Names for this test's containers, removed (and only they) whatever happens."""
    names = [f"sglx-test-lock-{run_id}-first", f"sglx-test-lock-{run_id}-second"]
    try:
        yield names
    finally:
        subprocess.run(["docker", "rm", "-f", *names], capture_output=True, check=False)


def test_a_second_server_on_the_host_waits_for_the_first_to_init(
    cpu_image: dict[str, Any], containers: list[str], tmp_path: Path
) -> None:
    profile = load_profile("cpu")
    host_folder = tmp_path / "lock"
    host_folder.mkdir(mode=0o755)
    events = tmp_path / "events"
    events.mkdir()
    events.chmod(0o777)  # the image's user writes the markers
    lock = profile.container.lock_dir.model_copy(update={"source": str(host_folder)})
    container = profile.container.model_copy(update={"lock_dir": lock})
    lock_words = lock_dir_words(profile.model_copy(update={"container": container}))
    assert lock_words[1] == f"{host_folder}:{profile.container.lock_dir.target}:ro"

    def start(name: str, role: str) -> None:
        subprocess.run(
            ["docker", "run", "-d", "--name", name, "--network", "none", *lock_words,
             "-v", f"{events}:/events", "-e", "SGLX_INIT_TIMEOUT_S=600",
             "--entrypoint", "python", cpu_image["tag"], "-c", PROGRAM, role],
            check=True, capture_output=True,
        )  # fmt: skip

    first, second = containers
    start(first, "first")
    wait_for("the first's init start", lambda: markers(events) == ["first init-start"], first)
    start(second, "second")
    wait_for("the second wait for the lock", lambda: WAITING in logs(second), first, second)
    assert markers(events) == ["first init-start"]  # the second waits; it has not begun
    (events / "release").touch()
    for name in containers:
        done = subprocess.run(["docker", "wait", name], capture_output=True, text=True, check=True)
        assert done.stdout.strip() == "0", logs(name)
    assert markers(events) == [
        "first init-start",
        "first init-end",
        "second init-start",
        "second init-end",
    ]
    first_log, second_log = logs(first), logs(second)
    assert WAITING not in first_log and "first: done" in first_log
    assert second_log.index(WAITING) < second_log.index("took the device-init lock")
    assert "second: done" in second_log

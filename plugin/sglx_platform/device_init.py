"""Bring the device up robustly: one process at a time per host, with a timeout and retries.

Vendor runtimes fail in two ways that look alike from the outside: a transient error while
another process holds the device (retry helps) and a hang inside the driver (retry does not;
the operator needs to know it hung). A host-wide file lock serialises initialisation across
the ranks and servers on one machine, which is also what keeps concurrent first inits of some
runtimes from racing.

Host-wide means one folder that every server container on the host shares: sglx mounts the
profile's `container.lock_dir` host folder into each container it runs and names it in
$SGLX_LOCK_DIR (scripts/sglx/device_lock.py). The folder itself is locked, so the lock needs
no write access there and a folder `docker run -v` created root-owned serves any container user.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sglx_core.device_lock import LOCK_DIR_ENV
from sglx_platform import metrics
from sglx_platform.failures import FailureClass, PlatformError

logger = logging.getLogger(__name__)

TIMEOUT_ENV = "SGLX_INIT_TIMEOUT_S"
RETRIES_ENV = "SGLX_INIT_RETRIES"
LOCK_NAME = "sglx-device-init.lock"


def _setting(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        raise PlatformError(
            FailureClass.CONFIG_REFUSED,
            f"{name}={os.environ[name]!r} is not a number",
            f"set {name} to seconds (or a count), or unset it",
        ) from None


def lock_path() -> Path:
    """What the device-init flock is taken on: the folder $SGLX_LOCK_DIR names (the host folder
    mounted there), else a file in /var/lock (else /tmp), which the processes of one container
    share but other containers do not.

    A set $SGLX_LOCK_DIR that is not a readable folder is refused: it means the mount is missing,
    and falling back to a folder of this container would let two servers on the host initialise
    their devices at once again.
    """
    configured = os.environ.get(LOCK_DIR_ENV)
    if configured:
        folder = Path(configured)
        if not folder.is_dir() or not os.access(folder, os.R_OK | os.X_OK):
            raise PlatformError(
                FailureClass.CONFIG_REFUSED,
                f"{LOCK_DIR_ENV}={configured!r} is not a folder this process can read, so the "
                "device-init lock cannot be host-wide",
                "mount the host folder of the device-init lock there, as the systemd unit and "
                "the `docker run` line `sglx bundle install` prints do (-v SOURCE:TARGET, the "
                f"profile's container.lock_dir; mode 0755), or unset {LOCK_DIR_ENV}",
            )
        return folder
    folder = Path("/var/lock")
    if not os.access(folder, os.W_OK):
        folder = Path("/tmp")
    return folder / LOCK_NAME


def _open_lockable(path: Path) -> int:
    """A descriptor to flock `path` through: a folder is opened read-only (flock needs no
    more), a lock file is created when missing."""
    if path.is_dir():
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


@contextmanager
def host_lock(path: Path, timeout_s: float) -> Iterator[None]:
    """An exclusive flock on `path` (a folder or a lock file), waited for at most `timeout_s`
    seconds; the wait is logged once, naming the lock, so an operator sees why a server is
    slow to start while another initialises its devices."""
    handle = _open_lockable(path)
    try:
        deadline = time.monotonic() + timeout_s
        waiting = False
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waiting:
                    waiting = True
                    logger.info(
                        "sglx: waiting for the device-init lock %s: another process on this "
                        "host is initialising a device (at most %.0f s)",
                        path,
                        timeout_s,
                    )
                if time.monotonic() > deadline:
                    raise PlatformError(
                        FailureClass.INIT_HANG,
                        f"waited {timeout_s:.0f} s for the device-init lock {path}",
                        "another process on this host is stuck initialising a device; find it "
                        f"with `fuser {path}` and stop it",
                    ) from None
                time.sleep(0.2)
        if waiting:
            logger.info("sglx: took the device-init lock %s", path)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
    finally:
        os.close(handle)


def init_device(touch: Callable[[], None], what: str) -> None:
    """Run `touch` (the first device operation) under the host lock, with timeout and retries.

    A `touch` that does not return within the timeout is an init hang (reported at once, not
    retried: the thread may be stuck in the driver); one that raises is retried with backoff,
    then reported as a device init failure with the last error.
    """
    timeout_s = _setting(TIMEOUT_ENV, 120)
    retries = int(_setting(RETRIES_ENV, 2))
    asked = time.monotonic()
    with host_lock(lock_path(), timeout_s):
        metrics.record_lock_wait(time.monotonic() - asked)  # beside sglang's, at /metrics
        for attempt in range(retries + 1):
            error = _run_with_timeout(touch, timeout_s)
            if error is None:
                if attempt:
                    logger.info("sglx: %s came up on attempt %d", what, attempt + 1)
                return
            if isinstance(error, TimeoutError):
                raise PlatformError(
                    FailureClass.INIT_HANG,
                    f"{what} did not finish initialising within {timeout_s:.0f} s",
                    "check the device with the vendor tool (rocm-smi, xpu-smi), that no other "
                    f"process holds it, and the kernel log; raise {TIMEOUT_ENV} only if the "
                    "device is known to be slow to start",
                )
            logger.warning("sglx: %s init attempt %d failed: %s", what, attempt + 1, error)
            if attempt < retries:
                time.sleep(min(2.0**attempt, 10.0))
        raise PlatformError(
            FailureClass.DEVICE_INIT_FAILED,
            f"{what} failed to initialise after {retries + 1} attempts: {error}",
            "check that the device nodes are passed to the container and readable by its user, "
            "and that the host driver matches the image (run sglx-preflight)",
        )


def _run_with_timeout(fn: Callable[[], None], timeout_s: float) -> BaseException | None:
    outcome: list[BaseException | None] = []

    def target() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as exc:  # reported to the caller, classified there
            outcome.append(exc)

    thread = threading.Thread(target=target, name="sglx-device-init", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        return TimeoutError()
    return outcome[0]

"""Runs the probe child and turns what it reported, and how it ended, into checks.

The child's reports arrive on a pipe of their own (see `protocol`); its stdout and stderr go to
files, read only to explain a crash. A child that hangs past the timeout is killed with its
process group and the step it was in fails as `init_hang`; a child that dies fails the step it
was in with that step's class, however well the earlier steps went.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import IO

from sglx_platform.failures import FailureClass
from sglx_runtime.preflight.checks import Check, failed
from sglx_runtime.preflight.environment import probe_environment
from sglx_runtime.preflight.protocol import ProtocolError, read_events
from sglx_runtime.preflight.steps import DIED, Step

MODULES = ("torch", "sglang.srt.server_args", "sglx_platform.platforms.base")
CHILD_MODULE = "sglx_runtime.preflight.child"
TAIL_LINES = 6


@dataclass
class _Progress:
    checks: list[Check] = field(default_factory=list)
    running: Step | None = None
    ended: bool = False


def child_checks(
    libraries: Sequence[str],
    *,
    device_type: str,
    server_argv: Sequence[str] | None,
    timeout_s: float,
) -> list[Check]:
    spec = {
        "libraries": list(libraries),
        "modules": list(MODULES),
        "device_type": device_type,
        "server_argv": None if server_argv is None else list(server_argv),
    }
    progress = _Progress()
    read_fd, write_fd = os.pipe()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            child = subprocess.Popen(
                [sys.executable, "-m", CHILD_MODULE, str(write_fd)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                pass_fds=(write_fd,),
                env=probe_environment(),
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        try:
            assert child.stdin is not None
            with child.stdin:
                child.stdin.write(json.dumps(spec).encode())
            _follow(read_fd, progress, time.monotonic() + timeout_s)
        except TimeoutError:
            _kill(child)
            progress.checks.append(_hang(progress.running, timeout_s))
            return progress.checks
        except (ProtocolError, BrokenPipeError) as exc:
            _kill(child)
            progress.checks.append(_died(progress.running, f"a broken report ({exc})", err))
            return progress.checks
        finally:
            os.close(read_fd)
        code = _wait(child)
        if code != 0 or not progress.ended:
            progress.checks.append(_died(progress.running, _how(code), err))
    return progress.checks


def _follow(fd: int, progress: _Progress, deadline: float) -> None:
    for event in read_events(fd, deadline):
        kind = event["event"]
        if kind == "start":
            progress.running = Step(event["kind"], str(event["target"]))
        elif kind == "check":
            progress.checks.append(Check.from_json(event["check"]))
        elif kind == "finish":
            progress.running = None
        else:
            progress.ended = True


def _wait(child: subprocess.Popen[bytes]) -> int:
    """The child's exit status once its report pipe closed (it is exiting)."""
    try:
        return child.wait(timeout=30)
    except subprocess.TimeoutExpired:
        _kill(child)
        return child.wait()


def _kill(child: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)
    child.wait()


def _how(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if code > 0:
        return f"exited with status {code}"
    return "exited before reporting every step"


def _died(step: Step | None, how: str, err: IO[bytes]) -> Check:
    tail = _tail(err)
    said = f"; its last words: {tail}" if tail else ""
    if step is None:
        return failed(
            "probe",
            f"the probe process {how} between steps{said}",
            FailureClass.PLUGIN_NOT_FOUND,
            "the serving environment cannot run Python's probe: rebuild the image from its lock",
        )
    failure, fix = DIED[step.kind]
    return failed(step.name, f"the probe process {how} during this step{said}", failure, fix)


def _hang(step: Step | None, timeout_s: float) -> Check:
    stuck = step.name if step else "the probe process"
    return failed(
        "init",
        f"{stuck} did not finish within {timeout_s:.0f} s",
        FailureClass.INIT_HANG,
        "check the device and driver (vendor smi tool, kernel log), and "
        "that no other process holds the device",
    )


def _tail(err: IO[bytes]) -> str:
    err.seek(0, os.SEEK_END)
    size = err.tell()
    err.seek(max(0, size - 8192))
    lines = [line.strip() for line in err.read().decode(errors="replace").splitlines()]
    return " | ".join(line for line in lines[-TAIL_LINES:] if line)

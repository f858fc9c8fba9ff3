"""Work on several cores and child processes: how many workers this process may use, and
a child's output streamed as it runs."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence

from sglx_core.errors import SglxError


def default_jobs(cap: int | None = None) -> int:
    """Worker threads for parallel work: the cores this process may run on (its affinity, as
    a container's cpuset limits it), at most `cap`."""
    cores = max(1, len(os.sched_getaffinity(0)))
    return cores if cap is None else min(cap, cores)


def run_streaming(
    argv: Sequence[str],
    *,
    on_line: Callable[[str], None],
    timeout: float,
    what: str,
    hint: str,
) -> None:
    """Run `argv`, hand each output line to `on_line`; on failure show the tail of the output.

    A watchdog kills the process after `timeout` seconds even if it prints nothing.
    """
    tail: list[str] = []
    try:
        proc = subprocess.Popen(
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
    except FileNotFoundError:
        raise SglxError(f"{argv[0]} not found", hint=hint, code="environment") from None
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    try:
        for line in proc.stdout or ():
            tail = [*tail[-19:], line.rstrip()]
            on_line(tail[-1])
        proc.wait()
    finally:
        watchdog.cancel()
        if proc.stdout is not None:
            proc.stdout.close()
    if proc.returncode != 0:
        joined = "\n    ".join(tail)
        timed_out = proc.returncode == -signal.SIGKILL
        problem = (
            f"took longer than {timeout:.0f} s"
            if timed_out
            else (f"failed (exit {proc.returncode})")
        )
        raise SglxError(
            f"{what} {problem}; last output:\n    {joined}", hint=hint, code="environment"
        )

"""How the probe child reports to preflight: JSON lines over a pipe of their own.

The child gets the write end of a pipe as an inherited file descriptor; its stdout and stderr
are left to the libraries it imports, so a print or a warning there can never be mistaken for a
report. Events, one JSON object a line:

    {"event": "start", "kind": KIND, "target": TARGET}     a step begins
    {"event": "check", "check": {...Check.to_json()...}}    a result of the running step
    {"event": "finish"}                                    the running step is done
    {"event": "end"}                                       every step is done

A child that exits without "end", or with a non-zero status, died: preflight fails the step that
was started and not finished, whatever the child reported before.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Iterator
from typing import Any

from sglx_runtime.preflight.checks import Check
from sglx_runtime.preflight.steps import Step

MAX_LINE = 1 << 20  # a report longer than this is not one of ours


class ProtocolError(RuntimeError):
    """The child wrote something on its report pipe that is not a report."""


class Reporter:
    """The child's side: writes events on the inherited descriptor, unbuffered."""

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def _send(self, event: dict[str, Any]) -> None:
        data = (json.dumps(event) + "\n").encode()
        while data:
            data = data[os.write(self._fd, data) :]

    def start(self, step: Step) -> None:
        self._send({"event": "start", "kind": step.kind, "target": step.target})

    def check(self, check: Check) -> None:
        self._send({"event": "check", "check": check.to_json()})

    def finish(self) -> None:
        self._send({"event": "finish"})

    def end(self) -> None:
        self._send({"event": "end"})


def read_events(fd: int, deadline: float) -> Iterator[dict[str, Any]]:
    """Events from the read end until EOF; raises TimeoutError at `deadline` (monotonic)."""
    pending = b""
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        ready, _, _ = select.select([fd], [], [], remaining)
        if not ready:
            raise TimeoutError
        chunk = os.read(fd, 65536)
        if not chunk:
            if pending.strip():
                raise ProtocolError(f"an unfinished report: {pending[:200]!r}")
            return
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_LINE:
            raise ProtocolError("a report line over 1 MiB")
        for line in lines:
            if line.strip():
                yield _decode(line)


def _decode(line: bytes) -> dict[str, Any]:
    try:
        event = json.loads(line)
    except ValueError as exc:
        raise ProtocolError(f"not a report: {line[:200]!r}") from exc
    if not isinstance(event, dict) or event.get("event") not in ("start", "check", "finish", "end"):
        raise ProtocolError(f"not a report: {line[:200]!r}")
    return event

"""Progress lines for long work, on stderr so stdout stays clean for tables and --json."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Prints `sglx: [task] message` lines with the elapsed time; silent when `quiet`."""

    def __init__(self, task: str, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.task = task
        self.quiet = quiet
        self.stream = sys.stderr if stream is None else stream
        self.started = time.monotonic()

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        elapsed = time.monotonic() - self.started
        self.stream.write(f"sglx: [{self.task} {elapsed:6.1f}s] {message}\n")
        self.stream.flush()

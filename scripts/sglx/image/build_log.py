"""What a build step printed: its lines, bounded, and the hint its end gives when it fails.

Both build steps read output sglx does not control (the deps container's log, the engine's
build stream): a wheel's build script or a broken engine can print a line with no end, so a
line is cut at MAX_LINE characters and the rest of it dropped, and only the last TAIL lines
are kept for the error.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator

MAX_LINE = 4096
TAIL = 40
CUT = " [... cut]"


def clip(line: str) -> str:
    """`line` without its trailing blanks, cut to MAX_LINE characters."""
    line = line.rstrip()
    return line if len(line) <= MAX_LINE else line[:MAX_LINE] + CUT


def lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """The lines of a byte stream whose chunks need not end at a line's end. Held in memory:
    at most MAX_LINE bytes of a line that has not ended yet."""
    pending = b""
    dropping = False  # within a line already cut: skip to its end
    for chunk in chunks:
        pending += chunk
        *complete, pending = pending.split(b"\n")
        for line in complete:
            if not dropping:
                yield clip(line.decode(errors="replace"))
            dropping = False
        if len(pending) > MAX_LINE and not dropping:
            yield clip(pending.decode(errors="replace"))
            dropping = True
        if dropping:
            pending = b""
    if pending and not dropping:
        yield clip(pending.decode(errors="replace"))


class Tail:
    """The last TAIL lines seen."""

    def __init__(self) -> None:
        self._lines: deque[str] = deque(maxlen=TAIL)

    def add(self, line: str) -> None:
        self._lines.append(clip(line))

    def last(self, count: int) -> list[str]:
        return list(self._lines)[-count:]


def failure_hint(tail: list[str], otherwise: str) -> str:
    """The hint for a failed build step, from the end of its output."""
    text = "\n".join(tail)
    if "no space left on device" in text.lower():
        return (
            "Docker's data root is full: free space there with `sglx image prune` (sglx's "
            "build leftovers) and `docker image prune`; a build needs room for the venv, "
            "several times the wheelhouse's size"
        )
    if "DO NOT MATCH THE HASHES" in text or "hash" in text.lower():
        return (
            "a wheel does not match the lock: check the wheelhouse with `sglx wheels "
            "verify` and re-fetch it"
        )
    return otherwise

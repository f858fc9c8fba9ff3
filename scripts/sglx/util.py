"""Small helpers shared by the step modules, written once."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from sglx.errors import SglxError

CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes: the one file-hashing loop of sglx (wheels, bases,
    weights), done by `hashlib.file_digest`, which reads in large blocks without Python-level
    looping."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file in the same folder, then rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def scratch_dir(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A temporary folder removed when the block ends, whatever happens in it."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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

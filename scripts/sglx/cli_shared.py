"""What every command group's parser shares: the epilog, the bound of --jobs/--workers and the
subparsers type. A module of its own so that the groups (`sglx.<group>.cli`, `sglx.*_cli`) and
`sglx.cli`, which imports them all, do not import each other in a circle.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TypeAlias

Subparsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

EPILOG = (
    "exit codes: 0 ok, 1 findings, 2 usage or environment error. "
    "Reference: docs/reference/ (exit-codes.md, json-output.md, profile.md)."
)


MAX_WORKERS = 64


def workers(text: str) -> int:
    """The type of every --jobs and --workers option: a whole number from 1 to MAX_WORKERS.

    The limit is fixed rather than a multiple of os.cpu_count(), so that a command line that
    works on the build host works on the control node. 64 is past the point of any gain: the
    threads and processes these options start hash files, read ELF headers or hold one SSH
    session per host, and disks and links saturate well before 64 streams, while 300 forked
    workers (issue 21) only cost memory and file descriptors. Defaults stay within it too.
    """
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number (give 1 to {MAX_WORKERS})"
        ) from None
    if not 1 <= count <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{count} is out of range: give 1 to {MAX_WORKERS}")
    return count


def rendered_file_options(p: argparse.ArgumentParser, what: str, handler: object) -> None:
    """--out FILE and --check, the options of every file sglx renders (sglx.rendered)."""
    p.add_argument("--out", type=Path, metavar="FILE", help=f"write {what} to FILE")
    p.add_argument("--check", action="store_true", help="exit 1 if FILE is stale")
    p.set_defaults(func=handler)

"""The `sglx` command line: the entry point, the shared options and the error envelope.

Each command group's parser and handlers live with the group (GROUPS below: `register(sub,
common, arch_parent)` declares its help and arguments and sets `func` to a `_cmd_<verb>(args)`
that calls one function of a step module and returns its `Result`). `main` renders the result
(table or --json) and maps errors to exit codes: 0 ok, 1 findings, 2 usage or environment error.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from types import FrameType

from sglx import __version__
from sglx.cli_shared import EPILOG, Subparsers
from sglx.commands import ansible as ansible_cli
from sglx.commands import arch as arch_cli
from sglx.commands import base as base_cli
from sglx.commands import bundle as bundle_cli
from sglx.commands import hosts as hosts_cli
from sglx.commands import image as image_cli
from sglx.commands import model as model_cli
from sglx.commands import scan as scan_cli
from sglx.commands import trace as trace_cli
from sglx.commands import tuned as tuned_cli
from sglx.commands import weights as weights_cli
from sglx.commands import wheels as wheels_cli
from sglx.failures import (
    Parser,
    UsageError,
    early_flags,
    report_broken_pipe,
    report_interrupt,
    report_unexpected,
    report_usage_error,
)
from sglx_core.errors import SglxError
from sglx_core.report import DEBUG_ENV, Result, error_result, render

Handler = Callable[[argparse.Namespace], Result]
Register = Callable[[Subparsers, argparse.ArgumentParser, argparse.ArgumentParser], None]
# The command groups, in the order `sglx --help` lists them.
GROUPS: tuple[Register, ...] = (
    arch_cli.register,
    base_cli.register,
    model_cli.register,
    wheels_cli.register,
    image_cli.register,
    weights_cli.register,
    tuned_cli.register,
    trace_cli.register,
    scan_cli.register,
    bundle_cli.register,
    ansible_cli.register,
    hosts_cli.register,
)


def _default_arch() -> str:
    return os.environ.get("ARCH", "cpu")


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        help="print one JSON envelope on stdout (docs/reference/json-output.md)",
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more logging; -v also shows tracebacks of errors",
    )
    common.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    common.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of an unexpected error (also {DEBUG_ENV}=1)",
    )
    # The arch a command works for; `base load` and `scan` declare their own optional --arch.
    arch_parent = argparse.ArgumentParser(add_help=False)
    arch_parent.add_argument(
        "--arch", default=_default_arch(), help="arch profile (default: $ARCH or cpu)"
    )

    # Subparsers are made of the same class, so every usage error reaches `main`.
    parser: argparse.ArgumentParser = Parser(
        prog="sglx",
        description="sglx: build, bundle, scan and roll out SGLang for AMD Instinct/Radeon and "
        "Kunlun XPUs (and the cpu reference) in sites with no internet.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"sglx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for register in GROUPS:
        register(sub, common, arch_parent)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every failure is a message and exit 2, never a traceback (see
    sglx.failures). --help and --version still exit through SystemExit(0)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json, debug = early_flags(argv)
    command: list[str] = []
    restore_sigterm = _sigterm_as_interrupt()
    try:
        args = build_parser().parse_args(argv)
        as_json, debug = args.json, debug or args.debug or args.verbose > 0
        logging.basicConfig(
            level=logging.WARNING - 10 * min(args.verbose, 2),
            format="sglx: %(levelname)s %(name)s: %(message)s",
        )
        command = [a for a in (args.command, getattr(args, "verb", None)) if a]
        handler: Handler = args.func
        try:
            result = handler(args)
        except SglxError as exc:
            if debug:
                logging.exception("error details")
            result = error_result(command, exc)
        code = render(result, as_json=as_json)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's exit
        return code
    except UsageError as exc:
        return report_usage_error(exc, as_json=as_json)
    except KeyboardInterrupt:
        return report_interrupt(command, as_json=as_json)
    except BrokenPipeError:
        return report_broken_pipe()
    except Exception as exc:  # the last line of defence: one message, no traceback
        return report_unexpected(exc, command, as_json=as_json, debug=debug)
    finally:
        restore_sigterm()


def _sigterm_as_interrupt() -> Callable[[], None]:
    """Make SIGTERM (what `docker stop`, systemd and CI send) take Ctrl-C's path while a
    command runs: KeyboardInterrupt, so every `finally` cleans up as it does for SIGINT
    (scratch roots, export containers, the unpacked copy of a bundle tar) and the run ends with
    "interrupted", exit 2. Returns what puts the previous handler back. Only the main thread
    may set handlers; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)

    return restore


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())

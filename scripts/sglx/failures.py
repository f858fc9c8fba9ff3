"""How `cli.main` reports what went wrong when a command did not return a `Result`.

No input may end in a Python traceback: a wrong argument, a missing optional library, an
interrupt and a bug each become one message (or the --json envelope) and exit 2. The traceback
of an unexpected error is shown only on request (--debug, -v or SGLX_DEBUG=1), on stderr, so
stdout keeps its one JSON envelope.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from sglx.optional_deps import missing_dependency_error
from sglx_core.errors import SglxError
from sglx_core.report import DEBUG_ENV, EXIT_ERROR, error_result, render, unexpected_error


class UsageError(Exception):
    """An argument error argparse found; carries the parser whose usage applies."""

    def __init__(self, parser: argparse.ArgumentParser, message: str) -> None:
        super().__init__(message)
        self.parser = parser
        self.message = message


class Parser(argparse.ArgumentParser):
    """argparse that raises `UsageError` instead of printing and exiting, so that `cli.main`
    can answer with the JSON envelope under --json. Subparsers inherit the class."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(self, message)


def early_flags(argv: Sequence[str]) -> tuple[bool, bool]:
    """(--json, --debug) as typed, for errors raised before the arguments are parsed."""
    words = list(argv)
    if "--" in words:
        words = words[: words.index("--")]
    return "--json" in words, "--debug" in words or debug_from_env()


def debug_from_env() -> bool:
    return os.environ.get(DEBUG_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def report_usage_error(exc: UsageError, *, as_json: bool) -> int:
    """argparse's own words (usage on stderr), or the envelope with code `usage`."""
    if not as_json:
        exc.parser.print_usage(sys.stderr)
        sys.stderr.write(f"{exc.parser.prog}: error: {exc.message}\n")
        return EXIT_ERROR
    error = SglxError(exc.message, hint=f"see `{exc.parser.prog} --help`", code="usage")
    return render(error_result(exc.parser.prog.split()[1:], error), as_json=True)


def report_interrupt(command: Sequence[str], *, as_json: bool) -> int:
    if not as_json:
        sys.stderr.write("sglx: interrupted\n")
        return EXIT_ERROR
    error = SglxError("interrupted", code="interrupted")
    return render(error_result(command, error), as_json=True)


def report_broken_pipe() -> int:
    """The reader of stdout went away (`sglx ... | head`): nothing is left to tell it, and
    Python's flush at exit must not fail again on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file descriptor (captured, replaced)
        pass
    return EXIT_ERROR


def report_unexpected(exc: Exception, command: Sequence[str], *, as_json: bool, debug: bool) -> int:
    """A missing optional library, an OS error nobody caught, or a bug: one message, exit 2."""
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    error = _describe(exc, command)
    return render(error_result(command, error), as_json=as_json)


def _describe(exc: Exception, command: Sequence[str]) -> SglxError:
    if isinstance(exc, ModuleNotFoundError):
        missing = missing_dependency_error(exc, command)
        if missing is not None:
            return missing
    if isinstance(exc, OSError):
        detail = " ".join(str(exc).split())[:300]
        return SglxError(
            type(exc).__name__ + (f": {detail}" if detail else ""),
            hint=f"check the path, its permissions and free space; --debug (or {DEBUG_ENV}=1) "
            "shows the traceback",
            code="environment",
        )
    return unexpected_error(exc, debug=f"--debug (or {DEBUG_ENV}=1)")

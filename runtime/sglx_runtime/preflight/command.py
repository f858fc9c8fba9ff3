"""`sglx-preflight`: the command line, and its exit codes.

0 every check passed, 1 a check failed, 2 preflight itself could not run: a usage error, or an
unexpected error inside preflight, reported in one line (SGLX_DEBUG=1 or --debug adds the
traceback) and never as a traceback with exit 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

from sglx_core.arg_types import positive
from sglx_core.errors import SglxError
from sglx_core.report import EXIT_ERROR, Result, error_result, render
from sglx_core.serving.probe_root import PROBE_ROOT_ENV
from sglx_platform.image_profile import PROFILE_ENV
from sglx_runtime.preflight.runner import run

DEBUG_ENV = "SGLX_DEBUG"
COMMAND = ("preflight",)


class _Parser(argparse.ArgumentParser):
    """Usage errors raise instead of exiting, so that --json still gets its envelope."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise SglxError(
            f"sglx-preflight: {message}", hint="sglx-preflight --help", code="usage_error"
        )


def parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="sglx-preflight",
        description="Check, in seconds and without loading the model, that SGLang can serve "
        "here: sglx plugin discovery, arch detection, device nodes and permissions, required "
        "libraries, imports, the first device operation, and the server arguments against the "
        "image's arch profile. Failures are classified (plugin_not_found, device_init_failed, "
        "symbol_not_found, init_hang, config_refused) and come with the fix.",
        epilog="exit codes: 0 all checks passed, 1 a check failed, 2 preflight could not run. "
        "Server arguments go after --, e.g. sglx-preflight -- --model-path /models/demo",
    )
    p.add_argument("--json", action="store_true", help="one JSON envelope on stdout")
    p.add_argument(
        "--profile",
        type=Path,
        help=f"arch profile (default: ${PROFILE_ENV} or /etc/sglx/arch.yaml)",
    )
    p.add_argument(
        "--probe-root",
        type=Path,
        help=f"read sysfs//dev/proc under this root (default: ${PROBE_ROOT_ENV} or /)",
    )
    p.add_argument(
        "--timeout",
        type=positive("--timeout"),
        default=120.0,
        help="seconds for library loading, imports and device init (default 120)",
    )
    p.add_argument("--no-device-init", action="store_true", help="skip the first device operation")
    p.add_argument("--debug", action="store_true", help=f"tracebacks of errors (or {DEBUG_ENV}=1)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = _options(argv)
    as_json = "--json" in options
    debug = "--debug" in options or os.environ.get(DEBUG_ENV) == "1"

    def checked() -> Result:
        args, server_argv = _split(argv)
        # This process is the command itself: its options become its own environment.
        if args.profile:
            os.environ[PROFILE_ENV] = str(args.profile)
        if args.probe_root:
            os.environ[PROBE_ROOT_ENV] = str(args.probe_root)
        return run(server_argv, device_init=not args.no_device_init, timeout_s=args.timeout)

    return guarded(checked, as_json=as_json, debug=debug)


def guarded(action: Callable[[], Result], *, as_json: bool, debug: bool = False) -> int:
    """Render what `action` returns; any error it raises becomes one line and exit 2."""
    debug = debug or os.environ.get(DEBUG_ENV) == "1"
    try:
        result = action()
    except SglxError as exc:
        return render(error_result(COMMAND, exc), as_json=as_json)
    except KeyboardInterrupt:
        sys.stderr.write("sglx-preflight: interrupted\n")
        return EXIT_ERROR
    except Exception as exc:
        if debug:
            traceback.print_exc()
        error = SglxError(
            f"preflight itself failed: {type(exc).__name__}: {exc}",
            hint=f"this is a bug in sglx-preflight; rerun with {DEBUG_ENV}=1 for the traceback",
            code="internal_error",
        )
        return render(error_result(COMMAND, error), as_json=as_json)
    return render(result, as_json=as_json)


def _options(argv: list[str]) -> list[str]:
    return argv[: argv.index("--")] if "--" in argv else argv


def _split(argv: list[str]) -> tuple[argparse.Namespace, list[str] | None]:
    """Preflight's own options, and the server arguments after `--` (None when there is none)."""
    if "--" in argv:
        cut = argv.index("--")
        return parser().parse_args(argv[:cut]), argv[cut + 1 :]
    return parser().parse_args(argv), None

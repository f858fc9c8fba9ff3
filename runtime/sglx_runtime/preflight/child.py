"""The probe child: loads the required libraries, imports the serving stack, runs the first
device operation and checks the server arguments, reporting each step as it goes.

Run by preflight as `python -m sglx_runtime.preflight.child FD` with a JSON spec on stdin
(libraries, modules, device type, server arguments); it reports over descriptor FD (see
`protocol`). It runs in a child so that a crash or a hang in any of this is reported as a
classified failure of that step instead of taking preflight down with it.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
from typing import Any

from sglx_runtime.preflight.protocol import Reporter
from sglx_runtime.preflight.steps import Step, classify


def main(argv: list[str]) -> int:
    reporter = Reporter(int(argv[0]))
    spec: dict[str, Any] = json.load(sys.stdin)
    for path in spec["libraries"]:
        _run(reporter, Step("library", path), lambda p=path: _load_library(p))
    # Every module is tried (a list, not a short-circuiting generator): each gets its line.
    modules = spec["modules"]
    outcomes = [_run(reporter, Step("module", m), lambda m=m: __import__(m)) for m in modules]
    imported = all(outcomes)
    if spec["device_type"]:
        device = spec["device_type"]
        _run(reporter, Step("device", device), lambda: _first_operation(device))
    if spec["server_argv"] is not None:
        step = Step("server_args", "")
        reporter.start(step)
        if imported:
            from sglx_runtime.preflight.server_args_check import check_server_args

            for check in check_server_args(spec["server_argv"]):
                reporter.check(check)
        else:
            from sglx_runtime.preflight.checks import Check

            reporter.check(Check(step.name, "skip", "sglang does not import (see above)"))
        reporter.finish()
    reporter.end()
    return 0


def _run(reporter: Reporter, step: Step, action: Any) -> bool:
    reporter.start(step)
    try:
        action()
        error = ""
    except BaseException as exc:  # the step's failure is the report, whatever it raised
        error = f"{type(exc).__name__}: {exc}" if step.kind != "library" else str(exc)
    reporter.check(classify(step, error))
    reporter.finish()
    return not error


def _load_library(path: str) -> None:
    ctypes.CDLL(path, mode=os.RTLD_NOW)


def _first_operation(device_type: str) -> None:
    import torch

    if device_type == "cpu":
        torch.ones(1).add_(1)
        return
    torch.ones(1, device=device_type).add_(1)
    torch.cuda.synchronize()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

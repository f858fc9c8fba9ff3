"""The five ways bringing SGLang up on an accelerator fails, each with its fix.

Preflight and the platform classify every failure into one of these classes so an operator
reading a log (or a `--json` report) knows where to look without reading a traceback.
"""

from __future__ import annotations

from enum import StrEnum


class FailureClass(StrEnum):
    PLUGIN_NOT_FOUND = "plugin_not_found"
    DEVICE_INIT_FAILED = "device_init_failed"
    SYMBOL_NOT_FOUND = "symbol_not_found"
    INIT_HANG = "init_hang"
    CONFIG_REFUSED = "config_refused"


class PlatformError(RuntimeError):
    """A classified failure: what went wrong, and what to do about it."""

    def __init__(self, failure: FailureClass, message: str, fix: str) -> None:
        super().__init__(f"[sglx {failure.value}] {message}\n  fix: {fix}")
        self.failure = failure
        self.detail = message
        self.fix = fix

"""The steps the probe child runs, and how each one's outcome is classified.

A step that reports an error is classified from the error text; a step during which the child
dies (a segfault in a library constructor, an abort in an extension module) or hangs is
classified by the kind of step that was running.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from sglx_platform.failures import FailureClass
from sglx_runtime.preflight.checks import Check, failed

Kind = Literal["library", "module", "device", "server_args"]

MISMATCHED_BUILDS = (
    "the libraries come from mismatched builds: take them from one release "
    "(the image's wheel lock pins them together)"
)


@dataclass(frozen=True)
class Step:
    kind: Kind
    target: str

    @property
    def name(self) -> str:
        if self.kind == "server_args":
            return "server args"
        shown = Path(self.target).name if self.kind == "library" else self.target
        return f"{self.kind} {shown}"


# When the child dies during a step: the class, and where to look.
DIED: dict[Kind, tuple[FailureClass, str]] = {
    "library": (FailureClass.SYMBOL_NOT_FOUND, MISMATCHED_BUILDS),
    "module": (
        FailureClass.SYMBOL_NOT_FOUND,
        "a native extension crashed while importing: its libraries come from another build "
        "(sglx scan --image; rebuild the image from its lock)",
    ),
    "device": (
        FailureClass.DEVICE_INIT_FAILED,
        "check the device nodes, their permissions and the host driver (kernel log)",
    ),
    "server_args": (
        FailureClass.CONFIG_REFUSED,
        "run sglx-preflight -- ARGS by hand to see where sglang stops on these arguments",
    ),
}


def classify(step: Step, error: str) -> Check:
    """The check for a step that finished; `error` is empty when it succeeded."""
    if not error:
        return Check(step.name, "pass", "first operation ran" if step.kind == "device" else "loads")
    if "undefined symbol" in error or "version `" in error:
        return failed(step.name, error, FailureClass.SYMBOL_NOT_FOUND, MISMATCHED_BUILDS)
    if step.kind == "device":
        return failed(
            step.name,
            error,
            FailureClass.DEVICE_INIT_FAILED,
            "check the device nodes, their permissions and the host driver",
        )
    if step.kind == "library" or "cannot open shared object" in error:
        return failed(
            step.name,
            error,
            FailureClass.SYMBOL_NOT_FOUND,
            "a library it needs is missing from the image (sglx scan --image)",
        )
    return failed(
        step.name,
        error,
        FailureClass.PLUGIN_NOT_FOUND,
        "the serving environment is incomplete: rebuild the image from its lock",
    )

"""Triton, if it is installed, and whether it can run on a given tensor's device.

CPU-only torch builds (the `cpu` reference image, some Kunlun stacks) ship no Triton, yet the
package must import there and fall back to its torch paths. The op modules therefore take
`triton` and `tl` from here: the real modules when Triton imports, otherwise a namespace that
is just enough to *define* the kernels (``tl.constexpr`` and a ``triton.jit`` that returns an
object refusing to launch). The registry never launches a kernel where
`unavailable_reason` says no, so that object only surfaces if someone bypasses the registry.

Triton decides interpreter or compiler when a kernel is *decorated* (``TRITON_INTERPRET=1``
read at ``@triton.jit`` time, for our kernels and for Triton's own library functions alike), so
interpreter mode is a property of the process, fixed at import: `INTERPRETED` records it.
"""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from functools import cache
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch

HAVE_TRITON = importlib.util.find_spec("triton") is not None

if TYPE_CHECKING or HAVE_TRITON:
    import triton
    import triton.language as tl
else:  # pragma: no cover - exercised in a subprocess that hides Triton

    class _KernelWithoutTriton:
        """Stands in for a ``@triton.jit`` kernel when Triton is not installed."""

        def __init__(self, fn: Any) -> None:
            self.fn = fn

        def __getitem__(self, grid: Any) -> Any:
            raise RuntimeError(
                f"{self.fn.__name__}: Triton is not installed, so this kernel cannot launch; "
                "the sglx_kernels registry picks a torch implementation instead"
            )

    def _jit(fn: Any = None, **_options: Any) -> Any:
        if fn is None:
            return _KernelWithoutTriton
        return _KernelWithoutTriton(fn)

    triton = SimpleNamespace(jit=_jit)
    tl = SimpleNamespace(constexpr=lambda value=None: value)


def _interpreter_requested() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in {"1", "true", "on", "yes"}


# Fixed at import: kernels defined below this point are interpreted iff this is True.
INTERPRETED: bool = HAVE_TRITON and _interpreter_requested()

# torch device types whose tensors a compiled Triton backend can take, and the Triton backends
# that serve them (HIP rides on torch.cuda, so ROCm GPUs are "cuda" tensors too).
_TRITON_BACKENDS_FOR_DEVICE = {"cuda": ("cuda", "hip"), "xpu": ("xpu",)}


@dataclass(frozen=True)
class TritonTarget:
    """What Triton compiles for on one device: backend, architecture and warp size.

    `warp_size` is read from Triton at run time (32 on NVIDIA and RDNA such as gfx1151, 64 on
    CDNA such as gfx942/gfx950); nothing in sglx_kernels assumes a value for it.
    """

    backend: str  # "cuda", "hip", "xpu", or "interpreter"
    arch: str  # "sm90", "gfx942", "" for the interpreter
    warp_size: int

    @property
    def tuning_keys(self) -> tuple[str, ...]:
        """Keys of the tuning table to try, most specific first."""
        keys = [f"{self.backend}:{self.arch}"] if self.arch else []
        return (*keys, self.backend, "default")


_INTERPRETER_TARGET = TritonTarget(backend="interpreter", arch="", warp_size=32)


def _device_index(device: torch.device) -> int:
    if device.index is not None:
        return device.index
    return int(torch.cuda.current_device()) if device.type == "cuda" else 0


@cache
def _gpu_target(device_type: str, index: int) -> TritonTarget:
    if device_type == "cuda":
        with torch.cuda.device(index):
            raw = triton.runtime.driver.active.get_current_target()
    else:
        raw = triton.runtime.driver.active.get_current_target()
    # NVIDIA reports the compute capability as an int (90 for Hopper); AMD a string such as
    # "gfx942:sramecc+:xnack-", whose feature suffixes don't change tuning.
    arch = raw.arch
    arch_name = f"sm{arch}" if isinstance(arch, int) else str(arch).split(":")[0]
    return TritonTarget(backend=str(raw.backend), arch=arch_name, warp_size=int(raw.warp_size))


# Set only while sglx_kernels.warm compiles for a device this process cannot see: the target
# every launch is planned for then.
compile_only_target: TritonTarget | None = None


def target_for(device: torch.device) -> TritonTarget:
    """The Triton target that kernels launched on `device` compile for (cached per device)."""
    if compile_only_target is not None:
        return compile_only_target
    if INTERPRETED:
        return _INTERPRETER_TARGET
    return _gpu_target(device.type, _device_index(device))


@cache
def _gpu_unavailable_reason(device_type: str, index: int) -> str | None:
    try:
        target = _gpu_target(device_type, index)
    except Exception as exc:  # driver missing or broken: say why, don't crash the caller
        return f"Triton found no usable {device_type} driver: {exc}"
    if target.backend not in _TRITON_BACKENDS_FOR_DEVICE[device_type]:
        return f"Triton's active backend {target.backend!r} cannot take {device_type} tensors"
    return None


def unavailable_reason(device: torch.device) -> str | None:
    """Why Triton kernels cannot run on `device`, or None when they can."""
    if not HAVE_TRITON:
        return "Triton is not installed"
    if INTERPRETED:
        # The interpreter runs any kernel on host copies of the tensors; tests use it on CPU.
        return None
    if device.type not in _TRITON_BACKENDS_FOR_DEVICE:
        hint = (
            " (TRITON_INTERPRET=1, set before import, runs Triton's interpreter for tests)"
            if device.type == "cpu"
            else ""
        )
        return f"Triton has no backend for {device.type} tensors{hint}"
    if device.type == "cuda" and not torch.cuda.is_available():
        return "torch sees no CUDA or HIP device"
    return _gpu_unavailable_reason(device.type, _device_index(device))


__all__ = [
    "HAVE_TRITON",
    "INTERPRETED",
    "TritonTarget",
    "target_for",
    "tl",
    "triton",
    "unavailable_reason",
]

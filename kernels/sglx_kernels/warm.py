"""Triton's on-disk cache for a device this process cannot see: compiled ahead, at image build.

A Triton kernel compiles at its first call with a given specialization (argument dtypes,
constexprs, which integers are 1 or divisible by 16, whether a tensor lies within 2 GiB) and
lands in ``TRITON_CACHE_DIR`` under a key Triton derives from the kernel source, the target
(backend, arch, warp size), the options and the environment. Nothing in that key needs the
device itself, so a CPU builder can make the same entries:

- the active Triton driver is replaced by `_CompileOnlyDriver`, which reports the target and
  launches nothing;
- `sglx_kernels._triton.target_for` reports the same target, so the op wrappers pick the launch
  settings (block sizes, warps) they pick on the device;
- a launch ``kernel[grid](...)`` becomes ``kernel.warmup(...)``: it compiles and returns.

The wrappers then run on CPU tensors of the serving shapes, so every specialization the server
will ask for is made by the same code that asks for it on the device. Triton's host-side
modules (the HIP/CUDA utilities and, on Triton versions that have one per signature, the
kernel launcher) are C code compiled with the host compiler on first use; `build_host_modules`
compiles them into the same cache through the real driver's classes, without loading them.

Run it as ``python -m sglx_kernels.warm --target hip:gfx942:64 --spec SPEC.json`` with
``TRITON_CACHE_DIR`` set: one target per process, because Triton keeps its per-device state
(the binder and backend made from the first target it saw) for the life of the process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from sglx_kernels import _triton

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass(frozen=True)
class Target:
    """What Triton compiles for: ``backend:arch:warp_size`` (``hip:gfx942:64``, ``cuda:90:32``)."""

    backend: str
    arch: str
    warp_size: int

    @classmethod
    def parse(cls, text: str) -> Target:
        parts = text.split(":")
        if (
            len(parts) != 3
            or parts[0] not in {"hip", "cuda"}
            or not parts[1]
            or parts[2] not in {"32", "64"}
        ):
            raise ValueError(f"target {text!r}: expected hip|cuda:ARCH:32|64, e.g. hip:gfx942:64")
        return cls(parts[0], parts[1], int(parts[2]))

    def triton_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        # NVIDIA's arch is the compute capability as an int (90), AMD's the gfx name.
        arch: int | str = int(self.arch) if self.backend == "cuda" else self.arch
        return GPUTarget(self.backend, arch, self.warp_size)

    def kernels_target(self) -> _triton.TritonTarget:
        arch = f"sm{self.arch}" if self.backend == "cuda" else self.arch
        return _triton.TritonTarget(backend=self.backend, arch=arch, warp_size=self.warp_size)


@dataclass(frozen=True)
class LayerShape:
    """One decoder layer's widths on one rank (heads and MLP already divided by TP)."""

    hidden_size: int
    head_dim: int
    heads: int
    kv_heads: int
    intermediate_size: int  # the MLP's up/gate width; 0: no dense MLP
    rotary_dim: int
    max_positions: int
    activation: str = "silu"  # "silu" | "gelu" | "gelu_tanh"
    is_neox: bool = True
    qk_norm: bool = False


@dataclass(frozen=True)
class Spec:
    """What to compile: the layer shapes, the token counts per launch, the dtype."""

    shapes: tuple[LayerShape, ...]
    tokens: tuple[int, ...]
    dtype: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Spec:
        return cls(
            shapes=tuple(LayerShape(**s) for s in data["shapes"]),
            tokens=tuple(int(t) for t in data["tokens"]),
            dtype=str(data["dtype"]),
        )


@dataclass
class Report:
    target: str
    triton: str
    calls: dict[str, int] = field(default_factory=dict)
    kernels: list[str] = field(default_factory=list)
    host_modules: list[str] = field(default_factory=list)
    host_modules_skipped: str | None = None
    seconds: float = 0.0


class _CompileOnlyDriver:
    """Stands in for Triton's active driver: reports `target`, owns device 0, launches nothing."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def get_current_target(self) -> Any:
        return self._target

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0

    def get_active_torch_device(self) -> torch.device:
        return torch.device("cpu")

    def get_device_interface(self) -> Any:
        return torch.cuda


@contextlib.contextmanager
def compiling_for(target: Target) -> Iterator[list[Any]]:
    """Inside: Triton launches compile for `target` and return; yields the compiled kernels."""
    from triton.runtime import driver
    from triton.runtime.jit import JITFunction

    compiled: list[Any] = []

    def compile_only(self: Any, grid: Any) -> Any:
        def warm(*args: Any, **kwargs: Any) -> None:
            kernel = self.run(*args, grid=grid, warmup=True, **kwargs)
            if kernel is not None:
                compiled.append(kernel)

        return warm

    previous_driver = driver._active  # the private slot: `active` would create a real driver
    previous_getitem = JITFunction.__getitem__
    driver.set_active(_CompileOnlyDriver(target.triton_target()))
    _triton.compile_only_target = target.kernels_target()
    JITFunction.__getitem__ = compile_only
    try:
        yield compiled
    finally:
        JITFunction.__getitem__ = previous_getitem
        _triton.compile_only_target = None
        driver._active = previous_driver


def _calls(shape: LayerShape, tokens: int, dtype: torch.dtype) -> Iterator[tuple[str, Any]]:
    """The sglx ops a layer of `shape` runs on `tokens` tokens, as the server calls them."""
    from sglx_kernels.ops.fused_add_rms_norm import fused_add_rms_norm_triton
    from sglx_kernels.ops.gelu_and_mul import gelu_and_mul_triton
    from sglx_kernels.ops.rms_norm import rms_norm_triton
    from sglx_kernels.ops.rotary_embedding import rotary_embedding_triton
    from sglx_kernels.ops.silu_and_mul import silu_and_mul_triton

    def empty(*size: int, of: torch.dtype = dtype) -> torch.Tensor:
        return torch.empty(size, dtype=of)

    hidden = empty(tokens, shape.hidden_size)
    weight = empty(shape.hidden_size)
    yield "rms_norm", lambda: rms_norm_triton(hidden, weight, 1e-6)
    yield "fused_add_rms_norm", lambda: fused_add_rms_norm_triton(hidden, hidden, weight, 1e-6)
    if shape.qk_norm:  # Qwen3-style per-head norms: rows of head_dim
        head_weight = empty(shape.head_dim)
        for heads in sorted({shape.heads, shape.kv_heads}):
            rows = empty(tokens * heads, shape.head_dim)
            yield "rms_norm", lambda rows=rows: rms_norm_triton(rows, head_weight, 1e-6)
    if shape.intermediate_size:
        gate_up = empty(tokens, 2 * shape.intermediate_size)
        if shape.activation == "silu":
            yield "silu_and_mul", lambda: silu_and_mul_triton(gate_up)
        else:
            approximate: Literal["none", "tanh"] = (
                "tanh" if shape.activation == "gelu_tanh" else "none"
            )
            yield "gelu_and_mul", lambda: gelu_and_mul_triton(gate_up, approximate)
    # q and k are views of the fused qkv projection, as sglang splits it: their row stride is
    # qkv's width, which Triton specializes on.
    q_width, kv_width = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    qkv = empty(tokens, q_width + 2 * kv_width)
    q, k = qkv[:, :q_width], qkv[:, q_width : q_width + kv_width]
    positions = empty(tokens, of=torch.int64)
    # sglang keeps the cos/sin cache in fp32 on CUDA and HIP (RotaryEmbedding.__init__), and
    # the kernel specializes on its dtype.
    cos_sin = empty(shape.max_positions, shape.rotary_dim, of=torch.float32)
    yield (
        "rotary_embedding",
        lambda: rotary_embedding_triton(
            positions, q, k, cos_sin, shape.head_dim, shape.rotary_dim, shape.is_neox
        ),
    )


def compile_spec(target: Target, spec: Spec) -> Report:
    """Compile every kernel `spec` needs for `target` into Triton's cache folder."""
    import triton

    started = time.monotonic()
    report = Report(target=f"{target.backend}:{target.arch}:{target.warp_size}",
                    triton=triton.__version__)  # fmt: skip
    dtype = DTYPES[spec.dtype]
    with compiling_for(target) as compiled:
        for shape in spec.shapes:
            for tokens in spec.tokens:
                for op, call in _calls(shape, tokens, dtype):
                    call()
                    report.calls[op] = report.calls.get(op, 0) + 1
    unique = {kernel.hash: kernel for kernel in compiled}
    report.kernels = sorted(f"{k.name}:{h}" for h, k in unique.items())
    report.host_modules, report.host_modules_skipped = build_host_modules(
        target, list(unique.values())
    )
    report.seconds = round(time.monotonic() - started, 2)
    return report


class _NotLoaded:
    """A host module compiled into the cache but not loaded (its library needs the device
    runtime): any attribute is a placeholder, enough for the driver classes' constructors."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __getattr__(self, attr: str) -> Any:
        return _NotLoaded(f"{self.__name__}.{attr}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _NotLoaded(self.__name__)


def c_compiler() -> str | None:
    """A C compiler for Triton's host modules ($CC, else one on PATH), or None. Which one Triton
    picks (its order differs across versions) does not change the cache key: that hashes only
    the C source and the platform."""
    named = os.environ.get("CC")
    return named or shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")


def build_host_modules(target: Target, kernels: Sequence[Any]) -> tuple[list[str], str | None]:
    """Compile Triton's host-side modules for `target` into the cache, through the real
    driver's own classes (so the source, and with it the cache key, is Triton's), with the
    module loader replaced so nothing that needs the device runtime is loaded. Returns the
    modules built, or the reason none was."""
    from triton.backends import backends
    from triton.runtime import build, driver

    if c_compiler() is None:
        return [], "no C compiler (cc, gcc or clang) in this environment"
    if not hasattr(build, "_load_module_from_path"):
        return [], "this Triton has no module loader sglx knows how to bypass"
    backend = {"hip": "amd", "cuda": "nvidia"}[target.backend]
    built: list[str] = []
    real_loader = build._load_module_from_path
    previous_driver = driver._active

    def record(name: str, path: str) -> _NotLoaded:
        built.append(name)
        return _NotLoaded(name)

    build._load_module_from_path = record
    try:
        real = backends[backend].driver()
        driver.set_active(real)
        for kernel in kernels:
            real.launcher_cls(kernel.src, kernel.metadata)
    except Exception as exc:  # the runtime library or headers are missing: say which
        return sorted(set(built)), f"{type(exc).__name__}: {exc}"
    finally:
        build._load_module_from_path = real_loader
        driver._active = previous_driver
    return sorted(set(built)), None


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sglx_kernels.warm", description=__doc__)
    parser.add_argument("--target", required=True, help="backend:arch:warp, e.g. hip:gfx942:64")
    parser.add_argument("--spec", required=True, help="JSON file: shapes, tokens, dtype")
    args = parser.parse_args(argv)
    if not os.environ.get("TRITON_CACHE_DIR"):
        print(
            "sglx_kernels.warm: set TRITON_CACHE_DIR to the cache folder to fill", file=sys.stderr
        )
        return 2
    try:
        target = Target.parse(args.target)
        with Path(args.spec).open(encoding="utf-8") as handle:
            spec = Spec.from_json(json.load(handle))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"sglx_kernels.warm: {exc}", file=sys.stderr)
        return 2
    if not _triton.HAVE_TRITON:
        print("sglx_kernels.warm: Triton is not installed here", file=sys.stderr)
        return 2
    print(json.dumps(asdict(compile_spec(target, spec))))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""SiLU-and-mul (SwiGLU's gate): x = [gate | up] along the last dim; ``y = silu(gate) * up``.

Semantics are sglang 0.5.23 ``SiluAndMul.forward_native`` (sglang/srt/layers/activation.py):
``F.silu(x[..., :d]) * x[..., d:]`` in x's dtype. In eager torch that is two rounded steps
(silu rounded to x's dtype, then the product rounded), and the kernel rounds at the same two
points, so every implementation agrees with the reference to the last bit up to the ``exp``
approximation. The tiling follows the elementwise kernels of Liger-Kernel (ops/swiglu.py),
with 2-D tiles so short rows still fill a program.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sglx_kernels import registry, tuning
from sglx_kernels._triton import target_for, tl, triton
from sglx_kernels.ops._common import (
    LIBRARY,
    as_rows,
    check_floating,
    gated_output,
    needs_int64,
    triton_unavailable_reason,
)

OP = "silu_and_mul"


@triton.jit
def _silu_and_mul_fwd_kernel(
    x_ptr,
    x_row_stride,
    y_ptr,
    n_rows,
    d,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    EVEN: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """y[i, j] = round(round(g / (1 + exp(-g))) * u) with g = x[i, j], u = x[i, d + j].

    Programs tile y ([n_rows, d], contiguous) in BLOCK_ROWS x BLOCK_COLS tiles; round() is the
    cast to y's dtype, where eager torch rounds.
    """
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    gate_ptrs = x_ptr + rows[:, None] * x_row_stride + cols[None, :]
    y_ptrs = y_ptr + rows[:, None] * d + cols[None, :]
    if EVEN:
        gate = tl.load(gate_ptrs)
        up = tl.load(gate_ptrs + d)
    else:
        mask = (rows < n_rows)[:, None] & (cols < d)[None, :]
        gate = tl.load(gate_ptrs, mask=mask, other=0.0)
        up = tl.load(gate_ptrs + d, mask=mask, other=0.0)
    gate = gate.to(tl.float32)
    up = up.to(tl.float32)
    dtype = y_ptr.dtype.element_ty
    act = (gate / (1.0 + tl.exp(-gate))).to(dtype).to(tl.float32)
    y = (act * up).to(dtype)
    if EVEN:
        tl.store(y_ptrs, y)
    else:
        tl.store(y_ptrs, y, mask=mask)


def silu_and_mul_torch(x: torch.Tensor) -> torch.Tensor:
    """The reference (``native``): sglang ``SiluAndMul.forward_native``."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]) * x[..., d:]


def silu_and_mul_composite(x: torch.Tensor) -> torch.Tensor:
    """``composite``: the same two ops, multiplying in place into silu's output buffer."""
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]).mul_(x[..., d:])


def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    """``triton``: one launch over x flattened to [rows, 2d] (arguments checked by silu_and_mul)."""
    d = x.shape[-1] // 2
    rows = as_rows(x, 2 * d)
    y = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    n_rows = rows.shape[0]
    if n_rows == 0 or d == 0:
        return y
    launch = tuning.tile_launch("gated", d, target_for(x.device))
    grid = (tuning.cdiv(n_rows, launch.block_rows), tuning.cdiv(d, launch.block_cols))
    _silu_and_mul_fwd_kernel[grid](
        rows,
        rows.stride(0),
        y,
        n_rows,
        d,
        BLOCK_ROWS=launch.block_rows,
        BLOCK_COLS=launch.block_cols,
        EVEN=d % launch.block_cols == 0 and n_rows % launch.block_rows == 0,
        INDEX_64=needs_int64(rows, y),
        num_warps=launch.num_warps,
    )
    return y


registry.register(OP, "triton", silu_and_mul_triton, unavailable_reason=triton_unavailable_reason)
registry.register(OP, "composite", silu_and_mul_composite)
registry.register(OP, "native", silu_and_mul_torch)


def check_gated_args(op: str, x: torch.Tensor) -> None:
    """Errors every gated activation shares (also used by gelu_and_mul)."""
    check_floating(op, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{op}: x is a scalar; expected [..., 2 * d]")
    if x.shape[-1] % 2:
        raise ValueError(
            f"{op}: the last dimension of x is {x.shape[-1]}, which is odd; it must hold the "
            "gate and up halves of equal size"
        )


def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :d]) * x[..., d:]`` by the implementation the registry picks (new tensor).
    Under torch.compile it is the opaque op ``torch.ops.sglx.silu_and_mul``."""
    if torch.compiler.is_compiling():
        compiled: torch.Tensor = silu_and_mul_op(x)
        return compiled
    return _silu_and_mul(x)


def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    check_gated_args(OP, x)
    y: torch.Tensor = registry.call(OP, x.device, x)
    return y


@torch.library.custom_op(f"{LIBRARY}::{OP}", mutates_args=())
def silu_and_mul_op(x: torch.Tensor) -> torch.Tensor:
    """``torch.ops.sglx.silu_and_mul``."""
    return _silu_and_mul(x)


@silu_and_mul_op.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return gated_output(x)

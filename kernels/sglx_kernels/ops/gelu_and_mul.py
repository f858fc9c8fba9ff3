"""GELU-and-mul (GeGLU's gate): x = [gate | up] along the last dim; ``y = gelu(gate) * up``.

Semantics are sglang 0.5.23 ``GeluAndMul.forward_native`` (sglang/srt/layers/activation.py):
``F.gelu(x[..., :d], approximate=...) * x[..., d:]`` in x's dtype, with
``gelu(g) = g/2 * (1 + erf(g / sqrt(2)))`` for ``approximate="none"`` and
``g/2 * (1 + tanh(sqrt(2/pi) * (g + 0.044715 g^3)))`` for ``"tanh"``. The kernel writes the tanh
form as ``g * sigmoid(2 * sqrt(2/pi) * (g + 0.044715 g^3))``, the same function, because
``tanh`` is not a portable Triton builtin while ``exp`` is. Rounding points match eager torch
as in silu_and_mul.py.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from sglx_kernels import registry, tuning
from sglx_kernels._triton import target_for, tl, triton
from sglx_kernels.ops._common import (
    LIBRARY,
    as_rows,
    gated_output,
    needs_int64,
    triton_unavailable_reason,
)
from sglx_kernels.ops.silu_and_mul import check_gated_args

OP = "gelu_and_mul"
Approximate = Literal["none", "tanh"]
APPROXIMATIONS: tuple[Approximate, ...] = ("none", "tanh")

_SQRT1_2: tl.constexpr = tl.constexpr(0.7071067811865476)  # 1 / sqrt(2)
_TWO_SQRT_2_OVER_PI: tl.constexpr = tl.constexpr(1.5957691216057308)  # 2 * sqrt(2 / pi)
_KAPPA: tl.constexpr = tl.constexpr(0.044715)


@triton.jit
def _gelu_and_mul_fwd_kernel(
    x_ptr,
    x_row_stride,
    y_ptr,
    n_rows,
    d,
    TANH: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    EVEN: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """y[i, j] = round(round(gelu(g)) * u) with g = x[i, j], u = x[i, d + j].

    gelu(g) = g/2 * (1 + erf(g/sqrt(2))), or with TANH g * sigmoid(2 sqrt(2/pi) (g + k g^3)).
    Programs tile y ([n_rows, d], contiguous); round() is the cast to y's dtype.
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
    if TANH:
        inner = _TWO_SQRT_2_OVER_PI * (gate + _KAPPA * gate * gate * gate)
        act = gate / (1.0 + tl.exp(-inner))
    else:
        act = 0.5 * gate * (1.0 + tl.math.erf(gate * _SQRT1_2))
    dtype = y_ptr.dtype.element_ty
    act = act.to(dtype).to(tl.float32)
    y = (act * up).to(dtype)
    if EVEN:
        tl.store(y_ptrs, y)
    else:
        tl.store(y_ptrs, y, mask=mask)


def gelu_and_mul_torch(x: torch.Tensor, approximate: Approximate = "none") -> torch.Tensor:
    """The reference (``native``): sglang ``GeluAndMul.forward_native``."""
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate=approximate) * x[..., d:]


def gelu_and_mul_composite(x: torch.Tensor, approximate: Approximate = "none") -> torch.Tensor:
    """``composite``: the same two ops, multiplying in place into gelu's output buffer."""
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate=approximate).mul_(x[..., d:])


def gelu_and_mul_triton(x: torch.Tensor, approximate: Approximate = "none") -> torch.Tensor:
    """``triton``: one launch over [rows, 2d] (arguments checked by gelu_and_mul)."""
    d = x.shape[-1] // 2
    rows = as_rows(x, 2 * d)
    y = torch.empty((*x.shape[:-1], d), dtype=x.dtype, device=x.device)
    n_rows = rows.shape[0]
    if n_rows == 0 or d == 0:
        return y
    launch = tuning.tile_launch("gated", d, target_for(x.device))
    grid = (tuning.cdiv(n_rows, launch.block_rows), tuning.cdiv(d, launch.block_cols))
    _gelu_and_mul_fwd_kernel[grid](
        rows,
        rows.stride(0),
        y,
        n_rows,
        d,
        TANH=approximate == "tanh",
        BLOCK_ROWS=launch.block_rows,
        BLOCK_COLS=launch.block_cols,
        EVEN=d % launch.block_cols == 0 and n_rows % launch.block_rows == 0,
        INDEX_64=needs_int64(rows, y),
        num_warps=launch.num_warps,
    )
    return y


registry.register(OP, "triton", gelu_and_mul_triton, unavailable_reason=triton_unavailable_reason)
registry.register(OP, "composite", gelu_and_mul_composite)
registry.register(OP, "native", gelu_and_mul_torch)


def gelu_and_mul(x: torch.Tensor, approximate: Approximate = "none") -> torch.Tensor:
    """``gelu(x[..., :d], approximate) * x[..., d:]`` by the implementation the registry picks.
    Under torch.compile it is the opaque op ``torch.ops.sglx.gelu_and_mul``."""
    if torch.compiler.is_compiling():
        compiled: torch.Tensor = gelu_and_mul_op(x, approximate)
        return compiled
    return _gelu_and_mul(x, approximate)


def _gelu_and_mul(x: torch.Tensor, approximate: str) -> torch.Tensor:
    check_gated_args(OP, x)
    if approximate not in APPROXIMATIONS:
        raise ValueError(
            f"{OP}: approximate={approximate!r}; expected 'none' (erf) or 'tanh', as F.gelu"
        )
    y: torch.Tensor = registry.call(OP, x.device, x, approximate)
    return y


@torch.library.custom_op(f"{LIBRARY}::{OP}", mutates_args=())
def gelu_and_mul_op(x: torch.Tensor, approximate: str) -> torch.Tensor:
    """``torch.ops.sglx.gelu_and_mul``."""
    return _gelu_and_mul(x, approximate)


@gelu_and_mul_op.register_fake
def _(x: torch.Tensor, approximate: str) -> torch.Tensor:
    return gated_output(x)

"""RMSNorm: ``y = x * rsqrt(mean(x^2) + eps) * w``, accumulated in fp32, stored in x's dtype.

Semantics are sglang 0.5.23 ``RMSNorm.forward_native`` with ``cast_x_before_out_mul=False``
(sglang/srt/layers/layernorm.py): x is upcast to fp32, normalised, multiplied by the weight in
fp32 and only then cast back. The kernel follows the one-row-per-program layout of Liger-Kernel
(src/liger_kernel/ops/rms_norm.py, itself adapted from Unsloth), extended so several short rows
share a program (per-head q/k norms have 64- or 128-wide rows).
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
    check_same_device,
    empty_result,
    needs_int64,
    triton_unavailable_reason,
)

OP = "rms_norm"


@triton.jit
def _rms_norm_fwd_kernel(
    x_ptr,
    x_row_stride,
    w_ptr,
    y_ptr,
    n_rows,
    n_cols,
    eps,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    EVEN: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """y[i, :] = (x[i, :] * rsqrt(sum_j x[i, j]^2 / n_cols + eps)) * w, in fp32.

    Each program holds BLOCK_ROWS whole rows (BLOCK_COLS >= n_cols); y is contiguous. EVEN:
    the blocks tile [n_rows, n_cols] exactly, so no access needs a mask. INDEX_64: offsets
    reach 2**31, so index arithmetic is 64-bit (otherwise 32-bit: fewer instructions).
    """
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    x_ptrs = x_ptr + rows[:, None] * x_row_stride + cols[None, :]
    y_ptrs = y_ptr + rows[:, None] * n_cols + cols[None, :]
    # The weight is shared by every row: ask L2 to keep it.
    if EVEN:
        x = tl.load(x_ptrs)
        w = tl.load(w_ptr + cols, eviction_policy="evict_last")
    else:
        col_mask = cols < n_cols
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        x = tl.load(x_ptrs, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last")

    x = x.to(tl.float32)
    # Masked lanes are zero, so the sum covers exactly n_cols elements.
    rstd = tl.math.rsqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    # Same order as the reference: normalise, then scale by the weight, then cast once.
    y = ((x * rstd[:, None]) * w.to(tl.float32)[None, :]).to(y_ptr.dtype.element_ty)
    if EVEN:
        tl.store(y_ptrs, y)
    else:
        tl.store(y_ptrs, y, mask=mask)


def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The reference (``native``): sglang ``RMSNorm.forward_native``, several torch passes."""
    orig_dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(dim=-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return (h * weight).to(orig_dtype)


def rms_norm_composite(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``composite``: torch's own RMSNorm (a fused kernel on CUDA) on the fp32 upcast."""
    return F.rms_norm(x.to(torch.float32), (x.shape[-1],), weight.to(torch.float32), eps).to(
        x.dtype
    )


def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``triton``: one launch over x flattened to [rows, hidden] (arguments checked by rms_norm)."""
    n_cols = x.shape[-1]
    launch = tuning.row_launch(OP, "norm", n_cols, target_for(x.device))
    rows = as_rows(x, n_cols)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n_rows = rows.shape[0]
    if n_rows == 0:
        return y
    grid = (tuning.cdiv(n_rows, launch.block_rows),)
    _rms_norm_fwd_kernel[grid](
        rows,
        rows.stride(0),
        weight.contiguous(),
        y,
        n_rows,
        n_cols,
        eps,
        BLOCK_ROWS=launch.block_rows,
        BLOCK_COLS=launch.block_cols,
        EVEN=n_cols == launch.block_cols and n_rows % launch.block_rows == 0,
        INDEX_64=needs_int64(rows, y),
        num_warps=launch.num_warps,
    )
    return y


registry.register(OP, "triton", rms_norm_triton, unavailable_reason=triton_unavailable_reason)
registry.register(OP, "composite", rms_norm_composite)
registry.register(OP, "native", rms_norm_torch)


def check_rms_norm_args(op: str, x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Errors every implementation shares (also used by fused_add_rms_norm)."""
    check_floating(op, "x", x)
    check_floating(op, "weight", weight)
    check_same_device(op, x=x, weight=weight)
    if x.dim() == 0:
        raise ValueError(f"{op}: x is a scalar; expected [..., hidden]")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(
            f"{op}: weight has shape {tuple(weight.shape)} but x's hidden size is "
            f"{x.shape[-1]}; expected weight of shape ({x.shape[-1]},)"
        )
    if not eps >= 0.0:
        raise ValueError(f"{op}: eps is {eps}; expected a non-negative number such as 1e-6")


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """RMSNorm over the last dimension of `x` by the implementation the registry picks.

    Returns a new tensor of x's shape and dtype; x and weight are not modified. Under
    torch.compile it is the opaque op ``torch.ops.sglx.rms_norm`` (no graph break; the
    registry still chooses when it runs).
    """
    if torch.compiler.is_compiling():
        compiled: torch.Tensor = rms_norm_op(x, weight, eps)
        return compiled
    return _rms_norm(x, weight, eps)


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    check_rms_norm_args(OP, x, weight, eps)
    y: torch.Tensor = registry.call(OP, x.device, x, weight, eps)
    return y


@torch.library.custom_op(f"{LIBRARY}::{OP}", mutates_args=())
def rms_norm_op(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """``torch.ops.sglx.rms_norm`` (S4-70: ops torch.compile and graph capture see whole)."""
    return _rms_norm(x, weight, eps)


@rms_norm_op.register_fake
def _(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return empty_result(x)

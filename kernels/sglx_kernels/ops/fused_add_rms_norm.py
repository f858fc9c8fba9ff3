"""Fused residual add + RMSNorm: ``s = x + r``; returns ``(rms_norm(s), s)`` in one pass.

Semantics are sglang 0.5.23 ``RMSNorm.forward_native`` with a residual and
``fp32_residual=False`` (sglang/srt/layers/layernorm.py): the sum is taken in fp32, the new
residual is that sum cast to x's dtype, and the *fp32* sum (not its rounded copy) is what gets
normalised. Unlike sglang's CUDA kernel this returns new tensors instead of updating x and the
residual in place, so callers never see their inputs change. Kernel layout as in rms_norm.py
(Liger-Kernel's one-row-per-program RMSNorm, several short rows per program).
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
    empty_result,
    needs_int64,
    triton_unavailable_reason,
)
from sglx_kernels.ops.rms_norm import check_rms_norm_args

OP = "fused_add_rms_norm"


@triton.jit
def _fused_add_rms_norm_fwd_kernel(
    x_ptr,
    x_row_stride,
    r_ptr,
    r_row_stride,
    w_ptr,
    y_ptr,
    new_r_ptr,
    n_rows,
    n_cols,
    eps,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    EVEN: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """s = x + r in fp32; new_r = s in new_r's dtype; y = (s * rsqrt(mean(s^2) + eps)) * w.

    Each program holds BLOCK_ROWS whole rows; y and new_r are contiguous. EVEN and INDEX_64
    as in _rms_norm_fwd_kernel (no masks needed; 64-bit offsets needed).
    """
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    x_ptrs = x_ptr + rows[:, None] * x_row_stride + cols[None, :]
    r_ptrs = r_ptr + rows[:, None] * r_row_stride + cols[None, :]
    out_offsets = rows[:, None] * n_cols + cols[None, :]
    # The weight is shared by every row: ask L2 to keep it.
    if EVEN:
        x = tl.load(x_ptrs)
        r = tl.load(r_ptrs)
        w = tl.load(w_ptr + cols, eviction_policy="evict_last")
    else:
        col_mask = cols < n_cols
        mask = (rows < n_rows)[:, None] & col_mask[None, :]
        x = tl.load(x_ptrs, mask=mask, other=0.0)
        r = tl.load(r_ptrs, mask=mask, other=0.0)
        w = tl.load(w_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last")

    s = x.to(tl.float32) + r.to(tl.float32)
    new_r = s.to(new_r_ptr.dtype.element_ty)
    # Normalise the fp32 sum, as sglang does; masked lanes are zero.
    rstd = tl.math.rsqrt(tl.sum(s * s, axis=1) / n_cols + eps)
    y = ((s * rstd[:, None]) * w.to(tl.float32)[None, :]).to(y_ptr.dtype.element_ty)
    if EVEN:
        tl.store(new_r_ptr + out_offsets, new_r)
        tl.store(y_ptr + out_offsets, y)
    else:
        tl.store(new_r_ptr + out_offsets, new_r, mask=mask)
        tl.store(y_ptr + out_offsets, y, mask=mask)


def fused_add_rms_norm_torch(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference (``native``): sglang ``RMSNorm.forward_native(x, residual)``."""
    orig_dtype = x.dtype
    h = x.to(torch.float32) + residual.to(torch.float32)
    new_residual = h.to(orig_dtype)
    variance = h.pow(2).mean(dim=-1, keepdim=True)
    h = h * torch.rsqrt(variance + eps)
    return (h * weight).to(orig_dtype), new_residual


def fused_add_rms_norm_composite(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``composite``: one fp32 add into a fresh buffer, then torch's own RMSNorm."""
    # copy=True: for fp32 x, .to() would return x itself and add_ would modify the caller's x.
    h = x.to(torch.float32, copy=True).add_(residual)
    y = F.rms_norm(h, (x.shape[-1],), weight.to(torch.float32), eps)
    return y.to(x.dtype), h.to(x.dtype)


def fused_add_rms_norm_triton(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``triton``: one launch over [rows, hidden] (arguments checked by fused_add_rms_norm)."""
    n_cols = x.shape[-1]
    launch = tuning.row_launch(OP, "norm", n_cols, target_for(x.device))
    x_rows = as_rows(x, n_cols)
    r_rows = as_rows(residual, n_cols)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    new_residual = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n_rows = x_rows.shape[0]
    if n_rows == 0:
        return y, new_residual
    grid = (tuning.cdiv(n_rows, launch.block_rows),)
    _fused_add_rms_norm_fwd_kernel[grid](
        x_rows,
        x_rows.stride(0),
        r_rows,
        r_rows.stride(0),
        weight.contiguous(),
        y,
        new_residual,
        n_rows,
        n_cols,
        eps,
        BLOCK_ROWS=launch.block_rows,
        BLOCK_COLS=launch.block_cols,
        EVEN=n_cols == launch.block_cols and n_rows % launch.block_rows == 0,
        INDEX_64=needs_int64(x_rows, r_rows, y),
        num_warps=launch.num_warps,
    )
    return y, new_residual


registry.register(
    OP, "triton", fused_add_rms_norm_triton, unavailable_reason=triton_unavailable_reason
)
registry.register(OP, "composite", fused_add_rms_norm_composite)
registry.register(OP, "native", fused_add_rms_norm_torch)


def fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rms_norm(x + residual), x + residual)`` by the implementation the registry picks.

    Both results are new tensors in x's dtype and shape; x and residual are not modified.
    Under torch.compile it is the opaque op ``torch.ops.sglx.fused_add_rms_norm``.
    """
    if torch.compiler.is_compiling():
        compiled: tuple[torch.Tensor, torch.Tensor] = fused_add_rms_norm_op(
            x, residual, weight, eps
        )
        return compiled
    return _fused_add_rms_norm(x, residual, weight, eps)


def _fused_add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    check_rms_norm_args(OP, x, weight, eps)
    check_floating(OP, "residual", residual)
    if residual.shape != x.shape:
        raise ValueError(
            f"{OP}: residual has shape {tuple(residual.shape)} but x has {tuple(x.shape)}; "
            "they must match"
        )
    if residual.device != x.device:
        raise ValueError(f"{OP}: residual is on {residual.device} but x is on {x.device}")
    result: tuple[torch.Tensor, torch.Tensor] = registry.call(
        OP, x.device, x, residual, weight, eps
    )
    return result


@torch.library.custom_op(f"{LIBRARY}::{OP}", mutates_args=())
def fused_add_rms_norm_op(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.ops.sglx.fused_add_rms_norm``."""
    return _fused_add_rms_norm(x, residual, weight, eps)


@fused_add_rms_norm_op.register_fake
def _(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return empty_result(x), empty_result(x)

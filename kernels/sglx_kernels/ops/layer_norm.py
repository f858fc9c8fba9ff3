"""LayerNorm: ``y = (x - mean(x)) * rsqrt(var(x) + eps) * w + b``, in fp32, stored in x's dtype.

Semantics are sglang 0.5.23 ``LayerNorm.forward_native`` with the module's default dtype,
float32 (sglang/srt/layers/layernorm.py): x is upcast to fp32, ``F.layer_norm`` normalises it
with the biased variance (the mean of squared deviations) and applies the weight and the bias,
each optional (``elementwise_affine``, ``bias``), and the result is cast back once. The kernel
is the row layout of rms_norm (Liger-Kernel's src/liger_kernel/ops/layer_norm.py holds one row
per program; several short rows share one here), two reductions over rows held in registers:
the mean, then the variance of the centred row, which is exact where a one-pass sum of squares
would cancel.
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

OP = "layer_norm"


@triton.jit
def _layer_norm_fwd_kernel(
    x_ptr,
    x_row_stride,
    w_ptr,
    b_ptr,
    y_ptr,
    n_rows,
    n_cols,
    eps,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    EVEN: tl.constexpr,
    INDEX_64: tl.constexpr,
):
    """y[i, :] = (x[i, :] - mean_i) * rsqrt(var_i + eps) * w + b, in fp32.

    Each program holds BLOCK_ROWS whole rows (BLOCK_COLS >= n_cols); y is contiguous. Without
    HAS_WEIGHT / HAS_BIAS their pointers are placeholders never read. EVEN: the blocks tile
    [n_rows, n_cols] exactly, so no access needs a mask. INDEX_64: offsets reach 2**31.
    """
    pid = tl.program_id(0)
    if INDEX_64:
        pid = pid.to(tl.int64)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.arange(0, BLOCK_COLS)
    x_ptrs = x_ptr + rows[:, None] * x_row_stride + cols[None, :]
    y_ptrs = y_ptr + rows[:, None] * n_cols + cols[None, :]
    col_mask = cols < n_cols
    mask = (rows < n_rows)[:, None] & col_mask[None, :]
    if EVEN:
        x = tl.load(x_ptrs).to(tl.float32)
    else:
        x = tl.load(x_ptrs, mask=mask, other=0.0).to(tl.float32)
    # Masked lanes are zero, so the sum covers exactly n_cols elements; the centred row is
    # zeroed there again before the variance.
    mean = tl.sum(x, axis=1) / n_cols
    centred = x - mean[:, None]
    if not EVEN:
        centred = tl.where(mask, centred, 0.0)
    rstd = tl.math.rsqrt(tl.sum(centred * centred, axis=1) / n_cols + eps)
    y = centred * rstd[:, None]
    # The weight and bias are shared by every row: ask L2 to keep them.
    if HAS_WEIGHT:
        if EVEN:
            w = tl.load(w_ptr + cols, eviction_policy="evict_last")
        else:
            w = tl.load(w_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last")
        y = y * w.to(tl.float32)[None, :]
    if HAS_BIAS:
        if EVEN:
            b = tl.load(b_ptr + cols, eviction_policy="evict_last")
        else:
            b = tl.load(b_ptr + cols, mask=col_mask, other=0.0, eviction_policy="evict_last")
        y = y + b.to(tl.float32)[None, :]
    y = y.to(y_ptr.dtype.element_ty)
    if EVEN:
        tl.store(y_ptrs, y)
    else:
        tl.store(y_ptrs, y, mask=mask)


def layer_norm_torch(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """The reference (``native``): the formula in torch passes, in fp32 (the mean, the biased
    variance of the centred row, the optional affine terms), cast back once."""
    h = x.to(torch.float32)
    centred = h - h.mean(dim=-1, keepdim=True)
    variance = centred.pow(2).mean(dim=-1, keepdim=True)
    y = centred * torch.rsqrt(variance + eps)
    if weight is not None:
        y = y * weight.to(torch.float32)
    if bias is not None:
        y = y + bias.to(torch.float32)
    return y.to(x.dtype)


def layer_norm_composite(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """``composite``: torch's own LayerNorm (a fused kernel on CUDA) on the fp32 upcast, as
    sglang's forward_native calls it."""
    w = None if weight is None else weight.to(torch.float32)
    b = None if bias is None else bias.to(torch.float32)
    return F.layer_norm(x.to(torch.float32), (x.shape[-1],), w, b, eps).to(x.dtype)


def layer_norm_triton(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """``triton``: one launch over x flattened to [rows, hidden] (arguments checked by
    layer_norm)."""
    n_cols = x.shape[-1]
    launch = tuning.row_launch(OP, "norm", n_cols, target_for(x.device))
    rows = as_rows(x, n_cols)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    n_rows = rows.shape[0]
    if n_rows == 0:
        return y
    grid = (tuning.cdiv(n_rows, launch.block_rows),)
    _layer_norm_fwd_kernel[grid](
        rows,
        rows.stride(0),
        rows if weight is None else weight.contiguous(),
        rows if bias is None else bias.contiguous(),
        y,
        n_rows,
        n_cols,
        eps,
        HAS_WEIGHT=weight is not None,
        HAS_BIAS=bias is not None,
        BLOCK_ROWS=launch.block_rows,
        BLOCK_COLS=launch.block_cols,
        EVEN=n_cols == launch.block_cols and n_rows % launch.block_rows == 0,
        INDEX_64=needs_int64(rows, y),
        num_warps=launch.num_warps,
    )
    return y


registry.register(OP, "triton", layer_norm_triton, unavailable_reason=triton_unavailable_reason)
registry.register(OP, "composite", layer_norm_composite)
registry.register(OP, "native", layer_norm_torch)


def check_layer_norm_args(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> None:
    """Errors every implementation shares."""
    check_floating(OP, "x", x)
    if x.dim() == 0:
        raise ValueError(f"{OP}: x is a scalar; expected [..., hidden]")
    present = {"x": x}
    for name, term in (("weight", weight), ("bias", bias)):
        if term is None:
            continue
        check_floating(OP, name, term)
        present[name] = term
        if term.dim() != 1 or term.shape[0] != x.shape[-1]:
            raise ValueError(
                f"{OP}: {name} has shape {tuple(term.shape)} but x's hidden size is "
                f"{x.shape[-1]}; expected {name} of shape ({x.shape[-1]},)"
            )
    check_same_device(OP, **present)
    if not eps >= 0.0:
        raise ValueError(f"{OP}: eps is {eps}; expected a non-negative number such as 1e-5")


def layer_norm(
    x: torch.Tensor,
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
) -> torch.Tensor:
    """LayerNorm over the last dimension of `x` by the implementation the registry picks;
    `weight` and `bias` are each optional (None: not applied).

    Returns a new tensor of x's shape and dtype; no argument is modified. Under torch.compile it
    is the opaque op ``torch.ops.sglx.layer_norm``.
    """
    if torch.compiler.is_compiling():
        compiled: torch.Tensor = layer_norm_op(x, weight, bias, eps)
        return compiled
    return _layer_norm(x, weight, bias, eps)


def _layer_norm(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    check_layer_norm_args(x, weight, bias, eps)
    y: torch.Tensor = registry.call(OP, x.device, x, weight, bias, eps)
    return y


@torch.library.custom_op(f"{LIBRARY}::{OP}", mutates_args=())
def layer_norm_op(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """``torch.ops.sglx.layer_norm`` (S4-70: ops torch.compile and graph capture see whole)."""
    return _layer_norm(x, weight, bias, eps)


@layer_norm_op.register_fake
def _(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    return empty_result(x)

"""Host-side helpers shared by the op modules: argument checks and the 2-D views kernels take."""

from __future__ import annotations

import torch

from sglx_kernels import _triton
from sglx_kernels.registry import Availability

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
LIBRARY = "sglx"
"""The torch.library namespace of the ops: ``torch.ops.sglx.<op>``."""

# The Triton implementations' availability check, shared by every op.
triton_unavailable_reason: Availability = _triton.unavailable_reason


def check_floating(op: str, name: str, tensor: torch.Tensor) -> None:
    """Kernels and references alike take fp16, bf16 or fp32."""
    if tensor.dtype not in FLOAT_DTYPES:
        raise ValueError(
            f"{op}: {name} has dtype {tensor.dtype}; expected float16, bfloat16 or float32"
        )


def check_same_device(op: str, **tensors: torch.Tensor) -> None:
    devices = {name: t.device for name, t in tensors.items()}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"{op}: all tensors must be on one device, got {listed}")


def as_rows(tensor: torch.Tensor, n_cols: int) -> torch.Tensor:
    """`tensor` as [rows, n_cols] whose last dimension is contiguous, copying only if needed.

    The kernels take a row stride, so a slice of a wider tensor (``qkv[:, :q_size]``) or a
    transposed batch of rows travels without a copy; anything else is made contiguous.
    """
    rows = tensor.reshape(-1, n_cols)
    if n_cols > 1 and rows.stride(1) != 1:
        rows = rows.contiguous()
    return rows


def row_stride(rows: torch.Tensor) -> int:
    """Row stride of a 2-D view (a single row may report any stride; use its width)."""
    return rows.stride(0) if rows.shape[0] > 1 else rows.shape[1]


# Headroom for the blocks that overhang the last row (masked, yet their offsets are computed).
_INDEX_HEADROOM = 1 << 22


def needs_int64(*tensors: torch.Tensor) -> bool:
    """Whether element offsets into any of `tensors` can reach 2**31 (kernels then index in
    64 bits; below that, 32-bit offsets save instructions in every address computation)."""
    for t in tensors:
        span = sum(
            (size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride(), strict=True)
        )
        if span + _INDEX_HEADROOM >= 1 << 31:
            return True
    return False


def gated_output(x: torch.Tensor) -> torch.Tensor:
    """An empty result of a gated activation of `x`: [..., d] from [..., 2 * d]."""
    return x.new_empty((*x.shape[:-1], x.shape[-1] // 2))


def empty_result(like: torch.Tensor) -> torch.Tensor:
    """An empty, contiguous tensor of `like`'s shape, dtype and device: what an op returns."""
    return torch.empty(like.shape, dtype=like.dtype, device=like.device)

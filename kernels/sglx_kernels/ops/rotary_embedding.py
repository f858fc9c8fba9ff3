"""Rotary position embedding (RoPE) of query and key, neox or GPT-J style, partial rotary dims.

Semantics are sglang 0.5.23 ``RotaryEmbedding.forward_native`` with ``apply_rotary_emb``
(sglang/srt/layers/rotary_embedding/base.py and utils.py). For each token t and head h, only
the first ``rotary_dim`` of the ``head_size`` features rotate; the rest pass through::

    cos, sin = cos_sin_cache[positions[t]].chunk(2)          # rotary_dim / 2 each
    neox:  x1 = x[:r/2],  x2 = x[r/2:r]                      # halves
    GPT-J: x1 = x[0:r:2], x2 = x[1:r:2]                      # interleaved pairs
    o1 = x1 * cos - x2 * sin;  o2 = x2 * cos + x1 * sin      # written back where x1, x2 were

sglang casts cos and sin to x's dtype and computes in that dtype, one rounding per product and
one per sum; the kernel rounds at the same points, so it matches the reference bit for bit up
to fp32 contraction. The kernel handles all heads of one token per program (tiled by head
blocks), reading cos/sin once for q and k. Inputs may be row slices of a fused qkv tensor.
"""

from __future__ import annotations

import torch

from sglx_kernels import registry, tuning
from sglx_kernels._triton import target_for, tl, triton
from sglx_kernels.ops._common import (
    LIBRARY,
    as_rows,
    check_floating,
    check_same_device,
    empty_result,
    triton_unavailable_reason,
)

OP = "rotary_embedding"


@triton.jit
def _rotate_heads(
    src_ptr,
    src_token_stride,
    dst_ptr,
    token,
    n_heads,
    head_block,
    cos,
    sin,
    HEAD_SIZE: tl.constexpr,
    HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
    BLOCK_HEADS: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    PASS: tl.constexpr,
    BLOCK_PASS: tl.constexpr,
):
    """Rotate heads [head_block * BLOCK_HEADS, ...) of one token from src into dst (contiguous)."""
    heads = head_block * BLOCK_HEADS + tl.arange(0, BLOCK_HEADS)
    head_mask = (heads < n_heads)[:, None]
    src = src_ptr + token * src_token_stride + heads[:, None] * HEAD_SIZE
    dst = dst_ptr + token * n_heads * HEAD_SIZE + heads[:, None] * HEAD_SIZE
    dtype = dst_ptr.dtype.element_ty
    # sglang: cos.to(x.dtype), then products and sums rounded to x's dtype one by one.
    c = cos.to(dtype).to(tl.float32)[None, :]
    s = sin.to(dtype).to(tl.float32)[None, :]

    if IS_NEOX:
        half = tl.arange(0, BLOCK_HALF)[None, :]
        mask = head_mask & (half < HALF)
        x1 = tl.load(src + half, mask=mask, other=0.0).to(tl.float32)
        x2 = tl.load(src + HALF + half, mask=mask, other=0.0).to(tl.float32)
        o1 = ((x1 * c).to(dtype).to(tl.float32) - (x2 * s).to(dtype).to(tl.float32)).to(dtype)
        o2 = ((x2 * c).to(dtype).to(tl.float32) + (x1 * s).to(dtype).to(tl.float32)).to(dtype)
        tl.store(dst + half, o1, mask=mask)
        tl.store(dst + HALF + half, o2, mask=mask)
    else:
        # Load the interleaved pairs contiguously, then split [.., 2j], [.., 2j + 1] apart.
        pair = tl.arange(0, 2 * BLOCK_HALF)[None, :]
        mask = head_mask & (pair < 2 * HALF)
        x = tl.load(src + pair, mask=mask, other=0.0).to(tl.float32)
        x1, x2 = tl.split(tl.reshape(x, (BLOCK_HEADS, BLOCK_HALF, 2)))
        o1 = ((x1 * c).to(dtype).to(tl.float32) - (x2 * s).to(dtype).to(tl.float32)).to(dtype)
        o2 = ((x2 * c).to(dtype).to(tl.float32) + (x1 * s).to(dtype).to(tl.float32)).to(dtype)
        out = tl.reshape(tl.join(o1, o2), (BLOCK_HEADS, 2 * BLOCK_HALF))
        tl.store(dst + pair, out, mask=mask)

    if PASS > 0:  # features past rotary_dim are copied unchanged
        rest = 2 * HALF + tl.arange(0, BLOCK_PASS)[None, :]
        rest_mask = head_mask & (rest < HEAD_SIZE)
        tl.store(dst + rest, tl.load(src + rest, mask=rest_mask, other=0.0), mask=rest_mask)


@triton.jit
def _rotary_embedding_fwd_kernel(
    positions_ptr,
    q_ptr,
    q_token_stride,
    k_ptr,
    k_token_stride,
    cache_ptr,
    cache_row_stride,
    q_out_ptr,
    k_out_ptr,
    n_q_heads,
    n_k_heads,
    HEAD_SIZE: tl.constexpr,
    HALF: tl.constexpr,
    IS_NEOX: tl.constexpr,
    BLOCK_HEADS: tl.constexpr,
    BLOCK_HALF: tl.constexpr,
    PASS: tl.constexpr,
    BLOCK_PASS: tl.constexpr,
):
    """Program (t, b): cos, sin = cache[positions[t], :HALF], cache[positions[t], HALF:2 HALF];
    rotate q and k heads [b * BLOCK_HEADS, (b + 1) * BLOCK_HEADS) of token t (see module doc).
    """
    token = tl.program_id(0).to(tl.int64)
    head_block = tl.program_id(1)
    position = tl.load(positions_ptr + token).to(tl.int64)
    half = tl.arange(0, BLOCK_HALF)
    half_mask = half < HALF
    row = cache_ptr + position * cache_row_stride
    # cos/sin rows are shared by every token at the same position: keep them in L2.
    cos = tl.load(row + half, mask=half_mask, other=0.0, eviction_policy="evict_last")
    sin = tl.load(row + HALF + half, mask=half_mask, other=0.0, eviction_policy="evict_last")
    _rotate_heads(
        q_ptr, q_token_stride, q_out_ptr, token, n_q_heads, head_block, cos, sin,
        HEAD_SIZE, HALF, IS_NEOX, BLOCK_HEADS, BLOCK_HALF, PASS, BLOCK_PASS,
    )  # fmt: skip
    _rotate_heads(
        k_ptr, k_token_stride, k_out_ptr, token, n_k_heads, head_block, cos, sin,
        HEAD_SIZE, HALF, IS_NEOX, BLOCK_HEADS, BLOCK_HALF, PASS, BLOCK_PASS,
    )  # fmt: skip


def _apply_rotary_emb(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool
) -> torch.Tensor:
    """sglang ``apply_rotary_emb``: x [tokens, heads, rotary_dim], cos/sin [tokens, rotary/2]."""
    cos = cos.unsqueeze(-2).to(x.dtype)
    sin = sin.unsqueeze(-2).to(x.dtype)
    if is_neox:
        x1, x2 = torch.chunk(x, 2, dim=-1)
    else:
        x1 = x[..., ::2]
        x2 = x[..., 1::2]
    o1 = x1 * cos - x2 * sin
    o2 = x2 * cos + x1 * sin
    if is_neox:
        return torch.cat((o1, o2), dim=-1)
    return torch.stack((o1, o2), dim=-1).flatten(-2)


def rotary_embedding_torch(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The reference (``native``): sglang ``RotaryEmbedding.forward_native``."""
    positions = positions.flatten()
    num_tokens = positions.shape[0]
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        heads = x.reshape(num_tokens, -1, head_size)  # sglang: view; reshape also takes strided x
        rotated = _apply_rotary_emb(heads[..., :rotary_dim], cos, sin, is_neox)
        return torch.cat((rotated, heads[..., rotary_dim:]), dim=-1).reshape(x.shape)

    return rotate(query), rotate(key)


def rotary_embedding_composite(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``composite``: the reference's arithmetic written into one output buffer per tensor,
    without its concatenations (same rounding, so the same bits)."""
    positions = positions.flatten()
    num_tokens = positions.shape[0]
    cos, sin = cos_sin_cache.index_select(0, positions).chunk(2, dim=-1)
    half = rotary_dim // 2

    def rotate(x: torch.Tensor) -> torch.Tensor:
        heads = x.reshape(num_tokens, -1, head_size)
        out = torch.empty(heads.shape, dtype=x.dtype, device=x.device)
        c = cos.unsqueeze(-2).to(x.dtype)
        s = sin.unsqueeze(-2).to(x.dtype)
        if is_neox:
            x1, x2 = heads[..., :half], heads[..., half:rotary_dim]
            o1, o2 = out[..., :half], out[..., half:rotary_dim]
        else:
            x1, x2 = heads[..., 0:rotary_dim:2], heads[..., 1:rotary_dim:2]
            o1, o2 = out[..., 0:rotary_dim:2], out[..., 1:rotary_dim:2]
        torch.mul(x1, c, out=o1).sub_(x2 * s)
        torch.mul(x2, c, out=o2).add_(x1 * s)
        if rotary_dim < head_size:
            out[..., rotary_dim:] = heads[..., rotary_dim:]
        return out.view(x.shape)

    return rotate(query), rotate(key)


def rotary_embedding_triton(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``triton``: one launch for q and k (arguments checked by rotary_embedding)."""
    q_out = torch.empty(query.shape, dtype=query.dtype, device=query.device)
    k_out = torch.empty(key.shape, dtype=key.dtype, device=key.device)
    num_tokens = positions.numel()
    if num_tokens == 0:
        return q_out, k_out
    q_rows = as_rows(query, query.numel() // num_tokens)
    k_rows = as_rows(key, key.numel() // num_tokens)
    n_q_heads = q_rows.shape[1] // head_size
    n_k_heads = k_rows.shape[1] // head_size
    cache = cos_sin_cache if cos_sin_cache.stride(1) == 1 else cos_sin_cache.contiguous()

    half = rotary_dim // 2
    block_half = tuning.next_power_of_2(half)
    pass_width = head_size - rotary_dim
    block_pass = tuning.next_power_of_2(pass_width) if pass_width else 1
    per_head = 2 * block_half + (block_pass if pass_width else 0)
    settings = tuning.family_tuning("rotary", target_for(query.device))
    most_heads = tuning.next_power_of_2(max(n_q_heads, n_k_heads))
    block_heads = min(most_heads, max(1, settings.elements_per_program // per_head))
    warps = tuning.num_warps(settings.threads_for(block_heads * per_head), target_for(query.device))
    grid = (num_tokens, tuning.cdiv(max(n_q_heads, n_k_heads), block_heads))
    _rotary_embedding_fwd_kernel[grid](
        positions.reshape(-1).contiguous(),
        q_rows,
        q_rows.stride(0),
        k_rows,
        k_rows.stride(0),
        cache,
        cache.stride(0),
        q_out,
        k_out,
        n_q_heads,
        n_k_heads,
        HEAD_SIZE=head_size,
        HALF=half,
        IS_NEOX=is_neox,
        BLOCK_HEADS=block_heads,
        BLOCK_HALF=block_half,
        PASS=pass_width,
        BLOCK_PASS=block_pass,
        num_warps=warps,
    )
    return q_out, k_out


registry.register(
    OP, "triton", rotary_embedding_triton, unavailable_reason=triton_unavailable_reason
)
registry.register(OP, "composite", rotary_embedding_composite)
registry.register(OP, "native", rotary_embedding_torch)


def _check_args(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
) -> None:
    if positions.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"{OP}: positions has dtype {positions.dtype}; expected int32 or int64")
    for name, tensor in (("query", query), ("key", key), ("cos_sin_cache", cos_sin_cache)):
        check_floating(OP, name, tensor)
    check_same_device(OP, positions=positions, query=query, key=key, cos_sin_cache=cos_sin_cache)
    if head_size <= 0:
        raise ValueError(f"{OP}: head_size is {head_size}; expected a positive number")
    if rotary_dim <= 0 or rotary_dim % 2 or rotary_dim > head_size:
        raise ValueError(
            f"{OP}: rotary_dim is {rotary_dim}; "
            f"expected an even number in [2, head_size={head_size}]"
        )
    if cos_sin_cache.dim() != 2 or cos_sin_cache.shape[1] != rotary_dim:
        raise ValueError(
            f"{OP}: cos_sin_cache has shape {tuple(cos_sin_cache.shape)}; expected "
            f"[max_position, rotary_dim={rotary_dim}] with cos in the first half, sin in the second"
        )
    num_tokens = positions.numel()
    for name, tensor in (("query", query), ("key", key)):
        per_token = tensor.numel() // num_tokens if num_tokens else 0
        if (num_tokens and (tensor.numel() % num_tokens or per_token % head_size)) or (
            not num_tokens and tensor.numel()
        ):
            raise ValueError(
                f"{OP}: {name} has {tensor.numel()} elements, not {num_tokens} tokens (the "
                f"number of positions) times a whole number of heads of head_size={head_size}"
            )


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate `query` and `key` ([tokens, heads * head_size]) at `positions` ([tokens], any
    shape that flattens to it) by the implementation the registry picks.

    Returns new tensors shaped like query and key; the inputs are not modified. Positions must
    index rows of `cos_sin_cache`; as in sglang they are not range-checked on the device.
    Under torch.compile it is the opaque op ``torch.ops.sglx.rotary_embedding``.
    """
    args = (positions, query, key, cos_sin_cache, head_size, rotary_dim, is_neox)
    if torch.compiler.is_compiling():
        compiled: tuple[torch.Tensor, torch.Tensor] = rotary_embedding_op(*args)
        return compiled
    return _rotary_embedding(*args)


def _rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    _check_args(positions, query, key, cos_sin_cache, head_size, rotary_dim)
    result: tuple[torch.Tensor, torch.Tensor] = registry.call(
        OP, query.device, positions, query, key, cos_sin_cache, head_size, rotary_dim, is_neox
    )
    return result


@torch.library.custom_op(f"{LIBRARY}::{OP}", mutates_args=())
def rotary_embedding_op(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``torch.ops.sglx.rotary_embedding``."""
    return _rotary_embedding(positions, query, key, cos_sin_cache, head_size, rotary_dim, is_neox)


@rotary_embedding_op.register_fake
def _(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    cos_sin_cache: torch.Tensor,
    head_size: int,
    rotary_dim: int,
    is_neox: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    return empty_result(query), empty_result(key)

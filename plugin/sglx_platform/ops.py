"""sglx kernels as the forwards of sglang's fused ops, for the ops the profile lists.

`register` hands an adapter per op to sglang through `BaseFusedOp.register_oot_forward` under
the platform's dispatch key. sglang consults that registry on out-of-tree platforms (cpu,
kunlun). On the in-tree ROCm platform it does not, so for the ops the profile lists there
(gfx1151, where AITER is off) `resolve_forward_hook` -- an AROUND hook on
`BaseFusedOp._resolve_forward_method`, installed by the general plugin -- consults it first.

Each adapter keeps sglang's forward_native semantics and hands back to forward_native for the
variants sglx kernels don't cover (a variance size override, extra residual terms, fused
quantization), so taking an op over never changes results.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sglx_core.profile import Profile

logger = logging.getLogger(__name__)


def _rms_norm(
    self: Any,
    x: Any,
    residual: Any = None,
    post_residual_addition: Any = None,
    quant_linear: Any = None,
) -> Any:
    import sglx_kernels

    if (
        post_residual_addition is not None
        or quant_linear is not None
        or self.variance_size_override is not None
        or self.cast_x_before_out_mul
        or self.fp32_residual
        or self.override_orig_dtype is not None
        or x.shape[-1] != self.hidden_size
    ):
        return self.forward_native(x, residual, post_residual_addition, quant_linear)
    if residual is None:
        return sglx_kernels.rms_norm(x, self.weight, self.variance_epsilon)
    return sglx_kernels.fused_add_rms_norm(x, residual, self.weight, self.variance_epsilon)


def _layer_norm(self: Any, x: Any) -> Any:
    import torch

    import sglx_kernels

    # sglx's kernel computes in fp32: the module's default dtype, where forward_native upcasts
    # to fp32 too. A module of another dtype normalises in it, so it keeps sglang's forward.
    if self.dtype != torch.float32 or x.shape[-1] != self.hidden_size:
        return self.forward_native(x)
    weight = self.weight if self.elementwise_affine else None
    bias = self.bias if self.use_bias else None
    return sglx_kernels.layer_norm(x, weight, bias, self.variance_epsilon)


def _silu_and_mul(self: Any, x: Any) -> Any:
    import sglx_kernels

    return sglx_kernels.silu_and_mul(x)


def _gelu_and_mul(self: Any, x: Any) -> Any:
    import sglx_kernels

    return sglx_kernels.gelu_and_mul(x, approximate=self.approximate)


def _rotary_embedding(
    self: Any,
    positions: Any,
    query: Any,
    key: Any,
    offsets: Any = None,
    fused_set_kv_buffer_arg: Any = None,
) -> Any:
    import sglx_kernels

    if fused_set_kv_buffer_arg is not None or hasattr(self, "sin_cos_cache"):
        return self.forward_native(positions, query, key, offsets, fused_set_kv_buffer_arg)
    if offsets is not None:
        positions = positions + offsets
    return sglx_kernels.rotary_embedding(
        positions.flatten(),
        query,
        key,
        self.cos_sin_cache,
        self.head_size,
        self.rotary_dim,
        self.is_neox_style,
    )


# op name in the profile -> (module, class, adapter). Only the exact classes: a subclass with
# its own cache or forward (YaRN, mrope, Gemma norms) keeps sglang's forwards.
ADAPTERS: dict[str, tuple[str, str, Callable[..., Any]]] = {
    "rms_norm": ("sglang.srt.layers.layernorm", "RMSNorm", _rms_norm),
    "layer_norm": ("sglang.srt.layers.layernorm", "LayerNorm", _layer_norm),
    "silu_and_mul": ("sglang.srt.layers.activation", "SiluAndMul", _silu_and_mul),
    "gelu_and_mul": ("sglang.srt.layers.activation", "GeluAndMul", _gelu_and_mul),
    "rotary_embedding": (
        "sglang.srt.layers.rotary_embedding.base",
        "RotaryEmbedding",
        _rotary_embedding,
    ),
}


def register(profile: Profile) -> list[str]:
    """Register sglx forwards for the ops `profile.kernels.serve` lists; returns their classes."""
    import importlib

    from sglang.kernels.fused_op import BaseFusedOp

    key = profile.platform.dispatch_key
    registered = []
    for op in profile.kernels.serve:
        module, name, adapter = ADAPTERS[op]
        op_cls = getattr(importlib.import_module(module), name)
        BaseFusedOp.register_oot_forward(op_cls, adapter, key)
        registered.append(name)
    if registered:
        logger.info("sglx: kernels serve %s under dispatch key '%s'", ", ".join(registered), key)
    return registered


def resolve_forward_hook(original: Callable[..., Any], op: Any) -> Any:
    """AROUND `BaseFusedOp._resolve_forward_method` on in-tree sglx platforms (ROCm).

    sglang looks at the out-of-tree registry only for out-of-tree platforms; this looks there
    first for the in-tree one, so the ops the profile lists get sglx kernels.
    """
    from sglang.srt.platforms import current_platform

    from sglx_platform.platforms.base import SglxPlatformMixin

    platform: Any = current_platform
    if isinstance(platform, SglxPlatformMixin) and not platform.is_out_of_tree():
        table = type(op)._oot_forward_registry.get(current_platform.get_dispatch_key_name(), {})
        registered = table.get(type(op))
        if registered is not None:
            return registered.__get__(op)
    return original(op)

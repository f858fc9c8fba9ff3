"""sglx kernels as sglang's forwards (sglx_platform.ops): the LayerNorm adapter on sglang 0.5.23's
own LayerNorm module. A float32 module (sglang's default) is taken over and gives its
forward_native's numbers, with or without its weight and bias; a module of another dtype keeps
sglang's forward; a profile listing the op registers the class under its dispatch key. The real
server exercises the other adapters (tests/integration/test_cpu_server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from helpers.profiles import bake

from sglx_core.profile import load_profile_file
from sglx_platform import ops

layernorm = pytest.importorskip("sglang.srt.layers.layernorm")
HIDDEN = 96


def module(dtype: torch.dtype = torch.float32, **kwargs: Any) -> Any:
    norm = layernorm.LayerNorm(HIDDEN, eps=1e-5, dtype=dtype, **kwargs)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.5 * torch.randn(HIDDEN, generator=generator))
        norm.bias.copy_(torch.randn(HIDDEN, generator=generator))
    return norm


@pytest.mark.parametrize(
    "options", [{}, {"bias": False}, {"elementwise_affine": False, "bias": False}], ids=str
)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_a_float32_module_is_served_by_sglx_with_sglangs_numbers(
    options: dict[str, bool], dtype: torch.dtype
) -> None:
    norm = module(**options)
    x = torch.randn(5, HIDDEN, generator=torch.Generator().manual_seed(1)).to(dtype) + 3
    ran: list[str] = []
    import sglx_kernels

    sglx_kernels.registry.set_recorder(lambda op, impl, _s: ran.append(op))
    try:
        with torch.no_grad():
            served = ops._layer_norm(norm, x)
            expected = norm.forward_native(x)
    finally:
        sglx_kernels.registry.set_recorder(None)
    assert ran == ["layer_norm"]
    assert served.dtype == dtype
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(served, expected, atol=tolerance, rtol=tolerance)


def test_a_module_of_another_dtype_keeps_sglangs_forward() -> None:
    """sglang normalises in the module's dtype there; sglx's kernel computes in fp32."""
    norm = module(torch.bfloat16)
    x = torch.randn(3, HIDDEN, dtype=torch.bfloat16)
    ran: list[str] = []
    import sglx_kernels

    sglx_kernels.registry.set_recorder(lambda op, impl, _s: ran.append(op))
    try:
        with torch.no_grad():
            assert torch.equal(ops._layer_norm(norm, x), norm.forward_native(x))
    finally:
        sglx_kernels.registry.set_recorder(None)
    assert ran == []


def test_a_profile_listing_layer_norm_registers_sglangs_class(tmp_path: Path) -> None:
    from sglang.kernels.fused_op import BaseFusedOp

    profile = load_profile_file(
        bake("cpu", tmp_path / "arch.yaml", kernels={"serve": ["layer_norm"]})
    )
    key = profile.platform.dispatch_key
    table = BaseFusedOp._oot_forward_registry.setdefault(key, {})
    before = dict(table)
    try:
        assert ops.register(profile) == ["LayerNorm"]
        assert table[layernorm.LayerNorm] is ops._layer_norm
    finally:  # the class registry is sglang's, shared by every test of this process
        table.clear()
        table.update(before)

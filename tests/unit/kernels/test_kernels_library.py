"""The ops as torch custom ops (seed S4-70: registered as ``torch.ops.<namespace>.<op>`` so that
torch.compile and graph capture see each as one opaque op).

Each public op is ``torch.ops.sglx.<op>``: torch's own checker (`torch.library.opcheck`: schema,
fake-tensor shapes, autograd registration, AOT dispatch) passes on it; under torch.compile the
public function becomes that op, with no graph break, and the registry still chooses the
implementation when the compiled code runs; in eager mode nothing changes. On a GPU host the
tensors live on the GPU (the Triton implementations run, and torch.compile's own backend compiles
around the op); here on the CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from kernels_helpers import device, requires_gpu

import sglx_kernels
from sglx_kernels import registry

MAX_POSITION = 64


def _inputs() -> dict[str, tuple[Any, ...]]:
    torch.manual_seed(0)
    x = torch.randn(4, 64)
    half = torch.arange(0, 32, 2, dtype=torch.float32) / 32
    freqs = torch.outer(torch.arange(MAX_POSITION, dtype=torch.float32), 1.0 / 10000.0**half)
    cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    positions = torch.tensor([0, 3, 7, 63])
    inputs = {
        "rms_norm": (x, torch.rand(64) + 0.5, 1e-6),
        "layer_norm": (x, torch.rand(64) + 0.5, torch.randn(64), 1e-5),
        "fused_add_rms_norm": (x, torch.randn(4, 64), torch.rand(64) + 0.5, 1e-6),
        "silu_and_mul": (torch.randn(4, 128),),
        "gelu_and_mul": (torch.randn(4, 128), "tanh"),
        # 2 query heads and 1 key head of 64, the first 32 of each rotated
        "rotary_embedding": (
            positions,
            torch.randn(4, 128),
            torch.randn(4, 64),
            cache,
            64,
            32,
            True,
        ),
    }
    dev = device()
    return {
        name: tuple(a.to(dev) if isinstance(a, torch.Tensor) else a for a in args)
        for name, args in inputs.items()
    }


OPS = sorted(_inputs())


def test_every_public_op_is_a_custom_op_of_the_sglx_library() -> None:
    public = {name for name in sglx_kernels.__all__ if name not in ("__version__", "registry")}
    assert public == set(OPS)
    for name in OPS:
        assert hasattr(torch.ops.sglx, name), name


@pytest.mark.parametrize("name", OPS)
def test_torch_checks_each_custom_op(name: str) -> None:
    args = _inputs()[name]
    op = getattr(torch.ops.sglx, name).default
    torch.library.opcheck(op, args)
    expected = getattr(sglx_kernels, name)(*args)
    torch.testing.assert_close(op(*args), expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", OPS)
def test_torch_compile_sees_one_op_and_the_registry_still_chooses(name: str) -> None:
    args = _inputs()[name]
    public: Callable[..., Any] = getattr(sglx_kernels, name)
    graphs: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, _: Any) -> Callable[..., Any]:
        graphs.append(gm)
        return gm.forward

    compiled = torch.compile(lambda *a: public(*a), backend=backend, fullgraph=True)
    ran: list[tuple[str, str]] = []
    registry.set_recorder(lambda op, impl, _: ran.append((op, impl)))
    try:
        got = compiled(*args)
    finally:
        registry.set_recorder(None)
    torch.testing.assert_close(got, public(*args), rtol=0, atol=0)
    (graph,) = graphs  # fullgraph: one graph, no break
    targets = [node.target for node in graph.graph.nodes if node.op == "call_function"]
    assert getattr(torch.ops.sglx, name).default in targets, targets
    assert [op for op, _ in ran] == [name]  # chosen at run time, inside the compiled code


@requires_gpu
def test_inductor_compiles_a_layer_around_the_ops_on_the_gpu() -> None:
    """torch.compile's default backend (Inductor) fuses what is around the ops and calls each op
    whole: a norm, a projection and a gated activation match eager mode."""
    args = _inputs()
    x, weight, eps = args["rms_norm"]
    proj = torch.randn(64, 128, device=x.device) / 8

    def layer(h: torch.Tensor) -> torch.Tensor:
        gate_up = sglx_kernels.rms_norm(h * 2, weight, eps) @ proj
        return sglx_kernels.silu_and_mul(gate_up) + 1

    compiled = torch.compile(layer, fullgraph=True)
    torch.testing.assert_close(compiled(x), layer(x))

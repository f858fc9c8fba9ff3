"""layer_norm: the Triton kernel (Triton's interpreter on CPU, compiled on a GPU), the composite
and the reference agree across shapes, dtypes, memory layouts and the optional weight and bias;
and each equals sglang 0.5.23's own `LayerNorm.forward_native`, which the plugin's forward
replaces."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from kernels_helpers import (
    DTYPES,
    TOLERANCES,
    TritonRun,
    TritonRunner,
    assert_verbose_allclose,
    device,
    layout,
    randn,
    requires_gpu,
)

import sglx_kernels
from sglx_kernels import registry
from sglx_kernels.ops.layer_norm import layer_norm_composite, layer_norm_torch

EPS = 1e-5


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str = "contiguous"
    affine: str = "weight+bias"  # or "weight", "none"
    weight_dtype: torch.dtype | None = None

    @property
    def id(self) -> str:
        dims = "x".join(map(str, self.shape))
        weight = f"-w{str(self.weight_dtype).removeprefix('torch.')}" if self.weight_dtype else ""
        dtype = str(self.dtype).removeprefix("torch.")
        return f"{dims}-{dtype}-{self.layout}-{self.affine}{weight}"

    def inputs(
        self, seed: int, dev: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, float]:
        # An offset mean, as activations have: the centring must not cancel it away.
        x = layout(self.shape, self.dtype, seed, dev, self.layout) + 3
        hidden = self.shape[-1:]
        dtype = self.weight_dtype or self.dtype
        weight = (1.0 + 0.5 * randn(hidden, torch.float32, seed + 1, dev)).to(dtype)
        bias = randn(hidden, torch.float32, seed + 2, dev).to(dtype)
        if self.affine == "none":
            return x, None, None, EPS
        return x, weight, bias if self.affine == "weight+bias" else None, EPS


_DT = (torch.float32, torch.float16, torch.bfloat16)
# Small enough for the interpreter: one token, odd hidden sizes, 3-D, many short rows.
TRITON_CASES = [
    # (1024, 64): the interpreter's blocks tile it exactly, so the kernel's mask-free EVEN path
    *(
        Case(shape, dt)
        for shape in [(1, 128), (3, 123), (5, 4095), (2, 3, 64), (1024, 64)]
        for dt in _DT
    ),
    *(Case((3, 123), dt, lay) for dt in _DT for lay in ("row_slice", "transposed")),
    *(Case((7, 100), dt, affine=affine) for dt in _DT for affine in ("weight", "none")),
    # sglang's module keeps its weight and bias in float32 while the activations are bf16
    Case((6, 256), torch.bfloat16, weight_dtype=torch.float32),
    Case((1024, 64), torch.float16, affine="none"),
]
# The torch paths take the large batches on CPU too.
TORCH_CASES = [
    *(Case(shape, dt) for shape in [(1, 4096), (2048, 1024), (3, 5, 4095)] for dt in _DT),
    *(Case((257, 4095), dt, lay) for dt in _DT for lay in ("row_slice", "transposed")),
    *(Case((64, 768), dt, affine=affine) for dt in _DT for affine in ("weight", "none")),
]


def _reference(case: Case, dev: torch.device, seed: int) -> torch.Tensor:
    return layer_norm_torch(*case.inputs(seed, dev))


@pytest.fixture(scope="module")
def triton_runs() -> list[TritonRun]:
    dev = device()
    calls = [(case.inputs(i, dev), {}) for i, case in enumerate(TRITON_CASES)]
    return TritonRunner(dev).run("layer_norm", calls)


@pytest.mark.parametrize("index", range(len(TRITON_CASES)), ids=[c.id for c in TRITON_CASES])
def test_triton_matches_reference(index: int, triton_runs: list[TritonRun]) -> None:
    case = TRITON_CASES[index]
    run = triton_runs[index]
    assert run.ran == ("triton",), "the registry did not run the Triton implementation"
    atol, rtol = TOLERANCES[case.dtype]
    expected = _reference(case, device(), index)
    assert_verbose_allclose(run.output.to(expected.device), expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.id)
def test_composite_matches_reference(case: Case) -> None:
    dev = device()
    atol, rtol = TOLERANCES[case.dtype]
    actual = layer_norm_composite(*case.inputs(7, dev))
    assert_verbose_allclose(actual, _reference(case, dev, 7), atol=atol, rtol=rtol)


@pytest.mark.parametrize("affine", ["weight+bias", "weight", "none"])
@pytest.mark.parametrize(("dtype", "atol", "rtol"), DTYPES)
def test_the_op_is_sglangs_layer_norm_forward(
    dtype: torch.dtype, atol: float, rtol: float, affine: str
) -> None:
    """sglang's LayerNorm (float32 module: its weight and bias in fp32, as the plugin takes it
    over), its forward_native against the op with the module's own parameters."""
    LayerNorm = pytest.importorskip("sglang.srt.layers.layernorm").LayerNorm

    hidden = 96
    module = LayerNorm(hidden, eps=EPS, elementwise_affine=affine != "none",
                       bias=affine == "weight+bias").to(device())  # fmt: skip
    with torch.no_grad():
        module.weight.copy_(1.0 + 0.5 * randn((hidden,), torch.float32, 1, device()))
        module.bias.copy_(randn((hidden,), torch.float32, 2, device()))
    x = randn((5, hidden), dtype, 3, device()) + 3
    weight = module.weight if module.elementwise_affine else None
    bias = module.bias if module.use_bias else None
    actual = sglx_kernels.layer_norm(x, weight, bias, module.variance_epsilon)
    with torch.no_grad():
        expected = module.forward_native(x)
    assert_verbose_allclose(actual, expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize(("dtype", "atol", "rtol"), DTYPES)
def test_dispatch_leaves_inputs_untouched_and_keeps_shape(
    dtype: torch.dtype, atol: float, rtol: float
) -> None:
    x, weight, bias, eps = Case((4, 3, 96), dtype).inputs(3, device())
    before = x.clone()
    y = sglx_kernels.layer_norm(x, weight, bias, eps)
    assert torch.equal(x, before)
    assert y.shape == x.shape and y.dtype == dtype
    assert_verbose_allclose(y, layer_norm_torch(x, weight, bias, eps), atol=atol, rtol=rtol)


def test_empty_batch_returns_empty() -> None:
    x = torch.empty(0, 64, device=device())
    assert sglx_kernels.layer_norm(x, torch.ones(64, device=device())).shape == (0, 64)


@pytest.mark.parametrize(
    ("w_shape", "b_shape", "dtype", "match"),
    [
        ((63,), (64,), torch.float32, r"weight has shape \(63,\) but x's hidden size is 64"),
        ((64,), (4, 64), torch.float32, r"expected bias of shape \(64,\)"),
        ((64,), (64,), torch.int32, "x has dtype torch.int32"),
        ((64,), (64,), torch.float64, "x has dtype torch.float64"),
    ],
)
def test_bad_arguments_raise_value_error(
    w_shape: tuple[int, ...], b_shape: tuple[int, ...], dtype: torch.dtype, match: str
) -> None:
    x = torch.ones((4, 64), dtype=dtype)
    with pytest.raises(ValueError, match=match):
        sglx_kernels.layer_norm(x, torch.ones(w_shape), torch.zeros(b_shape))


def test_negative_eps_is_refused() -> None:
    with pytest.raises(ValueError, match=r"eps is -1\.0"):
        sglx_kernels.layer_norm(torch.ones(2, 8), None, None, -1.0)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("shape", [(16384, 4096), (65536, 128), (4099, 8192)], ids=str)
@pytest.mark.parametrize(("dtype", "atol", "rtol"), DTYPES)
def test_large_shapes_on_gpu_pick_triton_and_match(
    shape: tuple[int, int], dtype: torch.dtype, atol: float, rtol: float
) -> None:
    case = Case(shape, dtype)
    ran: list[str] = []
    registry.set_recorder(lambda _op, impl, _s: ran.append(impl))
    try:
        actual = sglx_kernels.layer_norm(*case.inputs(11, device()))
    finally:
        registry.set_recorder(None)
    assert ran == ["triton"]
    assert_verbose_allclose(actual, _reference(case, device(), 11), atol=atol, rtol=rtol)


@pytest.mark.gpu
@requires_gpu
def test_offsets_past_2_31_elements_stay_correct() -> None:
    """2**31 + 4096 elements: the kernel must switch to 64-bit offsets (checked on the last rows,
    which 32-bit offsets would wrap around)."""
    rows, hidden = (1 << 31) // 4096 + 1, 4096
    x = torch.randn(rows, hidden, dtype=torch.bfloat16, device=device())
    weight = torch.ones(hidden, dtype=torch.bfloat16, device=device())
    bias = torch.zeros(hidden, dtype=torch.bfloat16, device=device())
    y = sglx_kernels.layer_norm(x, weight, bias, EPS)
    tail = slice(rows - 3, rows)
    expected = layer_norm_torch(x[tail], weight, bias, EPS)
    assert_verbose_allclose(y[tail], expected, atol=2e-2, rtol=2e-2)
    del x, y
    torch.cuda.empty_cache()


@pytest.mark.gpu
@requires_gpu
def test_row_too_wide_for_one_program_falls_back_to_composite_on_gpu() -> None:
    registry.reset()
    ran: list[str] = []
    registry.set_recorder(lambda _op, impl, _s: ran.append(impl))
    try:
        x, weight, bias, eps = Case((4, 200_000), torch.bfloat16).inputs(5, device())
        actual = sglx_kernels.layer_norm(x, weight, bias, eps)
    finally:
        registry.set_recorder(None)
    assert ran == ["composite"]
    assert_verbose_allclose(actual, layer_norm_torch(x, weight, bias, eps), atol=2e-2, rtol=2e-2)

"""rms_norm: the Triton kernel (Triton's interpreter on CPU, compiled on a GPU), the composite
and the reference agree across shapes, dtypes and memory layouts."""

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
from sglx_kernels.ops.rms_norm import rms_norm_composite, rms_norm_torch

EPS = 1e-6


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str = "contiguous"
    weight_dtype: torch.dtype | None = None

    @property
    def id(self) -> str:
        dims = "x".join(map(str, self.shape))
        weight = f"-w{str(self.weight_dtype).removeprefix('torch.')}" if self.weight_dtype else ""
        return f"{dims}-{str(self.dtype).removeprefix('torch.')}-{self.layout}{weight}"

    def inputs(self, seed: int, dev: torch.device) -> tuple[torch.Tensor, torch.Tensor, float]:
        x = layout(self.shape, self.dtype, seed, dev, self.layout)
        weight = 1.0 + 0.5 * randn(self.shape[-1:], torch.float32, seed + 1, dev)
        return x, weight.to(self.weight_dtype or self.dtype), EPS


_DT = (torch.float32, torch.float16, torch.bfloat16)
# Small enough for the interpreter: one token, odd hidden sizes, 3-D, many short rows.
TRITON_CASES = [
    # (1024, 64): the interpreter's blocks tile it exactly, so the kernel's mask-free EVEN path
    *(
        Case(shape, dt)
        for shape in [(1, 128), (3, 123), (5, 4095), (2, 3, 64), (33, 64), (1024, 64)]
        for dt in _DT
    ),
    *(
        Case(shape, dt, lay)
        for shape in [(3, 123), (4, 1000)]
        for dt in _DT
        for lay in ("row_slice", "transposed")
    ),
    Case((6, 256), torch.bfloat16, weight_dtype=torch.float32),
]
# The torch paths take the large batches on CPU too.
TORCH_CASES = [
    *(
        Case(shape, dt)
        for shape in [(1, 4096), (2048, 4096), (8192, 128), (3, 5, 4095)]
        for dt in _DT
    ),
    *(Case((257, 4095), dt, lay) for dt in _DT for lay in ("row_slice", "transposed")),
]


def _reference(case: Case, dev: torch.device, seed: int) -> torch.Tensor:
    return rms_norm_torch(*case.inputs(seed, dev))


@pytest.fixture(scope="module")
def triton_runs() -> list[TritonRun]:
    dev = device()
    calls = [(case.inputs(i, dev), {}) for i, case in enumerate(TRITON_CASES)]
    return TritonRunner(dev).run("rms_norm", calls)


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
    actual = rms_norm_composite(*case.inputs(7, dev))
    assert_verbose_allclose(actual, _reference(case, dev, 7), atol=atol, rtol=rtol)


@pytest.mark.parametrize(("dtype", "atol", "rtol"), DTYPES)
def test_dispatch_leaves_inputs_untouched_and_keeps_shape(
    dtype: torch.dtype, atol: float, rtol: float
) -> None:
    x, weight, eps = Case((4, 3, 96), dtype).inputs(3, device())
    before = x.clone()
    y = sglx_kernels.rms_norm(x, weight, eps)
    assert torch.equal(x, before)
    assert y.shape == x.shape and y.dtype == dtype
    assert_verbose_allclose(y, rms_norm_torch(x, weight, eps), atol=atol, rtol=rtol)


def test_empty_batch_returns_empty() -> None:
    x = torch.empty(0, 64, device=device())
    assert sglx_kernels.rms_norm(x, torch.ones(64, device=device())).shape == (0, 64)


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "dtype", "match"),
    [
        ((4, 64), (63,), torch.float32, r"weight has shape \(63,\) but x's hidden size is 64"),
        ((4, 64), (4, 64), torch.float32, r"expected weight of shape \(64,\)"),
        ((4, 64), (64,), torch.int32, "x has dtype torch.int32"),
        ((4, 64), (64,), torch.float64, "x has dtype torch.float64"),
    ],
)
def test_bad_arguments_raise_value_error(
    x_shape: tuple[int, ...], w_shape: tuple[int, ...], dtype: torch.dtype, match: str
) -> None:
    x = torch.ones(x_shape, dtype=dtype)
    with pytest.raises(ValueError, match=match):
        sglx_kernels.rms_norm(x, torch.ones(w_shape))


def test_negative_eps_is_refused() -> None:
    with pytest.raises(ValueError, match=r"eps is -1\.0"):
        sglx_kernels.rms_norm(torch.ones(2, 8), torch.ones(8), -1.0)


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
        actual = sglx_kernels.rms_norm(*case.inputs(11, device()))
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
    y = sglx_kernels.rms_norm(x, weight, EPS)
    tail = slice(rows - 3, rows)
    assert_verbose_allclose(y[tail], rms_norm_torch(x[tail], weight, EPS), atol=2e-2, rtol=2e-2)
    del x, y
    torch.cuda.empty_cache()


@pytest.mark.gpu
@requires_gpu
def test_row_too_wide_for_one_program_falls_back_to_composite_on_gpu() -> None:
    registry.reset()
    ran: list[str] = []
    registry.set_recorder(lambda _op, impl, _s: ran.append(impl))
    try:
        x, weight, eps = Case((4, 200_000), torch.bfloat16).inputs(5, device())
        actual = sglx_kernels.rms_norm(x, weight, eps)
    finally:
        registry.set_recorder(None)
    assert ran == ["composite"]
    assert_verbose_allclose(actual, rms_norm_torch(x, weight, eps), atol=2e-2, rtol=2e-2)

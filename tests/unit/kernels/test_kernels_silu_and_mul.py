"""silu_and_mul: Triton kernel, composite and reference agree across shapes, dtypes and
layouts; odd last dimensions are refused."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from kernels_helpers import (
    TOLERANCES,
    TritonRun,
    TritonRunner,
    assert_verbose_allclose,
    device,
    layout,
    requires_gpu,
)

import sglx_kernels
from sglx_kernels import registry
from sglx_kernels.ops.silu_and_mul import silu_and_mul_composite, silu_and_mul_torch


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]  # of x: [..., 2 * d]
    dtype: torch.dtype
    layout: str = "contiguous"

    @property
    def id(self) -> str:
        dims = "x".join(map(str, self.shape))
        return f"{dims}-{str(self.dtype).removeprefix('torch.')}-{self.layout}"

    def x(self, seed: int, dev: torch.device) -> torch.Tensor:
        # Scaled so that the activation's tails (large |gate|) are exercised too.
        return 3.0 * layout(self.shape, self.dtype, seed, dev, self.layout)


_DT = (torch.float32, torch.float16, torch.bfloat16)
TRITON_CASES = [
    # (512, 256): the interpreter's blocks tile it exactly, so the kernel's mask-free EVEN path
    *(
        Case(shape, dt)
        for shape in [(1, 256), (3, 246), (5, 2 * 4095), (2, 3, 128), (512, 256)]
        for dt in _DT
    ),
    *(Case((4, 2 * 700), dt, lay) for dt in _DT for lay in ("row_slice", "transposed")),
]
TORCH_CASES = [
    *(
        Case(shape, dt)
        for shape in [(1, 2 * 11008), (2048, 2 * 2048), (3, 5, 2 * 123)]
        for dt in _DT
    ),
    *(Case((129, 2 * 1000), dt, lay) for dt in _DT for lay in ("row_slice", "transposed")),
]


@pytest.fixture(scope="module")
def triton_runs() -> list[TritonRun]:
    dev = device()
    calls = [((case.x(i, dev),), {}) for i, case in enumerate(TRITON_CASES)]
    return TritonRunner(dev).run("silu_and_mul", calls)


@pytest.mark.parametrize("index", range(len(TRITON_CASES)), ids=[c.id for c in TRITON_CASES])
def test_triton_matches_reference(index: int, triton_runs: list[TritonRun]) -> None:
    case = TRITON_CASES[index]
    run = triton_runs[index]
    assert run.ran == ("triton",), "the registry did not run the Triton implementation"
    atol, rtol = TOLERANCES[case.dtype]
    expected = silu_and_mul_torch(case.x(index, device()))
    assert_verbose_allclose(run.output.to(expected.device), expected, atol=atol, rtol=rtol)


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.id)
def test_composite_matches_reference(case: Case) -> None:
    x = case.x(7, device())
    atol, rtol = TOLERANCES[case.dtype]
    assert_verbose_allclose(silu_and_mul_composite(x), silu_and_mul_torch(x), atol=atol, rtol=rtol)


def test_output_shape_dtype_and_untouched_input() -> None:
    x = torch.randn(2, 3, 2 * 40, dtype=torch.bfloat16, device=device())
    before = x.clone()
    y = sglx_kernels.silu_and_mul(x)
    assert y.shape == (2, 3, 40) and y.dtype == torch.bfloat16
    assert torch.equal(x, before)


def test_odd_last_dimension_raises_value_error() -> None:
    with pytest.raises(ValueError, match="last dimension of x is 123, which is odd"):
        sglx_kernels.silu_and_mul(torch.ones(4, 123))


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize("case", [Case((8192, 2 * 14336), dt) for dt in _DT], ids=lambda c: c.id)
def test_large_batch_on_gpu_picks_triton_and_matches(case: Case) -> None:
    x = case.x(17, device())
    ran: list[str] = []
    registry.set_recorder(lambda _op, impl, _s: ran.append(impl))
    try:
        actual = sglx_kernels.silu_and_mul(x)
    finally:
        registry.set_recorder(None)
    assert ran == ["triton"]
    atol, rtol = TOLERANCES[case.dtype]
    assert_verbose_allclose(actual, silu_and_mul_torch(x), atol=atol, rtol=rtol)

"""fused_add_rms_norm: Triton kernel, composite and reference agree on both results (the
normalised fp32 sum and the new residual in x's dtype), and the inputs stay untouched."""

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
from sglx_kernels.ops.fused_add_rms_norm import (
    fused_add_rms_norm_composite,
    fused_add_rms_norm_torch,
)

EPS = 1e-5
Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, float]


@dataclass(frozen=True)
class Case:
    shape: tuple[int, ...]
    dtype: torch.dtype
    layout: str = "contiguous"
    residual_dtype: torch.dtype | None = None

    @property
    def id(self) -> str:
        dims = "x".join(map(str, self.shape))
        res = f"-r{str(self.residual_dtype).removeprefix('torch.')}" if self.residual_dtype else ""
        return f"{dims}-{str(self.dtype).removeprefix('torch.')}-{self.layout}{res}"

    def inputs(self, seed: int, dev: torch.device) -> Inputs:
        x = layout(self.shape, self.dtype, seed, dev, self.layout)
        residual = layout(self.shape, self.residual_dtype or self.dtype, seed + 1, dev, self.layout)
        weight = 1.0 + 0.5 * randn(self.shape[-1:], torch.float32, seed + 2, dev)
        return x, residual, weight.to(self.dtype), EPS


_DT = (torch.float32, torch.float16, torch.bfloat16)
TRITON_CASES = [
    # (1024, 64): the interpreter's blocks tile it exactly, so the kernel's mask-free EVEN path
    *(
        Case(shape, dt)
        for shape in [(1, 128), (3, 123), (5, 4095), (2, 3, 64), (33, 64), (1024, 64)]
        for dt in _DT
    ),
    *(Case((4, 1000), dt, lay) for dt in _DT for lay in ("row_slice", "transposed")),
    Case((6, 256), torch.bfloat16, residual_dtype=torch.float32),
]
TORCH_CASES = [
    *(Case(shape, dt) for shape in [(1, 4096), (2048, 4096), (8192, 128)] for dt in _DT),
    *(Case((257, 4095), dt, lay) for dt in _DT for lay in ("row_slice", "transposed")),
]


def _check(
    actual: tuple[torch.Tensor, torch.Tensor],
    expected: tuple[torch.Tensor, torch.Tensor],
    dtype: torch.dtype,
) -> None:
    atol, rtol = TOLERANCES[dtype]
    assert_verbose_allclose(actual[0], expected[0], atol=atol, rtol=rtol, what="out: ")
    assert_verbose_allclose(actual[1], expected[1], atol=atol, rtol=rtol, what="residual: ")


@pytest.fixture(scope="module")
def triton_runs() -> list[TritonRun]:
    dev = device()
    calls = [(case.inputs(i, dev), {}) for i, case in enumerate(TRITON_CASES)]
    return TritonRunner(dev).run("fused_add_rms_norm", calls)


@pytest.mark.parametrize("index", range(len(TRITON_CASES)), ids=[c.id for c in TRITON_CASES])
def test_triton_matches_reference(index: int, triton_runs: list[TritonRun]) -> None:
    case = TRITON_CASES[index]
    run = triton_runs[index]
    assert run.ran == ("triton",), "the registry did not run the Triton implementation"
    expected = fused_add_rms_norm_torch(*case.inputs(index, device()))
    out, new_residual = (t.to(expected[0].device) for t in run.output)
    _check((out, new_residual), expected, case.dtype)


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.id)
def test_composite_matches_reference(case: Case) -> None:
    inputs = case.inputs(7, device())
    _check(fused_add_rms_norm_composite(*inputs), fused_add_rms_norm_torch(*inputs), case.dtype)


@pytest.mark.parametrize("impl", ["composite", "native"])
def test_fp32_inputs_are_not_modified(impl: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """fp32 x makes x.to(float32) a no-op: an in-place add there would change the caller's x."""
    monkeypatch.setenv("SGLX_KERNELS_PREFER", f"fused_add_rms_norm={impl}")
    x, residual, weight, eps = Case((3, 64), torch.float32).inputs(1, device())
    x_before, residual_before = x.clone(), residual.clone()
    out, new_residual = sglx_kernels.fused_add_rms_norm(x, residual, weight, eps)
    assert torch.equal(x, x_before) and torch.equal(residual, residual_before)
    assert_verbose_allclose(new_residual, x_before + residual_before, atol=0, rtol=0)
    assert out.data_ptr() not in (x.data_ptr(), residual.data_ptr())


@pytest.mark.parametrize(
    ("residual_shape", "match"),
    [((4, 63), r"residual has shape \(4, 63\) but x has \(4, 64\)"), ((64,), "residual has shape")],
)
def test_mismatched_residual_raises_value_error(
    residual_shape: tuple[int, ...], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        sglx_kernels.fused_add_rms_norm(
            torch.ones(4, 64), torch.ones(residual_shape), torch.ones(64)
        )


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize(("dtype", "atol", "rtol"), DTYPES)
def test_large_batch_on_gpu_picks_triton_and_matches(
    dtype: torch.dtype, atol: float, rtol: float
) -> None:
    inputs = Case((16384, 4096), dtype).inputs(13, device())
    ran: list[str] = []
    registry.set_recorder(lambda _op, impl, _s: ran.append(impl))
    try:
        actual = sglx_kernels.fused_add_rms_norm(*inputs)
    finally:
        registry.set_recorder(None)
    assert ran == ["triton"]
    _check(actual, fused_add_rms_norm_torch(*inputs), dtype)

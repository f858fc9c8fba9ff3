"""rotary_embedding: Triton kernel, composite and reference agree for neox and GPT-J styles,
partial rotary dims, q/k head counts that differ, positions of any shape and dtype, and q/k
that are slices of a fused qkv tensor."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
from kernels_helpers import (
    TOLERANCES,
    TritonRun,
    TritonRunner,
    assert_verbose_allclose,
    device,
    generator,
    randn,
    requires_gpu,
)

import sglx_kernels
from sglx_kernels import registry
from sglx_kernels.ops.rotary_embedding import rotary_embedding_composite, rotary_embedding_torch

MAX_POSITION = 4096
Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int, int, bool]


def cos_sin_cache(
    rotary_dim: int, dtype: torch.dtype, dev: torch.device, base: float = 10000.0
) -> torch.Tensor:
    """sglang RotaryEmbedding._compute_cos_sin_cache: [max_position, rotary_dim], cos | sin."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32) / rotary_dim))
    freqs = torch.outer(torch.arange(MAX_POSITION, dtype=torch.float32), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).to(dtype=dtype, device=dev)


@dataclass(frozen=True)
class Case:
    tokens: int
    q_heads: int
    k_heads: int
    head_size: int
    rotary_dim: int
    is_neox: bool
    dtype: torch.dtype
    layout: str = "contiguous"  # contiguous | qkv_slice | heads_3d
    cache_dtype: torch.dtype = torch.float32
    positions: str = "int64"  # int64 | int32 | 2d

    @property
    def id(self) -> str:
        style = "neox" if self.is_neox else "gptj"
        cache = "" if self.cache_dtype == torch.float32 else f"-cache{str(self.cache_dtype)[6:]}"
        return (
            f"{style}-T{self.tokens}-q{self.q_heads}k{self.k_heads}-hs{self.head_size}-r{self.rotary_dim}-"
            f"{str(self.dtype).removeprefix('torch.')}-{self.layout}-{self.positions}{cache}"
        )

    def inputs(self, seed: int, dev: torch.device) -> Inputs:
        t, hs = self.tokens, self.head_size
        q_size, k_size = self.q_heads * hs, self.k_heads * hs
        if self.layout == "qkv_slice":  # q, k = qkv.split(...): rows strided, heads contiguous
            qkv = randn((t, q_size + 2 * k_size), self.dtype, seed, dev)
            query, key = qkv[:, :q_size], qkv[:, q_size : q_size + k_size]
        else:
            query = randn((t, q_size), self.dtype, seed, dev)
            key = randn((t, k_size), self.dtype, seed + 1, dev)
            if self.layout == "heads_3d":
                query, key = query.view(t, self.q_heads, hs), key.view(t, self.k_heads, hs)
        positions = torch.randint(0, MAX_POSITION, (t,), generator=generator(seed + 2)).to(dev)
        if self.positions == "int32":
            positions = positions.to(torch.int32)
        elif self.positions == "2d":
            positions = positions.view(1, t)
        cache = cos_sin_cache(self.rotary_dim, self.cache_dtype, dev)
        return positions, query, key, cache, hs, self.rotary_dim, self.is_neox


_DT = (torch.float32, torch.float16, torch.bfloat16)
TRITON_CASES = [
    *(Case(3, 4, 2, 128, 128, neox, dt) for neox in (True, False) for dt in _DT),
    *(Case(2, 3, 1, 128, 64, neox, torch.bfloat16) for neox in (True, False)),  # partial rotary
    *(Case(2, 2, 2, 80, 32, neox, torch.float16) for neox in (True, False)),  # 48 pass-through dims
    *(Case(3, 2, 1, 64, 48, neox, torch.float32) for neox in (True, False)),  # half of 24, not 2^k
    Case(1, 8, 8, 64, 64, True, torch.bfloat16),  # one token
    Case(3, 1, 4, 64, 64, False, torch.float16),  # more k heads than q heads
    *(Case(4, 4, 2, 128, 128, neox, torch.bfloat16, "qkv_slice") for neox in (True, False)),
    Case(3, 4, 2, 64, 32, True, torch.float32, "heads_3d", positions="2d"),
    Case(3, 4, 2, 64, 64, False, torch.float32, positions="int32", cache_dtype=torch.bfloat16),
]
TORCH_CASES = [
    *(Case(1024, 32, 8, 128, 128, neox, dt) for neox in (True, False) for dt in _DT),
    *(Case(257, 16, 2, 128, 64, neox, torch.bfloat16, "qkv_slice") for neox in (True, False)),
    Case(5, 2, 2, 80, 32, False, torch.float16, "heads_3d", positions="2d"),
]


def _check(actual: tuple[torch.Tensor, torch.Tensor], inputs: Inputs, dtype: torch.dtype) -> None:
    expected = rotary_embedding_torch(*inputs)
    atol, rtol = TOLERANCES[dtype]
    for name, a, e in zip(("query", "key"), actual, expected, strict=True):
        assert_verbose_allclose(a.to(e.device), e, atol=atol, rtol=rtol, what=f"{name}: ")


@pytest.fixture(scope="module")
def triton_runs() -> list[TritonRun]:
    dev = device()
    calls = [(case.inputs(i, dev), {}) for i, case in enumerate(TRITON_CASES)]
    return TritonRunner(dev).run("rotary_embedding", calls)


@pytest.mark.parametrize("index", range(len(TRITON_CASES)), ids=[c.id for c in TRITON_CASES])
def test_triton_matches_reference(index: int, triton_runs: list[TritonRun]) -> None:
    case = TRITON_CASES[index]
    run = triton_runs[index]
    assert run.ran == ("triton",), "the registry did not run the Triton implementation"
    _check(run.output, case.inputs(index, device()), case.dtype)


@pytest.mark.parametrize("case", TORCH_CASES, ids=lambda c: c.id)
def test_composite_matches_reference_bit_for_bit(case: Case) -> None:
    inputs = case.inputs(7, device())
    for a, e in zip(
        rotary_embedding_composite(*inputs), rotary_embedding_torch(*inputs), strict=True
    ):
        assert torch.equal(a, e)


def test_reference_matches_the_rotation_formula() -> None:
    """A hand-computed neox rotation of one head at one position pins the reference itself."""
    hs = rot = 4
    cache = cos_sin_cache(rot, torch.float32, torch.device("cpu"))
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    q, _ = rotary_embedding_torch(torch.tensor([5]), x, x.clone(), cache, hs, rot, True)
    angles = [5.0, 5.0 / 100.0]  # position * base^(-2i/rot), i = 0, 1
    c, s = [math.cos(a) for a in angles], [math.sin(a) for a in angles]
    expected = [1 * c[0] - 3 * s[0], 2 * c[1] - 4 * s[1], 3 * c[0] + 1 * s[0], 4 * c[1] + 2 * s[1]]
    assert_verbose_allclose(q[0], torch.tensor(expected), atol=1e-6, rtol=1e-6)


def test_outputs_are_new_tensors_shaped_like_the_inputs() -> None:
    positions, query, key, cache, hs, rot, neox = Case(
        3, 4, 2, 64, 32, True, torch.float32, "heads_3d"
    ).inputs(1, device())
    q_before, k_before = query.clone(), key.clone()
    q, k = sglx_kernels.rotary_embedding(positions, query, key, cache, hs, rot, neox)
    assert q.shape == query.shape and k.shape == key.shape
    assert torch.equal(query, q_before) and torch.equal(key, k_before)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"rotary_dim": 33}, "rotary_dim is 33; expected an even number in \\[2, head_size=64\\]"),
        ({"rotary_dim": 128}, "rotary_dim is 128"),
        ({"cache_width": 16}, r"cos_sin_cache has shape \(4096, 16\)"),
        ({"head_size": 48}, "query has 768 elements, not 3 tokens"),
        ({"positions_dtype": torch.float32}, "positions has dtype torch.float32"),
    ],
)
def test_bad_arguments_raise_value_error(change: dict[str, object], match: str) -> None:
    positions, query, key, _, hs, rot, neox = Case(3, 4, 2, 64, 64, True, torch.float32).inputs(
        0, device()
    )
    head_size = int(change.get("head_size", hs))  # type: ignore[call-overload]
    rotary_dim = int(change.get("rotary_dim", min(rot, head_size)))  # type: ignore[call-overload]
    width = int(change.get("cache_width", rotary_dim))  # type: ignore[call-overload]
    cache = cos_sin_cache(width if width % 2 == 0 else width + 1, torch.float32, device())
    dtype = change.get("positions_dtype")
    if isinstance(dtype, torch.dtype):
        positions = positions.to(dtype)
    with pytest.raises(ValueError, match=match):
        sglx_kernels.rotary_embedding(positions, query, key, cache, head_size, rotary_dim, neox)


@pytest.mark.gpu
@requires_gpu
@pytest.mark.parametrize(
    "case",
    [Case(16384, 32, 8, 128, 128, neox, dt) for neox in (True, False) for dt in _DT]
    + [Case(4099, 28, 4, 128, 64, False, torch.bfloat16, "qkv_slice")],
    ids=lambda c: c.id,
)
def test_large_batch_on_gpu_picks_triton_and_matches(case: Case) -> None:
    inputs = case.inputs(19, device())
    ran: list[str] = []
    registry.set_recorder(lambda _op, impl, _s: ran.append(impl))
    try:
        actual = sglx_kernels.rotary_embedding(*inputs)
    finally:
        registry.set_recorder(None)
    assert ran == ["triton"]
    _check(actual, inputs, case.dtype)

"""Helpers for the sglx_kernels tests (tests/unit/kernels/test_kernels_*.py).

- `assert_verbose_allclose`: allclose that reports how many elements disagree, where, and any
  NaN/inf disagreement (Liger-Kernel's test/utils.py pattern).
- `DTYPES`: (dtype, atol, rtol) triples. bf16 allows two units in the last place because
  Triton's interpreter rounds fp32 -> bf16 toward zero where GPUs round to nearest even.
- `TritonRunner`: runs op calls through the registry with the Triton implementation forced
  (``SGLX_KERNELS_IMPL=triton``) and a recorder attached. On a CUDA/HIP machine it runs them in
  this process on the GPU. On CPU it runs them in ONE child process per batch with
  ``TRITON_INTERPRET=1``: Triton fixes interpreter-or-compiler when a kernel is decorated, for
  its own library functions too, so the mode cannot be switched inside a test process that may
  already have imported Triton, and it must not leak into other tests.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

DTYPES = [
    pytest.param(torch.float32, 1e-5, 1e-5, id="fp32"),
    pytest.param(torch.float16, 2e-3, 2e-3, id="fp16"),
    pytest.param(torch.bfloat16, 2e-2, 2e-2, id="bf16"),
]
TOLERANCES = {p.values[0]: (p.values[1], p.values[2]) for p in DTYPES}

requires_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA or HIP GPU")


def device() -> torch.device:
    """The device kernel tests run on: the GPU when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(shape: Sequence[int], dtype: torch.dtype, seed: int, dev: torch.device) -> torch.Tensor:
    """Seeded normal samples (drawn on the CPU so every device sees the same numbers)."""
    return torch.randn(tuple(shape), generator=generator(seed)).to(dtype=dtype, device=dev)


def layout(
    shape: Sequence[int], dtype: torch.dtype, seed: int, dev: torch.device, kind: str
) -> torch.Tensor:
    """Seeded normal samples of `shape` in one of three memory layouts.

    contiguous; row_slice (a slice of wider rows: rows strided, last dim contiguous, as
    ``qkv[:, :q_size]``); transposed (the last dim is strided: the kernels' wrappers copy).
    """
    shape = tuple(shape)
    if kind == "contiguous":
        return randn(shape, dtype, seed, dev)
    if kind == "row_slice":
        return randn((*shape[:-1], shape[-1] + 5), dtype, seed, dev)[..., : shape[-1]]
    if kind == "transposed":
        return randn((*shape[:-2], shape[-1], shape[-2]), dtype, seed, dev).transpose(-1, -2)
    raise ValueError(f"unknown layout {kind!r}")


def assert_verbose_allclose(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    atol: float,
    rtol: float,
    max_print: int = 5,
    what: str = "",
) -> None:
    """assert allclose, saying how many elements differ, the first few, and NaN/inf mismatches."""
    assert actual.shape == expected.shape, (
        f"{what}shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    )
    assert actual.dtype == expected.dtype, f"{what}dtype {actual.dtype} != {expected.dtype}"
    a = actual.detach().float().cpu()
    e = expected.detach().float().cpu()
    close = torch.isclose(a, e, atol=atol, rtol=rtol, equal_nan=True)
    if bool(close.all()):
        return
    bad = (~close).nonzero()
    lines = [
        f"{what}{bad.shape[0]} of {a.numel()} elements differ beyond atol={atol}, rtol={rtol}; "
        f"max abs diff {float((a - e).abs().nan_to_num(float('inf')).max()):.3g}"
    ]
    nan_mismatch = int((a.isnan() != e.isnan()).sum())
    inf_mismatch = int((a.isinf() != e.isinf()).sum())
    if nan_mismatch or inf_mismatch:
        lines.append(f"NaN disagreements: {nan_mismatch}, inf disagreements: {inf_mismatch}")
    for index in bad[:max_print].tolist():
        where = tuple(index)
        lines.append(f"  at {where}: actual {a[where].item():.6g}, expected {e[where].item():.6g}")
    raise AssertionError("\n".join(lines))


@dataclass(frozen=True)
class TritonRun:
    """What one op call returned under the forced Triton implementation, and what the registry
    recorded as having run."""

    output: Any
    ran: tuple[str, ...]


Call = tuple[tuple[Any, ...], dict[str, Any]]
_CHILD_ENV_DROP = ("SGLX_KERNELS_PREFER", "SGLX_KERNELS_DENY")


def _run_calls(op: str, calls: Sequence[Call]) -> list[dict[str, Any]]:
    """In the current process: each call through the registry, Triton forced, recorded."""
    import sglx_kernels
    from sglx_kernels import registry

    saved = {k: os.environ.get(k) for k in ("SGLX_KERNELS_IMPL", *_CHILD_ENV_DROP)}
    ran: list[str] = []
    os.environ["SGLX_KERNELS_IMPL"] = "triton"
    for key in _CHILD_ENV_DROP:
        os.environ.pop(key, None)
    registry.set_recorder(lambda _op, impl, _seconds: ran.append(impl))
    try:
        results = []
        for args, kwargs in calls:
            ran.clear()
            output = getattr(sglx_kernels, op)(*args, **kwargs)
            results.append({"output": output, "ran": tuple(ran)})
        return results
    finally:
        registry.set_recorder(None)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class TritonRunner:
    """Runs batches of calls of one op with the Triton implementation; see the module doc."""

    def __init__(self, dev: torch.device) -> None:
        self.device = dev

    def run(self, op: str, calls: Sequence[Call]) -> list[TritonRun]:
        if self.device.type != "cpu":
            return [TritonRun(r["output"], r["ran"]) for r in _run_calls(op, calls)]
        with tempfile.TemporaryDirectory(prefix="sglx-kernels-interp-") as scratch:
            calls_path = Path(scratch) / "calls.pt"
            results_path = Path(scratch) / "results.pt"
            torch.save({"op": op, "calls": list(calls)}, calls_path)
            env = {k: v for k, v in os.environ.items() if k not in _CHILD_ENV_DROP}
            env["TRITON_INTERPRET"] = "1"
            proc = subprocess.run(
                [sys.executable, __file__, str(calls_path), str(results_path)],
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
            if proc.returncode != 0:
                raise AssertionError(
                    f"interpreter child for {op} exited {proc.returncode}:\n{proc.stderr[-4000:]}"
                )
            results = torch.load(results_path)
        return [TritonRun(r["output"], tuple(r["ran"])) for r in results]


def _child_main(calls_path: str, results_path: str) -> None:
    payload = torch.load(calls_path)
    torch.save(_run_calls(payload["op"], payload["calls"]), results_path)


if __name__ == "__main__":
    _child_main(sys.argv[1], sys.argv[2])

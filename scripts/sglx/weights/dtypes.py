"""The safetensors dtypes sglx knows, what kind each is, and how numpy holds them.

A safetensors header names each tensor's dtype with a short code (``BF16``, ``F8_E4M3``, ...).
The converter needs three facts per code: its width in bits (to check that a header's sizes
add up), whether it is a plain floating-point dtype the arch policy converts, and a numpy dtype
to convert and check values with. bfloat16 is not a numpy dtype; `ml_dtypes` (the dtype
extension JAX uses) provides it. The list follows the `Dtype` enum of the safetensors 0.8 format;
a code outside it is refused, because a wrong width would silently misplace every later tensor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import ml_dtypes
import numpy as np

from sglx_core.errors import SglxError

Kind = Literal["float", "int", "bool", "quantized", "complex"]


@dataclass(frozen=True)
class Dtype:
    """One safetensors dtype code."""

    code: str
    bits: int
    kind: Kind
    numpy: np.dtype[np.generic] | None = None  # None where no per-element view is needed
    precision: int = 0  # significand bits of a float (with the implicit bit): rounding bound
    min_exponent: int = 0  # exponent of the smallest subnormal of a float (2**min_exponent)

    @property
    def is_float(self) -> bool:
        """A plain floating-point dtype: the arch's dtype policy applies to it."""
        return self.kind == "float"

    def numpy_view(self) -> np.dtype[np.generic]:
        """The numpy dtype of one element (float dtypes only; the others are carried as bytes)."""
        if self.numpy is None:
            raise ValueError(f"{self.code} tensors are carried as bytes, not viewed as numbers")
        return self.numpy

    def nbytes(self, numel: int) -> int | None:
        """Bytes `numel` elements take, or None when that is not a whole number of bytes."""
        total_bits = numel * self.bits
        return None if total_bits % 8 else total_bits // 8


def _np(spec: object) -> np.dtype[np.generic]:
    return np.dtype(spec).newbyteorder("<")  # type: ignore[call-overload,no-any-return]


_TABLE: tuple[Dtype, ...] = (
    Dtype("F64", 64, "float", _np(np.float64), precision=53, min_exponent=-1074),
    Dtype("F32", 32, "float", _np(np.float32), precision=24, min_exponent=-149),
    Dtype("F16", 16, "float", _np(np.float16), precision=11, min_exponent=-24),
    Dtype("BF16", 16, "float", np.dtype(ml_dtypes.bfloat16), precision=8, min_exponent=-133),
    # Low-bit floats only appear in quantized checkpoints: carried byte for byte.
    Dtype("F8_E4M3", 8, "quantized"),
    Dtype("F8_E5M2", 8, "quantized"),
    Dtype("F8_E8M0", 8, "quantized"),
    Dtype("F8_E4M3FNUZ", 8, "quantized"),
    Dtype("F8_E5M2FNUZ", 8, "quantized"),
    Dtype("F6_E2M3", 6, "quantized"),
    Dtype("F6_E3M2", 6, "quantized"),
    Dtype("F4", 4, "quantized"),
    Dtype("I64", 64, "int"),
    Dtype("I32", 32, "int"),
    Dtype("I16", 16, "int"),
    Dtype("I8", 8, "int"),
    Dtype("U64", 64, "int"),
    Dtype("U32", 32, "int"),
    Dtype("U16", 16, "int"),
    Dtype("U8", 8, "int"),
    Dtype("BOOL", 8, "bool"),
    Dtype("C64", 64, "complex"),
)
DTYPES: dict[str, Dtype] = {d.code: d for d in _TABLE}

# Profile names (`weights.dtype`, torch names) and safetensors codes of the storage dtypes.
PROFILE_TO_CODE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}
CODE_TO_PROFILE = {code: name for name, code in PROFILE_TO_CODE.items()}


def lookup(code: str, *, where: str) -> Dtype:
    """The dtype named `code`, or a clear error naming the file and tensor (`where`)."""
    dtype = DTYPES.get(code)
    if dtype is None:
        raise SglxError(
            f"{where}: unknown dtype '{code}'",
            hint=f"safetensors dtypes sglx knows: {', '.join(DTYPES)}; a file with another "
            "code was written by a newer or foreign tool, or its header is damaged",
            code="unknown_dtype",
        )
    return dtype


def storage_dtype(profile_dtype: str) -> Dtype:
    """The safetensors dtype a profile's `weights.dtype` name stands for."""
    return DTYPES[PROFILE_TO_CODE[profile_dtype]]

"""Converting tensor data one bounded block at a time, refusing NaN, Inf and overflow.

Element-wise dtype conversion does not need the whole tensor: a block of a few MiB is mapped
from the source file, converted with numpy (bfloat16 through `ml_dtypes`, round to nearest
even, as torch does) and handed to the writer. Memory stays bounded by the blocks in flight
whatever the model, and blocks convert on several threads (numpy releases the GIL).

Every float block is checked after conversion: a NaN or Inf in the output is either already in
the source (a damaged or badly trained checkpoint) or a finite value that does not fit the target
(float32 -> float16 above 65504). Both stop the conversion with a message naming the tensor,
because either one only shows later as garbage output in production.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from sglx.weights.dtypes import Dtype
from sglx.weights.plan import TensorPlan
from sglx_core.errors import SglxError

BLOCK_BYTES = 8 << 20
# Exponent bits of 16-bit floats: all ones means Inf or NaN. Checking bits is 3-5x faster than
# np.isfinite on these dtypes; float32/float64 use np.isfinite, which is vectorised.
_EXPONENT_MASKS = {"F16": 0x7C00, "BF16": 0x7F80}


@dataclass(frozen=True)
class Block:
    """A contiguous part of one tensor's source data."""

    tensor: TensorPlan
    source_fd: int
    offset: int  # absolute position in the source file
    nbytes: int


def blocks(tensor: TensorPlan, source_fd: int, block_bytes: int = BLOCK_BYTES) -> Iterator[Block]:
    """The blocks of `tensor`, each a whole number of source elements."""
    source = tensor.source
    element = max(source.dtype.bits // 8, 1)
    step = max(block_bytes // element * element, element)
    end = source.offset + source.nbytes
    position = source.offset
    while position < end:
        size = min(step, end - position)
        yield Block(tensor, source_fd, position, size)
        position += size


def all_finite(values: np.ndarray, dtype: Dtype) -> bool:
    mask = _EXPONENT_MASKS.get(dtype.code)
    if mask is None:
        return bool(np.isfinite(values).all())
    bits = values.view(np.uint16) & np.uint16(mask)
    return not bool((bits == mask).any())


def _read(block: Block) -> memoryview:
    """The block's source bytes, mapped rather than copied.

    A read-only mapping of just this block lets the finite check, the hash and the kernel copy
    use the page cache directly; it is unmapped when the last view of it goes, so memory stays
    bounded by the blocks in flight. The file size is checked first: touching a mapping past
    the end of a file that shrank meanwhile would kill the process with SIGBUS.
    """
    source = block.tensor.source
    end = block.offset + block.nbytes
    try:
        return _map(block, end)
    except OSError as exc:  # a read error: the writer's OSErrors mean write_failed
        raise SglxError(
            f"{source.file}: cannot read tensor '{source.name}': {exc.strerror}",
            hint="check the source file system (a disk error, or the file changed meanwhile)",
            code="environment",
        ) from None


def _map(block: Block, end: int) -> memoryview:
    source = block.tensor.source
    size = os.fstat(block.source_fd).st_size
    if size < end:
        raise SglxError(
            f"{source.file}: tensor '{source.name}' ends early: the file is now {size} bytes, "
            f"the tensor needs {end} (did the file change during the conversion?)",
            hint="make sure nothing writes to the source checkpoint while converting",
            code="truncated",
        )
    if block.nbytes == 0:
        return memoryview(b"")
    start = block.offset - block.offset % mmap.ALLOCATIONGRANULARITY
    mapped = mmap.mmap(block.source_fd, end - start, access=mmap.ACCESS_READ, offset=start)
    return memoryview(mapped)[block.offset - start :]


def _non_finite_error(block: Block, source_values: np.ndarray) -> SglxError:
    tensor = block.tensor
    name, file = tensor.source.name, tensor.source.file
    wide = source_values.astype(np.float64)
    finite = np.isfinite(wide)
    if not finite.all():
        nan = int(np.isnan(wide).sum())
        inf = int((~finite).sum()) - nan
        return SglxError(
            f"{file}: tensor '{name}' holds {nan} NaN and {inf} Inf value(s) (in the block at "
            f"byte {block.offset})",
            hint="the checkpoint is damaged or was saved from a diverged run; use another "
            "revision of it",
            code="non_finite",
        )
    largest = float(np.abs(wide).max())
    return SglxError(
        f"{file}: tensor '{name}' has values up to {largest:.6g} in magnitude, beyond the range "
        f"of {tensor.dtype.code} (the arch's storage dtype): they would become Inf",
        hint="this checkpoint cannot be stored in the arch's dtype without damage; rescale it "
        "or serve it on an arch that stores bfloat16 or float32",
        code="overflow",
    )


@dataclass(frozen=True)
class Output:
    """What a block becomes: `data` (the bytes to hash, and to write unless `kept`).

    `kept` means the bytes are the source's, unchanged: the writer may let the kernel copy them
    from the source file (copy_file_range) instead of writing them from memory.
    """

    block: Block
    data: memoryview
    kept: bool


def convert_block(block: Block) -> Output:
    """The output of `block`: converted and checked floats, or the source bytes as they are."""
    data = _read(block)
    source_dtype, target = block.tensor.source.dtype, block.tensor.dtype
    if not source_dtype.is_float:
        return Output(block, data, kept=True)
    values = np.frombuffer(data, dtype=source_dtype.numpy_view())
    if target.code == source_dtype.code:
        if not all_finite(values, target):
            raise _non_finite_error(block, values)
        return Output(block, data, kept=True)
    with np.errstate(over="ignore", invalid="ignore"):
        out = values.astype(target.numpy_view())
    if not all_finite(out, target):
        raise _non_finite_error(block, values)
    return Output(block, out.view(np.uint8).data, kept=False)

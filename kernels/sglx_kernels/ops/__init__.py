"""One module per op: Triton kernel(s), the torch reference, a composite, and the dispatcher.

Importing this package registers every op's implementations with `sglx_kernels.registry`.
The modules keep their names (``sglx_kernels.ops.rms_norm`` is the module); the dispatching
functions are re-exported from ``sglx_kernels``.
"""

from sglx_kernels.ops import (
    fused_add_rms_norm,
    gelu_and_mul,
    rms_norm,
    rotary_embedding,
    silu_and_mul,
)

__all__ = ["fused_add_rms_norm", "gelu_and_mul", "rms_norm", "rotary_embedding", "silu_and_mul"]

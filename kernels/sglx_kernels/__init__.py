"""sglx portable kernels: Triton implementations with torch fallbacks, chosen per op.

The public ops keep sglang 0.5.23's ``forward_native`` semantics and return new tensors::

    from sglx_kernels import rms_norm, fused_add_rms_norm, layer_norm, silu_and_mul, gelu_and_mul
    from sglx_kernels import rotary_embedding, registry

`registry` picks vendor > triton > composite > native per op and device, honours the
``SGLX_KERNELS_IMPL`` / ``_PREFER`` / ``_DENY`` switches and reports which implementation ran
through `registry.set_recorder`. docs/reference/kernels.md documents all of it.
"""

from sglx_kernels import registry
from sglx_kernels.ops.fused_add_rms_norm import fused_add_rms_norm
from sglx_kernels.ops.gelu_and_mul import gelu_and_mul
from sglx_kernels.ops.layer_norm import layer_norm
from sglx_kernels.ops.rms_norm import rms_norm
from sglx_kernels.ops.rotary_embedding import rotary_embedding
from sglx_kernels.ops.silu_and_mul import silu_and_mul

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "fused_add_rms_norm",
    "gelu_and_mul",
    "layer_norm",
    "registry",
    "rms_norm",
    "rotary_embedding",
    "silu_and_mul",
]

"""Converted weights: per-arch conversion with a manifest, verification and numeric checks.

`convert_weights` re-stores a Hugging Face safetensors checkpoint in the arch profile's dtype
(streamed, atomic, with a manifest); `verify_weights` re-checks a converted folder against its
manifest; `check_weights` compares the numbers of a source and its conversion; `manifest_digest`
is the weights digest images label and bundles reference. Format: docs/reference/weights.md.
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglx_core.weights_manifest import MANIFEST_NAME, manifest_digest

__all__ = ["MANIFEST_NAME", "manifest_digest"]


def __getattr__(name: str) -> Any:
    """Import the manifest (and pydantic with it) on first use: `sglx.cli` imports
    `sglx.commands.weights` for every command, and building the parser should not pay for
    pydantic."""
    if name in __all__:
        from sglx_core import weights_manifest

        return getattr(weights_manifest, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""Converted weights: per-arch conversion with a manifest, verification and numeric checks.

`convert_weights` re-stores a Hugging Face safetensors checkpoint in the arch profile's dtype
(streamed, atomic, with a manifest); `verify_weights` re-checks a converted folder against its
manifest; `check_weights` compares the numbers of a source and its conversion; `manifest_digest`
is the weights digest images label and bundles reference. Format: docs/reference/weights.md.
"""

from sglx.weights.manifest import MANIFEST_NAME, manifest_digest

__all__ = ["MANIFEST_NAME", "manifest_digest"]

"""How sglang 0.5.23 reads a boolean environment variable (EnvBool.parse, srt/environ.py in the
wheel): these words, in any case. `SGLANG_ROCM_USE_MULTI_STREAM=true` switches a feature on as
`1` does, so every rule and floor that looks at such a variable reads it this way."""

from __future__ import annotations

TRUE_WORDS = ("true", "1", "yes", "y")
FALSE_WORDS = ("false", "0", "no", "n")


def as_bool(text: str) -> bool | None:
    """`text` as sglang reads a boolean variable; None for a word it refuses."""
    word = text.lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None

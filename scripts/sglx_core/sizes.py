"""Sizes: the one grammar sglx reads them in, and the one way it shows them to people.

Every size an operator writes (a profile's `weights.outside_above`, `--chunk-size`,
`--max-shard-size`, `--weights-outside-above`, SGLX_WEIGHTS_OUTSIDE_ABOVE) is a whole number of
bytes with an optional unit: decimal (KB, MB, GB, TB: powers of 1000, as Hugging Face's
`max_shard_size` and disk vendors count) or binary (KiB, MiB, GiB, TiB), in any case, with or
without a space before it: `4GiB`, `700MB`, `20gib`, `4 GiB`, `1024`. A bare letter (`4g`) is
refused: it would be a guess between the two.
"""

from __future__ import annotations

import re

UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 1 << 10,
    "MiB": 1 << 20,
    "GiB": 1 << 30,
    "TiB": 1 << 40,
}
_BY_UPPER = {unit.upper(): factor for unit, factor in UNITS.items()}
# The grammar as a pattern, for schemas that validate a string field (case-insensitive units).
SIZE_PATTERN = r"^([0-9]{1,15}) ?((?i:" + "|".join(UNITS) + r"))?$"
_SIZE = re.compile(SIZE_PATTERN)
EXAMPLES = "a whole number of bytes with a unit, e.g. 4GiB, 700MB or 1024"


def parse_size(text: str) -> int | None:
    """'4GiB' -> 4294967296, '700MB' -> 700000000, '20gib', '4 GiB', '1024'; None when `text`
    is not a size."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        return None
    return int(match.group(1)) * _BY_UPPER[(match.group(2) or "B").upper()]


_FIGURE = re.compile(r"^([0-9]{1,15}(?:\.[0-9]{1,6})?) ?((?i:" + "|".join(UNITS) + r"))$")


def parse_engine_figure(text: str) -> float | None:
    """A size as container engines print one for people: '1.953GiB' (`docker stats`, binary
    units), '731.2MB' or '512kB' (podman, decimal ones), '0B'; None when `text` is not one.
    The same units as `parse_size`, with a decimal fraction."""
    match = _FIGURE.fullmatch(text.strip())
    if match is None:
        return None
    return float(match.group(1)) * _BY_UPPER[match.group(2).upper()]


def human_bytes(count: float) -> str:
    """1536 -> '1.5 KiB': sizes in messages a person reads."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    raise AssertionError("unreachable")

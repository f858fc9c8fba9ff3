"""Launch settings for the Triton kernels, from the per-target table in ``tuning.json``.

One helper chooses launch settings for every op family (the Liger ``calculate_settings``
pattern), but the numbers are data: ``tuning.json`` holds a ``default`` entry and overrides
per Triton backend (``cuda``, ``hip``) and per architecture (``hip:gfx942``, ``hip:gfx1151``).
Thread counts are stored as threads, not warps: the warp size comes from Triton at run time
(`sglx_kernels._triton.TritonTarget.warp_size`), so wave64 CDNA and wave32 NVIDIA/RDNA read
the same entry. Families: ``norm`` (a whole row per program: RMSNorm, fused add + RMSNorm),
``gated`` (SiLU/GELU-and-mul: a slice of a row per program) and ``rotary``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from sglx_kernels._triton import TritonTarget
from sglx_kernels.registry import UnsupportedInput

FAMILIES = ("norm", "gated", "rotary")
_FIELDS = {"elements_per_program", "max_row_elements", "threads"}
_TARGET_KEYS = {"notes", *FAMILIES}
# A row wider than this never fits one program, whatever the table says: registers run out.
_HARD_ROW_LIMIT = 1 << 17
# Narrowest tile tile_launch shrinks to when looking for a width that divides the row.
_MIN_FIT_COLS = 256


class TuningTableError(ValueError):
    """tuning.json does not follow its schema; the message names the key."""


def next_power_of_2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def cdiv(a: int, b: int) -> int:
    """Ceiling division: programs needed to cover `a` items in blocks of `b`."""
    return -(-a // b)


def _is_power_of_2(n: object) -> bool:
    return isinstance(n, int) and not isinstance(n, bool) and n > 0 and n & (n - 1) == 0


@dataclass(frozen=True)
class FamilyTuning:
    """Resolved settings of one op family on one target."""

    elements_per_program: int
    max_row_elements: int
    threads: tuple[tuple[int, int], ...]  # (largest block in elements, threads), ascending

    def threads_for(self, block_elements: int) -> int:
        for upto, threads in self.threads:
            if block_elements <= upto:
                return threads
        return self.threads[-1][1]


@dataclass(frozen=True)
class Launch:
    """Block shape and warp count for a kernel over a [rows, cols] problem."""

    block_rows: int
    block_cols: int
    num_warps: int


def _check_family(where: str, entry: object) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise TuningTableError(f"{where}: expected an object, got {entry!r}")
    unknown = set(entry) - _FIELDS
    if unknown:
        raise TuningTableError(
            f"{where}: unknown field(s) {sorted(unknown)}; known: {sorted(_FIELDS)}"
        )
    for field in ("elements_per_program", "max_row_elements"):
        if field in entry and not _is_power_of_2(entry[field]):
            raise TuningTableError(f"{where}.{field}: {entry[field]!r} is not a power of two")
    if entry.get("max_row_elements", 0) > _HARD_ROW_LIMIT:
        raise TuningTableError(
            f"{where}.max_row_elements: {entry['max_row_elements']} > {_HARD_ROW_LIMIT}, "
            "more than one program can hold in registers"
        )
    if "threads" in entry:
        rows = entry["threads"]
        ok = (
            isinstance(rows, list)
            and rows
            and all(
                isinstance(r, list) and len(r) == 2 and all(_is_power_of_2(v) for v in r)
                for r in rows
            )
        )
        if not ok:
            raise TuningTableError(
                f"{where}.threads: {rows!r} must be a non-empty list of "
                "[largest block in elements, threads] pairs of powers of two"
            )
        uptos = [r[0] for r in rows]
        if uptos != sorted(uptos):
            raise TuningTableError(f"{where}.threads: block sizes {uptos} must ascend")
    return entry


def validate_table(table: object) -> dict[str, dict[str, Any]]:
    """Check a parsed tuning table and return its targets; raises TuningTableError."""
    if not isinstance(table, dict) or table.get("schema") != 1:
        raise TuningTableError('tuning.json: expected an object with "schema": 1')
    targets = table.get("targets")
    if not isinstance(targets, dict) or "default" not in targets:
        raise TuningTableError("tuning.json: targets must be an object with a 'default' entry")
    for key, target in targets.items():
        if not isinstance(target, dict):
            raise TuningTableError(f"tuning.json: targets.{key}: expected an object")
        unknown = set(target) - _TARGET_KEYS
        if unknown:
            raise TuningTableError(
                f"tuning.json: targets.{key}: unknown key(s) {sorted(unknown)}; "
                f"known: {sorted(_TARGET_KEYS)}"
            )
        for family in FAMILIES:
            if family in target:
                _check_family(f"tuning.json: targets.{key}.{family}", target[family])
    for family in FAMILIES:
        required = {"elements_per_program", "threads"}
        if family == "norm":
            required.add("max_row_elements")
        missing = required - set(targets["default"].get(family, {}))
        if missing:
            raise TuningTableError(
                f"tuning.json: targets.default.{family} must set {sorted(missing)}"
            )
    return targets


_override: dict[str, dict[str, Any]] | None = None


@lru_cache(maxsize=1)
def _packaged_table() -> dict[str, dict[str, Any]]:
    source = resources.files("sglx_kernels").joinpath("tuning.json")
    try:
        text = source.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TuningTableError(
            f"{source} is missing: the sglx_kernels wheel was built without its package data; "
            "rebuild it from kernels/ (pyproject.toml lists tuning.json under package-data)"
        ) from None
    return validate_table(json.loads(text))


def table() -> dict[str, dict[str, Any]]:
    """The tuning table's targets: the packaged tuning.json, parsed and validated once, unless
    `set_table` installed another."""
    return _override if _override is not None else _packaged_table()


def set_table(new_table: dict[str, Any] | None) -> None:
    """Use `new_table` (same schema as tuning.json) instead of the packaged one; None restores it.

    For tuning sweeps (bench/kernels/bench_kernels.py --sweep) and experiments; validated first.
    """
    global _override
    _override = None if new_table is None else validate_table(new_table)
    family_tuning.cache_clear()
    row_launch.cache_clear()
    tile_launch.cache_clear()


@cache
def family_tuning(family: str, target: TritonTarget) -> FamilyTuning:
    """Settings of `family` on `target`: the most specific table entry wins, field by field."""
    if family not in FAMILIES:
        raise ValueError(f"unknown op family {family!r}; known: {', '.join(FAMILIES)}")
    targets = table()
    merged: dict[str, Any] = {}
    for key in reversed(target.tuning_keys):  # default first, most specific last
        merged.update(targets.get(key, {}).get(family, {}))
    return FamilyTuning(
        elements_per_program=merged["elements_per_program"],
        max_row_elements=merged.get("max_row_elements", _HARD_ROW_LIMIT),
        threads=tuple((int(a), int(b)) for a, b in merged["threads"]),
    )


def num_warps(threads: int, target: TritonTarget) -> int:
    """Warps for `threads` threads per program on `target` (at least one)."""
    return max(1, threads // target.warp_size)


@lru_cache(maxsize=4096)
def row_launch(op: str, family: str, n_cols: int, target: TritonTarget) -> Launch:
    """Launch settings for a kernel that holds whole rows of `n_cols` elements per program.

    Several short rows share a program (up to ``elements_per_program`` elements), so a
    128-wide per-head norm does not launch one tiny program per row. Raises UnsupportedInput
    (the registry then falls back to a torch path) when one row exceeds ``max_row_elements``.
    """
    tuning = family_tuning(family, target)
    block_cols = next_power_of_2(n_cols)
    if block_cols > tuning.max_row_elements:
        raise UnsupportedInput(
            f"{op}: a row of {n_cols} elements needs a block of {block_cols}, more than the "
            f"{tuning.max_row_elements} one Triton program holds on this target "
            "(tuning.json max_row_elements)"
        )
    block_rows = max(1, tuning.elements_per_program // block_cols)
    threads = tuning.threads_for(block_rows * block_cols)
    return Launch(block_rows, block_cols, num_warps(threads, target))


@lru_cache(maxsize=4096)
def tile_launch(family: str, n_cols: int, target: TritonTarget) -> Launch:
    """Launch settings for an elementwise kernel tiling [rows, n_cols] in row-major tiles."""
    tuning = family_tuning(family, target)
    block_cols = min(next_power_of_2(n_cols), tuning.elements_per_program)
    # Prefer a tile width that divides the row, so no program runs half masked (SwiGLU's
    # 14336 = 7 * 2048); the freed width goes to more rows per program.
    fit = block_cols
    while fit > _MIN_FIT_COLS and n_cols % fit:
        fit //= 2
    if n_cols % fit == 0:
        block_cols = fit
    block_rows = max(1, tuning.elements_per_program // block_cols)
    threads = tuning.threads_for(block_rows * block_cols)
    return Launch(block_rows, block_cols, num_warps(threads, target))

"""Field checks of the gate's untrusted JSON documents (the golden file, the collective
smoke's report): every error names the file and the field, and shows the offending value
shortened, so a bad document is refused with one readable line."""

from __future__ import annotations

import json
from typing import Any

from sglx_core.errors import SglxError

TOP_LEVEL = "(top level)"


def shown(value: Any) -> str:
    """A JSON value for an error message: scalars as JSON, at most 40 characters; objects and
    arrays by their kind only."""
    text = json.dumps(value) if isinstance(value, str | int | float | bool | None) else None
    if text is None:
        return f"a JSON {'object' if isinstance(value, dict) else 'array'}"
    return text if len(text) <= 40 else text[:37] + "..."


class FieldCheck:
    """Checks of one document's fields; `fix` is the hint every error carries."""

    def __init__(self, where: str, fix: str) -> None:
        self.where, self.fix = where, fix

    def error(self, problem: str, *, hint: str | None = None) -> SglxError:
        return SglxError(
            f"{self.where}: {problem}", hint=hint or self.fix, code="corrupt", path=self.where
        )

    def object(self, value: Any, field: str, keys: frozenset[str]) -> dict[str, Any]:
        """`value` as an object with exactly `keys`."""
        if not isinstance(value, dict):
            raise self.error(f"{field} is not an object")
        unknown = sorted(set(value) - keys)
        if unknown:
            raise self.error(f"{field} has the unknown key {unknown[0]!r}")
        prefix = "" if field == TOP_LEVEL else f"{field}."
        missing = sorted(keys - set(value))
        if missing:
            raise self.error(f"{prefix}{missing[0]} is missing")
        return value

    def array(self, value: Any, field: str, limit: int) -> list[Any]:
        if not isinstance(value, list) or len(value) > limit:
            raise self.error(f"{field} is not a list of at most {limit} entries")
        return value

    def integer(self, value: Any, field: str, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise self.error(f"{field} is {shown(value)}, not an integer from {low} to {high}")
        return value

    def string(self, value: Any, field: str, limit: int) -> str:
        if not isinstance(value, str) or not 1 <= len(value) <= limit:
            raise self.error(f"{field} is {shown(value)}, not a string of 1 to {limit} characters")
        return value

"""Profile problems located by file, line and key path, and the wording of pydantic's errors.

Every message says what was expected and what was found, e.g.

    images/gfx942/arch.yaml:41: container.port: expected an integer, found '30000' (a string)
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from sglx_core.errors import SglxError
from sglx_core.profile.schema import Profile

KeyPath = tuple[str | int, ...]
# One file of an extends chain and the line of each key path in it.
Source = tuple[str, Mapping[KeyPath, int]]


@dataclass(frozen=True)
class ProfileIssue:
    """One problem in a profile, located as precisely as the YAML allows."""

    file: str
    key_path: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return (
            f"{where}: {self.key_path}: {self.message}"
            if self.key_path
            else (f"{where}: {self.message}")
        )


DEFAULT_HINT = (
    "fix the profile, then run `sglx arch validate`; every key is described in "
    "docs/reference/profile.md"
)


class ProfileError(SglxError):
    """A profile that does not load; carries every issue found, not just the first."""

    def __init__(self, issues: Sequence[ProfileIssue], hint: str | None = None) -> None:
        self.issues = tuple(issues)
        super().__init__(
            "\n".join(str(i) for i in issues),
            hint=hint or DEFAULT_HINT,
            code="invalid_profile",
            path=issues[0].file if issues else None,
        )


_TYPE_WORDS = {
    "string_type": "a string",
    "int_type": "an integer",
    "float_type": "a number",
    "bool_type": "true or false",
    "dict_type": "a mapping",
    "tuple_type": "a list",
    "list_type": "a list",
    "model_type": "a mapping",
    "model_attributes_type": "a mapping",
}


def pydantic_issue(err: Mapping[str, Any], data: Any, sources: Sequence[Source]) -> ProfileIssue:
    """Word one pydantic validation error and locate it in the file that set the value."""
    loc = _document_path(tuple(err["loc"]), data)
    kind = err["type"]
    found = err.get("input")
    ctx = err.get("ctx") or {}
    if kind == "extra_forbidden":
        allowed = _allowed_keys(loc[:-1], data)
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
        message = f"unknown key '{loc[-1]}'"
        message += f"; did you mean '{close[0]}'?" if close else ""
        message += f" (allowed: {', '.join(allowed)})" if allowed else ""
    elif kind == "missing":
        message = "required key is missing"
    elif kind in _TYPE_WORDS:
        message = f"expected {_TYPE_WORDS[kind]}, found {describe_value(found)}"
        if kind == "string_type" and isinstance(found, int | float):
            message += "; quote it (YAML reads 3.10 as the number 3.1)"
    elif kind == "literal_error":
        message = f"expected one of {ctx.get('expected', '')}, found {describe_value(found)}"
        if isinstance(found, bool):
            message += "; YAML reads on/off/yes/no as booleans"
    elif kind == "string_pattern_mismatch":
        message = (
            f"expected a value matching {ctx.get('pattern', '')}, found {describe_value(found)}"
        )
    elif kind == "value_error":
        message = str(ctx.get("error", err["msg"]))
    elif kind == "union_tag_invalid":
        message = f"expected kind one of {ctx.get('expected_tags')}, found {ctx.get('tag')!r}"
    else:
        message = f"{err['msg'].replace('Input should be', 'expected')}, found " + describe_value(
            found
        )
    file, line = _locate(loc, sources)
    return ProfileIssue(file, dotted(loc), message, line)


def _document_path(loc: KeyPath, data: Any) -> KeyPath:
    """`loc` without the parts pydantic inserts for unions (a member's tag or type name).

    A part is kept when it indexes into the document; the last part is always kept, since it
    names the missing or unknown key.
    """
    kept: list[str | int] = []
    for index, part in enumerate(loc):
        if _has(data, part):
            data = data[part]
        elif index < len(loc) - 1:
            continue
        kept.append(part)
    return tuple(kept)


def _has(data: Any, part: str | int) -> bool:
    if isinstance(data, dict):
        return part in data
    return isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)


def _locate(loc: KeyPath, sources: Sequence[Source]) -> tuple[str, int | None]:
    """The latest file in the chain that sets the longest prefix of `loc`, and that line."""
    for depth in range(len(loc), -1, -1):
        for file, lines in reversed(sources):
            line = lines.get(loc[:depth])
            if line is not None:
                return file, line
    return sources[-1][0], None


def _allowed_keys(loc: KeyPath, data: Any) -> list[str]:
    """Keys the schema allows at `loc` (empty where the schema has a free-form mapping)."""
    model: Any = Profile
    for part in loc:
        if isinstance(data, dict | list):
            data = data[part] if isinstance(data, dict) else data[int(part)]
        field = model.model_fields.get(part) if _is_model(model) else None
        if field is None:
            return []
        model = model_of(field.annotation, data)
    return list(model.model_fields) if _is_model(model) else []


def model_of(annotation: Any, data: Any = None) -> Any:
    """The schema model an annotation holds; for a tagged union, the member `data` selects."""
    candidates = [a for a in (annotation, *getattr(annotation, "__args__", ())) if _is_model(a)]
    if len(candidates) > 1 and isinstance(data, dict):
        for candidate in candidates:
            tag = candidate.model_fields.get("kind")
            if tag is not None and data.get("kind") in getattr(tag.annotation, "__args__", ()):
                return candidate
    return candidates[0] if candidates else None


def _is_model(value: Any) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel)


def dotted(loc: KeyPath) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def describe_kind(value: Any) -> str:
    kinds: dict[type, str] = {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        type(None): "null",
    }
    return kinds.get(type(value), type(value).__name__)


def describe_value(value: Any) -> str:
    if isinstance(value, dict | list):
        return describe_kind(value)
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({describe_kind(value)})"

"""The bounds every vendor-tool parser applies before it reads a character.

A tool's output comes from the host under test, so it is untrusted input: a broken driver can
print megabytes of junk, a collection script can capture a binary, and an `amd-smi` that is
half-installed prints a Python traceback where JSON was expected. Each parser takes the text
(or bytes) it was handed and refuses, with a message that names the tool and what is wrong:

- more than MAX_OUTPUT_BYTES (a full `amd-smi metric --json` for 64 logical GPUs is about
  2 MiB; an 8-GPU RVS or all_reduce_perf log is under 100 KiB);
- bytes that are not UTF-8, or text with NUL characters (a binary, not a tool's output);
- a digit that is not ASCII (`'²'.isdigit()` is true, and int() then raises), or a number of
  more than 40 digits (int() raises past 4,300);
- JSON that is invalid, nested too deep or repeats a key (sglx_core.untrusted.parse_json).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.untrusted import parse_json

MAX_OUTPUT_BYTES = 4 << 20
"""Largest tool output any parser here accepts (4 MiB)."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_LONG_NUMBER = re.compile(r"[0-9]{41,}")


def bounded_text(data: str | bytes, *, what: str, hint: str) -> str:
    """`data` as text, refused when larger than MAX_OUTPUT_BYTES, not UTF-8, or binary.

    `what` names the command whose output this is ("amd-smi metric --json"); `hint` says how
    to capture it again."""
    size = len(data)
    if size > MAX_OUTPUT_BYTES:
        raise SglxError(
            f"{what}: the output is {size} bytes, more than the {MAX_OUTPUT_BYTES >> 20} MiB "
            "any real one is",
            hint=hint,
            code="too_large",
        )
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SglxError(
                f"{what}: the output is not UTF-8 text (byte {exc.start})",
                hint=hint,
                code="corrupt",
            ) from None
    else:
        text = data
    if "\x00" in text:
        raise SglxError(
            f"{what}: the output holds NUL characters: a binary, not the tool's text",
            hint=hint,
            code="corrupt",
        )
    if not text.strip():
        raise SglxError(f"{what}: the output is empty", hint=hint, code="corrupt")
    long_number = _LONG_NUMBER.search(text)
    if long_number is not None:
        # int() of 4,300 digits raises a bare ValueError, and arithmetic on fewer costs seconds.
        raise SglxError(
            f"{what}: the output holds a number of {len(long_number.group())} digits, which no "
            "tool prints: damaged or not the tool's output",
            hint=hint,
            code="corrupt",
        )
    odd = next((c for c in text if not c.isascii() and (c.isdigit() or c.isdecimal())), None)
    if odd is not None:
        # str.isdigit takes '²' and int() then raises ValueError; int() takes '٣' as 3. Tools
        # print ASCII digits: any other digit is damage, refused here for every parser.
        raise SglxError(
            f"{what}: the output holds the digit {odd!r} (U+{ord(odd):04X}), which no tool "
            "prints: damaged or not the tool's output",
            hint=hint,
            code="corrupt",
        )
    return text


def strip_ansi(text: str) -> str:
    """`text` without terminal colour codes (RVS colours its summary table)."""
    return _ANSI.sub("", text)


def load_json(text: str, *, what: str, hint: str) -> Any:
    """`text` parsed as JSON by sglx_core.untrusted.parse_json (no repeated keys, bounded
    depth); its messages start with `what`, the command that printed it."""
    return parse_json(text, path=Path(what), what="output", hint=hint)


def field_error(what: str, where: str, problem: str, hint: str) -> SglxError:
    """The error for one malformed field: "amd-smi metric --json: gpu 3: usage.gfx_activity
    is missing"."""
    prefix = f"{what}: {where}: " if where else f"{what}: "
    # Every refusal says what to do: a caller that names no fix gets the general one.
    fix = hint or f"capture the output of `{what}` again, whole and unchanged"
    return SglxError(prefix + problem, hint=fix, code="corrupt")

"""Results of sglx commands and the one place that prints them.

Step modules never print: they return a `Result`. `render` writes it as human text (tables and
lines) or, with ``--json``, as one JSON envelope on stdout:

    {"sglx_result_version": "1", "command": [...], "status": "ok" | "findings" | "error",
     "exit_code": 0 | 1 | 2, "data": {...}, "findings": [...], "errors": [...]}

Exit codes (docs/reference/exit-codes.md): 0 ok, 1 findings, 2 usage or environment error.

Reports echo what they read (a bundle's `created`, a scan report's findings, a tool's output),
so the human text is made safe here, once, for every command (issue 37): every table cell,
finding and error passes through `printable`, which writes a control character (a newline, an
escape sequence, a C1 code) as its visible escape (`\\n`, `\\x1b`) and any value as text, so
no value can forge a line of the report or clear the screen. Lines keep their own newlines
(some commands print a file's text as one line) and escape every other control character. JSON
needs nothing: its encoder escapes them.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TextIO

from sglx_core.errors import SglxError

RESULT_VERSION = "1"
EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_ERROR = 2

Status = Literal["ok", "findings", "error"]

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_CONTROL_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f]")


def _escape(match: re.Match[str]) -> str:
    return match.group().encode("unicode_escape").decode("ascii")


def printable(value: object, *, keep_newlines: bool = False) -> str:
    """`value` as text a terminal shows as it is: control characters as visible escapes."""
    text = value if isinstance(value, str) else str(value)
    return (_CONTROL_BUT_NEWLINE if keep_newlines else _CONTROL).sub(_escape, text)


@dataclass(frozen=True)
class Finding:
    """One problem found in what a command inspected (exit 1), or one error (exit 2)."""

    code: str
    message: str
    path: str | None = None
    hint: str | None = None

    def to_json(self) -> dict[str, str]:
        out = {"code": self.code, "message": self.message}
        if self.path is not None:
            out["path"] = self.path
        if self.hint is not None:
            out["hint"] = self.hint
        return out


@dataclass(frozen=True)
class Table:
    """A titled table for human output; JSON consumers read `Result.data` instead."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    title: str | None = None

    def render(self) -> str:
        columns = [printable(c) for c in self.columns]
        rows = [[printable(cell) for cell in row] for row in self.rows]
        widths = [len(c) for c in columns]
        for row in rows:
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], len(cell))
        lines = [] if self.title is None else [printable(self.title)]
        lines.append("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
        lines.append("  ".join("-" * w for w in widths))
        lines.extend(
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows
        )
        return "\n".join(lines)


@dataclass(frozen=True)
class Result:
    """What a command did: data for JSON, tables and lines for people, findings and errors."""

    command: tuple[str, ...]
    data: Mapping[str, Any] = field(default_factory=dict)
    tables: tuple[Table, ...] = ()
    lines: tuple[str, ...] = ()
    findings: tuple[Finding, ...] = ()
    errors: tuple[Finding, ...] = ()

    @property
    def exit_code(self) -> int:
        if self.errors:
            return EXIT_ERROR
        return EXIT_FINDINGS if self.findings else EXIT_OK

    @property
    def status(self) -> Status:
        return ("ok", "findings", "error")[self.exit_code]

    def envelope(self) -> dict[str, Any]:
        return {
            "sglx_result_version": RESULT_VERSION,
            "command": list(self.command),
            "status": self.status,
            "exit_code": self.exit_code,
            "data": dict(self.data),
            "findings": [f.to_json() for f in self.findings],
            "errors": [e.to_json() for e in self.errors],
        }


def error_result(command: Sequence[str], error: SglxError) -> Result:
    """The result of a command that stopped on a usage or environment error."""
    return Result(
        command=tuple(command),
        errors=(Finding(code=error.code, message=error.message, path=error.path, hint=error.hint),),
    )


DEBUG_ENV = "SGLX_DEBUG"
"""Set to 1 to print the traceback of an unexpected error as well."""
MAX_DETAIL = 300


def unexpected_error(exc: BaseException, *, debug: str = f"{DEBUG_ENV}=1") -> SglxError:
    """An exception no step expected, as the one message every entry point gives for it: "bug
    in sglx", exit 2 (never a bare traceback, never exit 1). `debug` says how to see the
    traceback."""
    detail = " ".join(str(exc).split())
    if len(detail) > MAX_DETAIL:
        detail = detail[: MAX_DETAIL - 3] + "..."
    what = type(exc).__name__ + (f": {detail}" if detail else "")
    return SglxError(
        f"unexpected {what}",
        hint=f"this is a bug in sglx; {debug} shows the traceback: please report it with that",
        code="internal_error",
    )


def result_of(command: Sequence[str], body: Callable[[], Result]) -> Result:
    """`body()`, or the error result of what it raised: an SglxError as it is, anything else as
    `unexpected_error`. The plugin's and the gate's entry points run through it."""
    try:
        return body()
    except SglxError as error:
        return error_result(command, error)
    except Exception as exc:  # the one place an unexpected exception becomes a message
        if os.environ.get(DEBUG_ENV) == "1":
            traceback.print_exception(exc, file=sys.stderr)
        return error_result(command, unexpected_error(exc))


def render(
    result: Result, *, as_json: bool, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    """Print `result` and return its exit code."""
    out = sys.stdout if out is None else out
    err = sys.stderr if err is None else err
    if as_json:
        json.dump(result.envelope(), out, indent=2, sort_keys=True)
        out.write("\n")
        return result.exit_code
    blocks = [t.render() for t in result.tables]
    if result.lines:
        blocks.append("\n".join(printable(line, keep_newlines=True) for line in result.lines))
    if blocks:
        out.write("\n\n".join(blocks) + "\n")
    for finding in result.findings:
        where = f"{printable(finding.path)}: " if finding.path else ""
        out.write(f"finding [{printable(finding.code)}] {where}{printable(finding.message)}\n")
        if finding.hint:
            out.write(f"  hint: {printable(finding.hint)}\n")
    for error in result.errors:
        where = f"{error.path}: " if error.path and error.path not in error.message else ""
        err.write(f"sglx: error: {printable(where)}{printable(error.message)}\n")
        if error.hint:
            err.write(f"  hint: {printable(error.hint)}\n")
    return result.exit_code

"""A file sglx renders and the repository commits (the roles' variables, the Prometheus rules):
printed, written atomically, or checked against what sglx renders now (`--check`, which
`make lint` runs, so a committed copy never drifts from its source)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.output_files import atomic_write_text
from sglx_core.report import Finding, Result


def print_write_or_check(
    command: tuple[str, ...],
    text: str,
    data: dict[str, Any],
    out: Path | None,
    check: bool,
    *,
    again: str,
    stale_code: str,
    source: str,
) -> Result:
    """`text` printed (no `out`), written to `out`, or `out` compared with it: a finding with
    `stale_code` when it differs from `source` (what it is rendered from). `again` is the
    command that renders it, without --out."""
    if out is None:
        if check:
            raise SglxError(
                "--check needs --out FILE: the file to compare with what sglx renders",
                hint=f"{again} --out PATH --check",
                code="usage",
            )
        return Result(command, data=data, lines=(text.rstrip("\n"),))
    data = {**data, "path": str(out)}
    if check:
        current = out.read_text(encoding="utf-8") if out.is_file() else None
        if current == text:
            return Result(command, data=data, lines=(f"{out} is up to date",))
        what = "is missing" if current is None else f"differs from {source}"
        finding = Finding(
            stale_code, f"{out} {what}", path=str(out), hint=f"re-render it: {again} --out {out}"
        )
        return Result(command, data=data, findings=(finding,))
    atomic_write_text(out, text, label="--out")  # a regular file or a new path, nothing else
    return Result(command, data=data, lines=(f"wrote {out}",))

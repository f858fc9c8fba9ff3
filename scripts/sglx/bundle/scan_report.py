"""The scan report a bundle carries (`meta/scan.json`, made by `bundle create`), read as the
untrusted file it is: the one reader verify and install share.

A bundle without a report was never scanned (made with `--no-scan`, or altered). That is a
finding, `bundle_not_scanned`, never "ok": verify names it for a bundle whose image it cannot
scan whole (a delta, or one without its base's layers), and install for every bundle, since
install does not scan. The operator accepts an unscanned bundle with `--no-scan` (install.sh:
`--no-scan` or `SGLX_NO_SCAN=1`; the bundle_install role: `bundle_install_no_scan`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from sglx.bundle import layout
from sglx_core.errors import SglxError
from sglx_core.report import Finding
from sglx_core.untrusted import read_json

NOT_SCANNED = "bundle_not_scanned"
REMAKE = "create the bundle again on the source side (its scan report is damaged)"
MAX_TEXT = 500
"""A non-string value of the report quoted as JSON is cut to this many characters."""


def not_scanned(why: str, accept: str) -> Finding:
    """The finding for a bundle that carries no report: `why` says what that stops, `accept`
    names the switch that accepts it."""
    return Finding(
        NOT_SCANNED,
        f"not scanned: the bundle carries no {layout.SCAN_REPORT}, {why}",
        layout.SCAN_REPORT,
        f"create the bundle again without --no-scan on the source side, or {accept} to accept "
        "an unscanned bundle",
    )


def report_findings(folder: Path, *, missing: Finding | None) -> list[Finding]:
    """The findings of the report in `folder`, each as the report states it; `missing` (or
    none, when None) for a bundle that carries no report; a report that is not one is a
    finding that names the file."""
    path = folder / layout.SCAN_REPORT
    if not os.path.lexists(path):
        return [] if missing is None else [missing]
    try:
        envelope = read_json(path, what="scan report", max_bytes=layout.MAX_META_BYTES, hint=REMAKE)
    except SglxError as exc:
        return [Finding("bundle_scan", exc.message, layout.SCAN_REPORT, exc.hint)]
    items = envelope.get("findings") if isinstance(envelope, dict) else None
    if not isinstance(items, list) or envelope.get("status") not in ("ok", "findings"):
        message = (
            f'{layout.SCAN_REPORT}: not a scan report (a JSON object whose "status" is ok or '
            'findings, with a "findings" list)'
        )
        return [Finding("bundle_scan", message, layout.SCAN_REPORT, REMAKE)]
    return [
        Finding(
            "bundle_scan",
            f"image scan (at create): {_text(item.get('message'))}",
            None if item.get("path") is None else _text(item.get("path")),
            None if item.get("hint") is None else _text(item.get("hint")),
        )
        for item in items
        if isinstance(item, dict)
    ] or (
        [Finding("bundle_scan", "the scan report has findings", layout.SCAN_REPORT, REMAKE)]
        if envelope.get("status") == "findings"
        else []
    )


def _text(value: object) -> str:
    """A value of the report as text: a string as it is, anything else as JSON (never a Python
    repr); the report's renderer escapes its control characters."""
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)[:MAX_TEXT]

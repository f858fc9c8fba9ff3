"""`sglx bundle sbom`: the bundle's SBOM written out for a site's tools, as sglx made it
(CycloneDX 1.6) or converted to SPDX 2.3 (sglx.sbom.spdx). The SBOM is checked against
bundle.json before it is read; the output is written beside its final name and renamed, so an
interrupted run leaves no half-written file."""

from __future__ import annotations

import os
from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.audit import bundle_sbom
from sglx_core.errors import SglxError
from sglx_core.report import Result, Table


def export_sbom(path: Path, form: str, out: Path) -> Result:
    bundle, raw = bundle_sbom(path, "sbom")
    if out.exists() and not out.is_file():
        raise SglxError(f"--out {out} is not a file", hint="name a file to write", code="usage")
    text = raw.decode("utf-8", "replace")
    if form == "spdx":
        from sglx.sbom.spdx import from_cyclonedx

        text = from_cyclonedx(text, where=str(bundle.folder / layout.SBOM))
    partial = out.with_name(f".{out.name}.partial-{os.getpid()}")
    try:
        partial.write_text(text)
        partial.replace(out)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise SglxError(
            f"--out {out}: cannot write it: {exc.strerror}",
            hint="name a file in a folder you can write",
            code="environment",
        ) from None
    return Result(
        ("bundle", "sbom"),
        data={"bundle": str(bundle.folder), "format": form, "out": str(out), "bytes": len(text)},
        tables=(Table(("format", "written to", "bytes"), ((form, str(out), str(len(text))),)),),
    )

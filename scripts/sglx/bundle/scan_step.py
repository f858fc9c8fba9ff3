"""`bundle create`'s scan: the dependency scan of the image the bundle carries, and, from the
same unpacked root, its SBOM (sglx.sbom). Both land in meta/ and so under SHA256SUMS and the
signature.

The image is scanned as the engine holds it where it can be (exported, never started): a
delta's archive lacks its parent's layers, one made without its base the base's, and the report
is then still of everything the site will run. An image that is not in the engine under its
reference is scanned from the archive just written (still in the page cache, no second export).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx.bundle import layout
from sglx.bundle.manifest import ImageRecord
from sglx.progress import Progress
from sglx.sbom import ImageSbom
from sglx.scan.rules import Rules
from sglx_core.processes import default_jobs
from sglx_core.profile import Profile
from sglx_core.report import Result


@dataclass(frozen=True)
class Written:
    path: str  # in the bundle (layout)
    text: str


def scan_bundle_image(
    client: Any,
    stage: Path,
    profile: Profile,
    ref: str,
    record: ImageRecord,
    progress: Progress,
) -> tuple[Result, list[Written]]:
    """The scan's result, and the files to add to meta/: the report and the SBOM."""
    from sglx.scan.command import scan_archive, scan_image

    rules = Rules.from_profile(profile)
    sbom = ImageSbom.of_engine_image(client, ref)
    if record.referenced():
        result = scan_image(ref, rules=rules, jobs=default_jobs(), progress=progress, inspect=sbom)
    else:
        from sglx.bundle.scan_target import written_archive

        result = scan_archive(
            written_archive(stage, record),
            {"kind": "image", "ref": ref, "id": record.id},
            rules=rules,
            jobs=default_jobs(),
            progress=progress,
            inspect=sbom,
        )
    written = [Written(layout.SCAN_REPORT, json.dumps(result.envelope(), indent=2,
                                                      sort_keys=True) + "\n")]  # fmt: skip
    progress("writing the SBOM (CycloneDX 1.6)")
    text = sbom.text()
    if text is not None:
        written.append(Written(layout.SBOM, text))
    return result, written

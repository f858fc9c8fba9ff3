"""The SBOM as SPDX 2.3 JSON, for a site whose tools read SPDX: the bundle's CycloneDX document
(meta/sbom.cdx.json, the one sglx makes and signs) converted, component for component, with
the SPDX project's own library (spdx-tools: its model, its validator, its JSON writer).

One SPDX package per CycloneDX component: its name, version, SHA-256, purl (an external
reference), its kind as the package purpose (a container, a library, a file, the operating
system; the weights and the Triton cache are OTHER, named in the comment) and sglx's properties
in the comment. Nothing is analysed again and no licence is guessed: licences are NOASSERTION,
as the CycloneDX document has none. The document DESCRIBES the image, the image CONTAINS every
component, and each CycloneDX dependency is a DEPENDS_ON.
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from sglx import __version__
from sglx_core.errors import SglxError
from sglx_core.untrusted import parse_json

SPDX_VERSION = "SPDX-2.3"
NAMESPACE = "urn:sglx:spdx:"
_NOT_ID = re.compile(r"[^A-Za-z0-9.-]+")


def from_cyclonedx(text: str, *, where: str) -> str:
    """The SPDX 2.3 JSON of the CycloneDX JSON `text` (read from `where`), validated."""
    from cyclonedx.model.bom import Bom
    from spdx_tools.spdx.validation.document_validator import validate_full_spdx_document
    from spdx_tools.spdx.writer.json.json_writer import write_document_to_stream

    document = parse_json(text, path=Path(where), what="SBOM")
    try:
        bom = Bom.from_json(document)  # type: ignore[attr-defined]  # py-serializable adds it
    except Exception as exc:  # the library raises many kinds for a document it cannot read
        raise SglxError(
            f"{where} is not a CycloneDX document sglx can read ({type(exc).__name__})",
            hint="check the bundle with `sglx bundle verify`; the SBOM is the one create wrote",
            code="corrupt",
        ) from None
    document = _document(bom)
    problems = validate_full_spdx_document(document, SPDX_VERSION)
    if problems:
        raise SglxError(
            f"the SPDX document made from {where} does not validate: "
            + "; ".join(p.validation_message for p in problems[:3]),
            hint="this is a bug in sglx's conversion: report it with the SBOM",
            code="internal",
        )
    out = io.StringIO()
    write_document_to_stream(document, out, validate=False)
    return out.getvalue() + "\n"


def _document(bom: Any) -> Any:
    import datetime as dt

    from spdx_tools.spdx.model import (
        Actor,
        ActorType,
        CreationInfo,
        Document,
        Relationship,
        RelationshipType,
    )

    image = bom.metadata.component
    if image is None:
        raise SglxError(
            "the CycloneDX document names no image (metadata.component)",
            hint="use the SBOM `sglx bundle create` or `sglx scan --sbom` wrote",
            code="corrupt",
        )
    ids: dict[str, str] = {}
    packages = [_package(image, ids, 0)]
    components = sorted(bom.components, key=lambda c: str(c.bom_ref.value))
    packages += [_package(c, ids, n) for n, c in enumerate(components, start=1)]
    image_id = ids[str(image.bom_ref.value)]
    relationships = [Relationship("SPDXRef-DOCUMENT", RelationshipType.DESCRIBES, image_id)]
    relationships += [
        Relationship(image_id, RelationshipType.CONTAINS, ids[str(c.bom_ref.value)])
        for c in components
    ]
    for dependency in sorted(bom.dependencies, key=lambda d: str(d.ref.value)):
        source = ids.get(str(dependency.ref.value))
        if source is None or source == image_id:  # the image's edges are its CONTAINS
            continue
        for needed in sorted(str(d.ref.value) for d in dependency.dependencies):
            if needed in ids:
                relationships.append(Relationship(source, RelationshipType.DEPENDS_ON, ids[needed]))
    created = bom.metadata.timestamp or dt.datetime.now(dt.UTC)
    info = CreationInfo(
        spdx_version=SPDX_VERSION,
        spdx_id="SPDXRef-DOCUMENT",
        name=f"sglx SBOM of {image.name}",
        document_namespace=NAMESPACE + _NOT_ID.sub("-", f"{image.version or image.name}"),
        creators=[Actor(ActorType.TOOL, f"sglx-{__version__}")],
        created=created.replace(microsecond=0),
        creator_comment="converted from the bundle's CycloneDX 1.6 SBOM (meta/sbom.cdx.json)",
    )
    return Document(creation_info=info, packages=packages, relationships=relationships)


def _package(component: Any, ids: dict[str, str], number: int) -> Any:
    from spdx_tools.spdx.model import (
        Checksum,
        ChecksumAlgorithm,
        ExternalPackageRef,
        ExternalPackageRefCategory,
        Package,
        PackagePurpose,
        SpdxNoAssertion,
    )

    kind = str(getattr(component.type, "value", component.type))
    purpose = {
        "container": PackagePurpose.CONTAINER,
        "library": PackagePurpose.LIBRARY,
        "file": PackagePurpose.FILE,
        "operating-system": PackagePurpose.OPERATING_SYSTEM,
        "application": PackagePurpose.APPLICATION,
    }.get(kind, PackagePurpose.OTHER)
    spdx_id = f"SPDXRef-{number}-{_NOT_ID.sub('-', component.name)[:80].strip('-') or 'c'}"
    ids[str(component.bom_ref.value)] = spdx_id
    checksums = [
        Checksum(ChecksumAlgorithm.SHA256, h.content)
        for h in component.hashes
        if str(getattr(h.alg, "value", h.alg)) == "SHA-256"
    ]
    references = []
    if component.purl is not None:
        references.append(
            ExternalPackageRef(
                ExternalPackageRefCategory.PACKAGE_MANAGER, "purl", component.purl.to_string()
            )
        )
    notes = [f"CycloneDX type {kind}"] + [f"{p.name}={p.value}" for p in component.properties]
    return Package(
        spdx_id=spdx_id,
        name=component.name,
        download_location=SpdxNoAssertion(),
        version=component.version or None,
        files_analyzed=False,
        checksums=checksums,
        license_concluded=SpdxNoAssertion(),
        license_declared=SpdxNoAssertion(),
        copyright_text=SpdxNoAssertion(),
        external_references=references,
        primary_package_purpose=purpose,
        comment="; ".join(notes),
    )

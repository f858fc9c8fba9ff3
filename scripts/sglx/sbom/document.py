"""An image's contents as a CycloneDX 1.6 BOM, made and validated with cyclonedx-python-lib.

The BOM's subject (metadata.component) is the image, a `container` named by its reference and
versioned by its id. Its components:
- the upstream base, a `container` with its digest (the image's base labels);
- every installed Debian package (`pkg:deb/debian/NAME@VERSION?arch=ARCH`, its source package
  as a property), marked as found in the base where the base's own dpkg status has it;
- every Python distribution (`pkg:pypi/NAME@VERSION`), with the wheel's SHA-256 from the lock
  where the lock has it, and the folder it is installed in;
- every ELF file the scan found that no package or distribution claims (`file`, with its path
  and SHA-256): a vendor's library copied in by hand, a base's;
- the converted weights, a `machine-learning-model` with the weights manifest's digest;
- the prebuilt Triton cache, `data`, with the targets it was built for.
Dependencies: the image needs each top-level component; a package needs what its Depends (or a
distribution what its Requires-Dist) names where that is in the image.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx import image_labels
from sglx.sbom.contents import ImageContents, PythonDistribution
from sglx_core.untrusted import parse_json

SPEC_VERSION = "1.6"
MEDIA_TYPE = "application/vnd.cyclonedx+json"
SBOM_NAME = "sbom.cdx.json"
NO_CODE = "none: its RECORD lists no file outside its .dist-info"
# The image labels the BOM reads (sglx.image.build writes them).


@dataclass(frozen=True)
class Subject:
    """The image the BOM describes and what the build recorded about it."""

    ref: str
    image_id: str
    labels: Mapping[str, str]
    wheel_hashes: Mapping[tuple[str, str], str]  # (canonical name, version) -> sha256 (lock)
    # (name, version) of the base's own packages; None when the base is not at hand
    base_packages: frozenset[tuple[str, str]] | None = None


def build_bom(subject: Subject, contents: ImageContents) -> Any:
    """The `cyclonedx.model.bom.Bom` of `contents`."""
    from cyclonedx.model import HashAlgorithm, HashType, Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    def sha256(hexdigest: str) -> list[HashType]:
        return [HashType(alg=HashAlgorithm.SHA_256, content=hexdigest.removeprefix("sha256:"))]

    def props(**values: str) -> list[Property]:
        return [Property(name=f"sglx:{k}", value=v) for k, v in values.items() if v]

    labels = subject.labels
    bom = Bom()
    image = Component(
        name=subject.ref,
        version=subject.image_id,
        type=ComponentType.CONTAINER,
        bom_ref=f"image:{subject.image_id}",
        hashes=sha256(subject.image_id),
        properties=props(
            arch=labels.get(image_labels.ARCH, ""),
            sglx_version=labels.get(image_labels.VERSION, ""),
            lock_digest=labels.get(image_labels.LOCK_DIGEST, ""),
        ),
    )
    bom.metadata.component = image
    top: list[Component] = []
    base_digest = labels.get(image_labels.BASE_DIGEST, "")
    if base_digest:
        base = Component(
            name=labels.get(image_labels.BASE_NAME) or base_digest,
            version=base_digest,
            type=ComponentType.CONTAINER,
            bom_ref=f"base:{base_digest}",
            hashes=sha256(base_digest),
            properties=props(role="base image"),
        )
        top.append(base)
    debian: dict[str, Component] = {}
    for package in contents.debian:
        origin = ""
        if subject.base_packages is not None:
            from_base = (package.name, package.version) in subject.base_packages
            origin = "base image layers" if from_base else "sglx image layers"
        debian.setdefault(
            package.name,
            Component(
                name=package.name,
                version=package.version,
                type=ComponentType.LIBRARY,
                bom_ref=f"deb:{package.name}@{package.version}?arch={package.architecture}",
                purl=PackageURL(
                    "deb",
                    "debian",
                    package.name,
                    package.version,
                    {"arch": package.architecture} if package.architecture else None,
                ),
                properties=props(
                    source=f"{package.source} {package.source_version}", origin=origin
                ),
            ),
        )
    python: dict[str, Component] = {}
    for dist in contents.python:
        ref = f"pypi:{dist.key}@{dist.version}@{dist.location}"
        wheel = subject.wheel_hashes.get((dist.key, dist.version))
        python[ref] = Component(
            name=dist.name,
            version=dist.version,
            type=ComponentType.LIBRARY,
            bom_ref=ref,
            purl=PackageURL("pypi", None, dist.key, dist.version),
            hashes=sha256(wheel) if wheel else None,
            properties=props(
                location=dist.location,
                hash_of="the locked wheel" if wheel else "",
                code="" if dist.has_code else NO_CODE,
            ),
        )
    loose = [
        Component(
            name=item.path,
            type=ComponentType.FILE,
            bom_ref=f"file:{item.path}",
            hashes=sha256(item.sha256),
            properties=props(size=str(item.size), found_by="sglx scan (ELF, in no package)"),
        )
        for item in contents.loose_elf
    ]
    model_digest = labels.get(image_labels.WEIGHTS_DIGEST, "")
    if model_digest:
        top.append(
            Component(
                name=labels.get(image_labels.MODEL_NAME) or "weights",
                version=model_digest,
                type=ComponentType.MACHINE_LEARNING_MODEL,
                bom_ref=f"model:{model_digest}",
                hashes=sha256(model_digest),
                properties=props(hash_of="the weights manifest (sglx weights verify)"),
            )
        )
    if contents.os is not None:
        top.append(
            Component(
                name=contents.os.id,
                version=contents.os.version_id,
                type=ComponentType.OPERATING_SYSTEM,
                bom_ref=f"os:{contents.os.id}@{contents.os.version_id}",
                properties=props(read_from="os-release"),
            )
        )
    if labels.get(image_labels.TRITON_CACHE):
        top.append(
            Component(
                name="prebuilt Triton cache",
                type=ComponentType.DATA,
                bom_ref="data:triton-cache",
                properties=props(key=labels[image_labels.TRITON_CACHE]),
            )
        )
    for component in [*top, *debian.values(), *python.values(), *loose]:
        bom.components.add(component)
    bom.register_dependency(image, [*top, *debian.values(), *python.values(), *loose])
    for package in contents.debian:
        needs = [debian[n] for n in dict.fromkeys(package.depends) if n in debian]
        if needs:
            bom.register_dependency(debian[package.name], needs)
    _python_dependencies(bom, contents.python, python)
    return bom


def _python_dependencies(
    bom: Any, dists: Iterable[PythonDistribution], components: Mapping[str, Any]
) -> None:
    """Each distribution needs the distributions of its folder its Requires-Dist names."""
    by_folder: dict[tuple[str, str], Any] = {}
    for dist in dists:
        by_folder[(dist.location, dist.key)] = components[
            f"pypi:{dist.key}@{dist.version}@{dist.location}"
        ]
    for dist in dists:
        needs = [
            by_folder[(dist.location, name)]
            for name in dict.fromkeys(dist.requires)
            if (dist.location, name) in by_folder and name != dist.key
        ]
        if needs:
            bom.register_dependency(by_folder[(dist.location, dist.key)], needs)


def to_json(bom: Any) -> str:
    """The BOM as CycloneDX 1.6 JSON. Not validated here: the library writes the schema's
    shape, and the tests validate what it wrote with the library's strict validator
    (`validation_error`), which costs a bundle create seconds for nothing it could fix."""
    from cyclonedx.output.json import JsonV1Dot6

    text: str = JsonV1Dot6(bom).output_as_string(indent=1)
    return text + "\n"


def validation_error(text: str) -> str | None:
    """Why `text` is not a valid CycloneDX 1.6 JSON BOM; None when it is."""
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator

    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    return None if error is None else str(error)[:2000]


def summary(text: str) -> dict[str, Any]:
    """Counts by kind, the base and the weights of a BOM sglx wrote (bundle inspect)."""
    document = parse_json(text, path=Path(SBOM_NAME), what="SBOM")
    if not isinstance(document, dict):
        return {"components": {}, "base": None, "model": None}
    counts: dict[str, int] = {}
    base = model = None
    for component in document.get("components") or []:
        purl = str(component.get("purl") or "")
        kind = (
            "debian" if purl.startswith("pkg:deb/") else
            "python" if purl.startswith("pkg:pypi/") else
            str(component.get("type") or "other")
        )  # fmt: skip
        counts[kind] = counts.get(kind, 0) + 1
        if str(component.get("bom-ref", "")).startswith("base:"):
            base = f"{component.get('name')} ({component.get('version')})"
        if component.get("type") == "machine-learning-model":
            model = f"{component.get('name')} ({component.get('version')})"
    return {"components": counts, "base": base, "model": model}

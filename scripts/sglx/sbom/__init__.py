"""The SBOM of an image: what the scan's unpacked root holds (contents.py), written as a
CycloneDX 1.6 BOM (document.py). `ImageSbom` is handed to the scan as its `inspect` step, so
the SBOM costs no second export of the image."""

from __future__ import annotations

from typing import Any

from sglx import image_labels
from sglx.sbom.contents import DPKG_STATUS, MAX_STATUS_BYTES, ImageContents, read_contents
from sglx.sbom.document import Subject, build_bom, to_json
from sglx.scan.analysis import ScanReport
from sglx.wheels.lockfile import Lock, canonical
from sglx_core.rootfs import RootFS


class ImageSbom:
    """Collects an image's contents during its scan; `text()` is then its BOM."""

    def __init__(
        self,
        ref: str,
        image_id: str,
        labels: dict[str, str],
        lock: Lock | None,
        base_packages: frozenset[tuple[str, str]] | None = None,
    ) -> None:
        hashes = {}
        if lock is not None and lock.digest == labels.get(image_labels.LOCK_DIGEST):
            hashes = {(canonical(w.name), w.version): w.sha256 for w in lock.wheels}
        self.subject = Subject(ref, image_id, labels, hashes, base_packages)
        self.contents: ImageContents | None = None

    @classmethod
    def of_engine_image(cls, client: Any, ref: str) -> ImageSbom:
        """For the image `ref` the engine holds: its id and labels, the lock of the arch its
        label names (the wheels' hashes, where it is the image's lock), and its base's
        packages where the engine still has the base. An image the engine does not hold gives
        an empty subject: the scan then names the missing image, with its hint."""
        from docker.errors import ImageNotFound

        from sglx.wheels.steps import lock_at_hand

        try:
            image = client.images.get(ref)
        except ImageNotFound:
            return cls(ref, "", {}, None)
        labels = dict(image.labels or {})
        base = _base_packages(client, labels.get(image_labels.BASE_DIGEST, ""))
        return cls(ref, image.id, labels, lock_at_hand(labels.get(image_labels.ARCH)), base)

    def __call__(self, rootfs: RootFS, report: ScanReport) -> None:
        self.contents = read_contents(rootfs, report.elf_paths)

    def text(self) -> str | None:
        """The BOM as CycloneDX JSON; None when the scan found no image to read."""
        if self.contents is None:
            return None
        return to_json(build_bom(self.subject, self.contents))


def _base_packages(client: Any, base_id: str) -> frozenset[tuple[str, str]] | None:
    """(name, version) of the packages the base's own dpkg status lists; None when the engine
    no longer has the base (the BOM then says nothing of where a package came from)."""
    from debian.deb822 import Deb822
    from docker.errors import DockerException

    from sglx.engine import read_image_file

    if not base_id:
        return None
    try:
        client.images.get(base_id)
    except DockerException:
        return None
    raw = read_image_file(client, base_id, DPKG_STATUS, MAX_STATUS_BYTES)
    if raw is None:
        return frozenset()
    return frozenset(
        (p["Package"], p.get("Version", ""))
        for p in Deb822.iter_paragraphs(raw.decode("utf-8", "replace").splitlines(keepends=True))
        if "Package" in p
    )

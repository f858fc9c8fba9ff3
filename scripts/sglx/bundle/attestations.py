"""A bundle's attestations: written by `bundle create --attest-key KEY`, checked by verify and
install whenever the site has an attestation key (--attest-key PUB, $SGLX_ATTEST_KEY or
/etc/sglx/attest.pub; sglx.bundle.signing.site_attest_key).

Three documents, all listed in bundle.json (so SHA256SUMS and the ssh signature cover them too)
and each signed with the site's key (sglx.attest):
- meta/scan.sigstore.json: the image scan's result, whose subjects are the image (its config
  digest), the scan report and the SBOM;
- meta/provenance.sigstore.json: SLSA provenance whose subjects are every other file of the
  bundle (the scan attestation too), naming the base's digest, the lock's and the commit;
- meta/in-toto/: the layout and the link of the step `bundle`, whose products are the same
  files as the provenance's subjects plus the provenance itself.

A reviewer checks them without sglx (docs/reference/trust.md): `cosign
verify-blob-attestation` for the two Sigstore bundles, `in-toto-verify` in the bundle folder
for the layout. sglx checks the signatures and that the subjects are exactly the files
bundle.json lists, with the same SHA-256; the files themselves are hashed by the verify that
runs beside it (sglx.bundle.verify), so nothing is hashed twice.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx import __version__, image_labels
from sglx.attest import in_toto_layout, sigstore_bundle, statements
from sglx.attest.keys import SigningKey, VerifyKey
from sglx.attest.sigstore_bundle import AttestationProblem
from sglx.attest.statements import Dependency, Subject
from sglx.bundle import layout
from sglx.bundle.hashed_files import write_hashed
from sglx.bundle.manifest import BundleManifest, FileEntry, ImageRecord
from sglx_core.errors import SglxError
from sglx_core.report import Finding, Result
from sglx_core.untrusted import read_bounded

COMMAND = ("sglx", "bundle", "create")
# Files in the folder that are not products of the `bundle` step: they describe it.
DESCRIBED_BY = (layout.MANIFEST, layout.SIGNATURE, layout.SUMS, f"{layout.IN_TOTO}/*")
UNATTESTED = "bundle_unattested"
BAD = "bundle_attestation"
REFUSE = (
    "do not install this bundle; get it again from the source side, or check that the key "
    "given is the one the bundle was attested with"
)


@dataclass(frozen=True)
class BuildFacts:
    """What the provenance says about how the bundle was made."""

    image: ImageRecord
    labels: Mapping[str, str]
    parameters: Mapping[str, Any]
    started: dt.datetime
    valid_days: int = in_toto_layout.DEFAULT_VALID_DAYS


def write(
    stage: Path,
    entries: list[FileEntry],
    facts: BuildFacts,
    scan: Result | None,
    key: SigningKey,
) -> list[FileEntry]:
    """The attestations of the files in `entries` (all written), as new entries."""
    added: list[FileEntry] = []

    def add(path: str, data: bytes) -> None:
        copied = write_hashed(stage / path, data)
        added.append(FileEntry(path=path, size=copied.size, sha256=copied.sha256, kind="meta"))

    by_path = {e.path: e.sha256 for e in entries}
    if scan is not None and layout.SCAN_REPORT in by_path:
        scan_statement = _scan_statement(facts, scan, by_path)
        add(layout.SCAN_ATTESTATION, sigstore_bundle.sign(scan_statement, key))
    subjects = [Subject(e.path, e.sha256) for e in sorted([*entries, *added], key=_path)]
    provenance = statements.provenance(subjects, _build(facts))
    add(layout.PROVENANCE, sigstore_bundle.sign(provenance, key))
    products = {e.path: e.sha256 for e in [*entries, *added]}
    documents = in_toto_layout.write(
        products,
        key,
        command=COMMAND,
        described_by=DESCRIBED_BY,
        expires=dt.datetime.now(dt.UTC) + dt.timedelta(days=facts.valid_days),
    )
    add(layout.IN_TOTO_LAYOUT, documents.layout)
    add(f"{layout.IN_TOTO}/{documents.link_name}", documents.link)
    return added


def check(bundle: Path, manifest: BundleManifest, key: VerifyKey, why: str) -> list[Finding]:
    """Findings on the bundle's attestations under `key` (`why` names where the key came from);
    none when all three are good and attest exactly the files bundle.json lists."""
    listed = {e.path: e.sha256 for e in manifest.files}
    in_toto_files = {p for p in listed if _is_in_toto(p)}
    if layout.PROVENANCE not in listed:
        return [
            Finding(
                UNATTESTED,
                f"the bundle carries no attestations ({layout.PROVENANCE}) and this site "
                f"requires them ({why})",
                layout.PROVENANCE,
                "ask the source side for a bundle made with `sglx bundle create --attest-key "
                "KEY`; do not install an unattested copy",
            )
        ]
    findings: list[Finding] = []

    def problem(path: str, message: str) -> None:
        findings.append(Finding(BAD, f"{path}: {message}", path, REFUSE))

    try:
        statement = sigstore_bundle.open_statement(
            _read(bundle, layout.PROVENANCE), key, statements.SLSA_PROVENANCE
        )
        expected = {
            p: d for p, d in listed.items() if p != layout.PROVENANCE and p not in in_toto_files
        }
        mismatch = _differences(statements.subjects_of(statement), expected)
        if mismatch:
            problem(layout.PROVENANCE, f"its subjects are not the bundle's files: {mismatch}")
    except AttestationProblem as exc:
        problem(layout.PROVENANCE, str(exc))
    if layout.SCAN_REPORT in listed:
        _check_scan(bundle, listed, key, problem)
    link = f"{layout.IN_TOTO}/{in_toto_layout.link_name(key)}"
    try:
        if layout.IN_TOTO_LAYOUT not in listed:
            raise AttestationProblem(f"{layout.IN_TOTO_LAYOUT} is not in the bundle (bundle.json)")
        if link not in listed:
            others = sorted(p for p in in_toto_files if p != layout.IN_TOTO_LAYOUT)
            raise AttestationProblem(
                f"its link was made by another key ({', '.join(others)}; this key's is {link})"
                if others
                else f"{link} is not in the bundle (bundle.json)"
            )
        products = in_toto_layout.check(
            _read(bundle, layout.IN_TOTO_LAYOUT),
            _read(bundle, link),
            key,
            dt.datetime.now(dt.UTC),
        )
        expected = {p: d for p, d in listed.items() if p not in in_toto_files}
        mismatch = _differences(products, expected)
        if mismatch:
            raise AttestationProblem(f"the link's products are not the bundle's files: {mismatch}")
    except AttestationProblem as exc:
        problem(layout.IN_TOTO, str(exc))
    return findings


def _check_scan(bundle: Path, listed: Mapping[str, str], key: VerifyKey, problem: Any) -> None:
    if layout.SCAN_ATTESTATION not in listed:
        problem(layout.SCAN_ATTESTATION, "missing, though the bundle carries a scan report")
        return
    try:
        statement = sigstore_bundle.open_statement(
            _read(bundle, layout.SCAN_ATTESTATION), key, statements.TEST_RESULT
        )
    except AttestationProblem as exc:
        problem(layout.SCAN_ATTESTATION, str(exc))
        return
    attested = statements.subjects_of(statement)
    for path in (layout.SCAN_REPORT, layout.SBOM):
        if path in listed and attested.get(path) != listed[path]:
            problem(layout.SCAN_ATTESTATION, f"it does not attest {path} as bundle.json lists it")


def _scan_statement(facts: BuildFacts, scan: Result, by_path: Mapping[str, str]) -> dict[str, Any]:
    image = facts.image
    subjects = [Subject(image.ref, image.id.partition(":")[2])]
    subjects += [Subject(p, by_path[p]) for p in (layout.SCAN_REPORT, layout.SBOM) if p in by_path]
    configuration = [Subject(p, by_path[p]) for p in (layout.PROFILE,) if p in by_path]
    return statements.test_result(
        subjects,
        passed=not scan.findings,
        failed_tests=sorted({f"{f.code} {f.path or ''}".strip() for f in scan.findings}),
        configuration=configuration,
    )


def _build(facts: BuildFacts) -> statements.Build:
    labels = facts.labels
    dependencies: list[Dependency] = []
    base = labels.get(image_labels.BASE_DIGEST, "")
    if base.startswith("sha256:"):
        name = labels.get(image_labels.BASE_NAME) or "base"
        dependencies.append(Dependency(f"base {name}", {"sha256": base.partition(":")[2]}))
    lock = labels.get(image_labels.LOCK_DIGEST, "")
    if lock.startswith("sha256:"):
        dependencies.append(Dependency("wheel lock", {"sha256": lock.partition(":")[2]}))
    weights = labels.get(image_labels.WEIGHTS_DIGEST, "")
    if weights.startswith("sha256:"):
        name = labels.get(image_labels.MODEL_NAME) or "weights"
        dependencies.append(Dependency(f"weights {name}", {"sha256": weights.partition(":")[2]}))
    revision = labels.get(image_labels.REVISION, "")
    commit, _, dirty = revision.partition("-")
    if len(commit) == 40:
        suffix = " (with uncommitted changes)" if dirty else ""
        dependencies.append(Dependency(f"sglx source{suffix}", {"gitCommit": commit}))
    image = facts.image
    parameters = {
        **facts.parameters,
        "image": {"ref": image.ref, "id": image.id, "manifestDigest": image.manifest_digest or ""},
    }
    return statements.Build(
        parameters=parameters,
        dependencies=tuple(dependencies),
        builder_version={"sglx": __version__},
        invocation=uuid.uuid4().hex,
        started=facts.started,
        finished=dt.datetime.now(dt.UTC),
    )


def _differences(attested: Mapping[str, str], listed: Mapping[str, str]) -> str:
    """'' when the two maps agree, else what differs (at most three names of each kind)."""
    parts = []
    both = set(attested) & set(listed)
    for label, names in (
        ("not in bundle.json", sorted(set(attested) - set(listed))),
        ("not attested", sorted(set(listed) - set(attested))),
        ("of another sha256", sorted(p for p in both if attested[p] != listed[p])),
    ):
        if names:
            shown = ", ".join(layout.shown(n) for n in names[:3])
            more = f" and {len(names) - 3} more" if len(names) > 3 else ""
            parts.append(f"{label}: {shown}{more}")
    return "; ".join(parts)


def _read(bundle: Path, path: str) -> bytes:
    try:
        return read_bounded(
            bundle / path, what="attestation", max_bytes=layout.MAX_ATTESTATION_BYTES
        )
    except SglxError as exc:
        raise AttestationProblem(exc.message) from None


def _is_in_toto(path: str) -> bool:
    return path == layout.IN_TOTO_LAYOUT or bool(layout.IN_TOTO_LINK.fullmatch(path))


def _path(entry: FileEntry) -> str:
    return entry.path

"""Checking a bundle folder offline: every file, nothing missing, nothing extra, the signature.

The order matters for what a user is told: `bundle.json` must parse, `SHA256SUMS` must be what
`bundle.json` renders to (so neither was altered alone), the signature (when asked) must be
good, then every listed file must exist with its size and sha256 and no other file may be
present. Each finding names the file (a chunk by its number) and what to do about it.
`check_files` is shared with `install`, which passes the files it verified before (its own
record) so they are not hashed again.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.hashing import HashJob, hash_files
from sglx.bundle.manifest import BundleManifest, FileEntry, parse, render_sums, sha256_bytes
from sglx.bundle.signing import site_allowed_signers, site_attest_key
from sglx.bundle.signing import verify as verify_signature
from sglx.progress import Progress
from sglx_core.errors import SglxError
from sglx_core.report import Finding
from sglx_core.untrusted import open_regular, read_bounded

RECOPY = "re-copy {what} from the source side"


@dataclass
class FileCheck:
    """What checking the files found; `hashed` are the entries hashed now, `reused` skipped."""

    manifest: BundleManifest | None
    manifest_sha256: str = ""
    findings: list[Finding] = field(default_factory=list)
    hashed: int = 0
    hashed_bytes: int = 0
    reused: int = 0
    signature_checked: bool = False
    attestations_checked: bool = False


@dataclass(frozen=True)
class SignaturePolicy:
    allowed_signers: Path | None = None
    identity: str | None = None
    required: bool = False
    attest_key: Path | None = None  # the public key attestations must be signed with

    def resolved(self) -> SignaturePolicy:
        """The policy in force: the site's allowed-signers file when no --allowed-signers is
        given, and a signature required whenever signers are known (else deleting
        bundle.json.sig and re-rendering SHA256SUMS would pass an altered bundle); the site's
        attestation key when no --attest-key is given."""
        signers = self.allowed_signers or site_allowed_signers()
        attest_key = self.attest_key or site_attest_key()
        return SignaturePolicy(
            signers, self.identity, self.required or signers is not None, attest_key
        )


def read_manifest_bytes(bundle: Path) -> bytes:
    """`bundle.json`, read with a size bound before anything in it is believed."""
    path = bundle / layout.MANIFEST
    if not bundle.is_dir():
        raise SglxError(
            f"{bundle} is not a folder",
            hint="pass a bundle folder (or the .tar written by `sglx bundle create --tar`)",
            code="usage",
            path=str(bundle),
        )
    if path.is_symlink() or not path.is_file():
        raise SglxError(
            f"{bundle} has no {layout.MANIFEST}: it is not an sglx bundle, or the copy is "
            "incomplete",
            hint=RECOPY.format(what="bundle.json"),
            code="bundle_manifest",
            path=str(path),
        )
    with open_regular(path, what="bundle manifest", hint=RECOPY.format(what="bundle.json")) as f:
        return f.read(layout.MAX_MANIFEST_BYTES + 1)


def read_signature(bundle: Path) -> bytes | None:
    """`bundle.json.sig`, bounded, or None when there is no plain file of that name (a link or
    a FIFO there is reported by the walk of the bundle)."""
    path = bundle / layout.SIGNATURE
    if path.is_symlink() or not path.is_file():
        return None
    return read_bounded(
        path,
        what="signature",
        max_bytes=layout.MAX_SIGNATURE_BYTES,
        hint="do not install this bundle; get bundle.json.sig again from the source side",
    )


def what(manifest: BundleManifest | None, path: str) -> str:
    """'chunk 7 of image.tar (image/image.tar.007)' or the plain path."""
    label = manifest.chunk_label(path) if manifest is not None else None
    return f"{label} ({path})" if label else path


def check_files(
    bundle: Path,
    *,
    threads: int,
    progress: Progress,
    signature: SignaturePolicy,
    already_verified: Callable[[FileEntry, os.stat_result], bool] | None = None,
    on_verified: Callable[[FileEntry, os.stat_result], None] | None = None,
) -> FileCheck:
    raw = read_manifest_bytes(bundle)
    try:
        manifest = parse(raw, str(bundle / layout.MANIFEST))
    except SglxError as exc:
        finding = Finding("bundle_manifest", exc.message, layout.MANIFEST, exc.hint)
        return FileCheck(manifest=None, findings=[finding])
    check = FileCheck(manifest=manifest, manifest_sha256=sha256_bytes(raw))
    try:
        signed = read_signature(bundle)
    except SglxError as exc:
        check.findings.append(Finding("bundle_signature", exc.message, layout.SIGNATURE, exc.hint))
        return check
    _check_sums(bundle, signed, manifest, check)
    policy = signature.resolved()
    _check_signature(raw, signed, policy, check)
    _check_attestations(bundle, manifest, policy, check)
    entries = manifest.by_path()
    present = _walk(bundle, check)
    jobs: list[HashJob] = []
    stats: dict[str, os.stat_result] = {}
    for path, entry in sorted(entries.items()):
        info = present.get(path)
        name = what(manifest, path)
        if info is None:
            check.findings.append(
                Finding("bundle_missing", f"{name} is missing", path, RECOPY.format(what=name))
            )
            continue
        if info.st_size != entry.size:
            how = "truncated" if info.st_size < entry.size else "longer than it should be"
            check.findings.append(
                Finding(
                    "bundle_size",
                    f"{name} is {info.st_size} bytes, bundle.json says {entry.size} ({how})",
                    path,
                    RECOPY.format(what=name),
                )
            )
            continue
        if already_verified is not None and already_verified(entry, info):
            check.reused += 1
            continue
        stats[path] = info
        jobs.append(HashJob(path, bundle / path, entry.size))
    for path in sorted(set(present) - set(entries) - set(layout.METADATA)):
        check.findings.append(
            Finding(
                "bundle_extra",
                f"{layout.shown(path)} is not part of the bundle (bundle.json does not list it)",
                layout.shown(path),
                "remove it: a bundle holds exactly the files bundle.json lists",
            )
        )

    def done(job: HashJob, digest: str) -> None:
        if digest == entries[job.key].sha256 and on_verified is not None:
            on_verified(entries[job.key], stats[job.key])

    digests = hash_files(jobs, threads=threads, progress=progress, on_done=done)
    for job in jobs:
        check.hashed += 1
        check.hashed_bytes += job.size
        if digests[job.key] != entries[job.key].sha256:
            name = what(manifest, job.key)
            check.findings.append(
                Finding(
                    "bundle_hash",
                    f"{name} does not match its sha256 in bundle.json (damaged in the copy)",
                    job.key,
                    RECOPY.format(what=name),
                )
            )
    check.findings.sort(key=lambda f: (f.path or "", f.code))
    return check


def _check_sums(
    bundle: Path, signature: bytes | None, manifest: BundleManifest, check: FileCheck
) -> None:
    sums = bundle / layout.SUMS
    if sums.is_symlink() or not sums.is_file():
        check.findings.append(
            Finding(
                "bundle_missing", "SHA256SUMS is missing", layout.SUMS, RECOPY.format(what="it")
            )
        )
        return
    sig_sha = None if signature is None else sha256_bytes(signature)
    expected = render_sums(manifest, check.manifest_sha256, sig_sha).splitlines()
    with open_regular(sums, what="checksum list", hint=RECOPY.format(what="SHA256SUMS")) as f:
        actual = f.read(layout.MAX_MANIFEST_BYTES).decode("utf-8", "replace").splitlines()
    if actual == expected:
        return
    listed = {line[66:]: line[:64] for line in actual if len(line) > 66}
    if listed.get(layout.MANIFEST) != check.manifest_sha256:
        message = (
            "bundle.json does not match its sha256 in SHA256SUMS: one of the two was altered "
            "or damaged"
        )
        where = layout.MANIFEST
    else:
        differing = sorted(set(actual) ^ set(expected))
        names = sorted({layout.shown(line[66:] or line) for line in differing})
        message = f"SHA256SUMS does not agree with bundle.json on: {', '.join(names[:5])}"
        where = layout.SUMS
    check.findings.append(
        Finding(
            "bundle_sums",
            message,
            where,
            "re-copy bundle.json and SHA256SUMS from the source side; if they came unaltered "
            "from there, the bundle was tampered with: do not install it",
        )
    )


def _check_signature(
    raw: bytes, signature: bytes | None, policy: SignaturePolicy, check: FileCheck
) -> None:
    """Check the signature under `policy` (resolved: the site's signers count as given)."""
    if signature is None:
        if policy.required:
            why = (
                f"signers are configured in {policy.allowed_signers}"
                if policy.allowed_signers is not None
                else "--require-signature"
            )
            check.findings.append(
                Finding(
                    "bundle_unsigned",
                    "the bundle is not signed (no bundle.json.sig) and this site requires "
                    f"signatures ({why})",
                    layout.SIGNATURE,
                    "ask the source side for a bundle made with `sglx bundle create --sign KEY`; "
                    "do not install an unsigned copy",
                )
            )
        return
    if policy.allowed_signers is None:
        if policy.required:
            raise SglxError(
                "--require-signature needs --allowed-signers FILE to check the signature with",
                hint="pass the site's allowed-signers file (`IDENTITY ssh-ed25519 AAAA...`)",
                code="usage",
            )
        return
    check.signature_checked = True
    problem = verify_signature(raw, signature, policy.allowed_signers, policy.identity)
    if problem is not None:
        check.findings.append(
            Finding(
                "bundle_signature",
                f"the signature of bundle.json is not valid: {problem}",
                layout.SIGNATURE,
                "do not install this bundle; get it again from a trusted source, or check "
                "--allowed-signers and --identity",
            )
        )


def _check_attestations(
    bundle: Path, manifest: BundleManifest, policy: SignaturePolicy, check: FileCheck
) -> None:
    """With an attestation key configured, the bundle's attestations must be signed with it
    and attest exactly the files bundle.json lists (sglx.bundle.attestations)."""
    if policy.attest_key is None:
        return
    from sglx.attest.keys import load_verify_key
    from sglx.bundle import attestations

    key = load_verify_key(policy.attest_key)
    check.attestations_checked = True
    check.findings += attestations.check(bundle, manifest, key, f"key {policy.attest_key}")


def _walk(bundle: Path, check: FileCheck) -> dict[str, os.stat_result]:
    """Every plain file under `bundle` by relative path; anything else is a finding."""
    present: dict[str, os.stat_result] = {}
    for top, dirs, files in os.walk(bundle, followlinks=False):
        for name in [*dirs, *files]:
            full = Path(top, name)
            rel = full.relative_to(bundle).as_posix()
            info = full.lstat()
            if stat.S_ISDIR(info.st_mode):
                continue
            if len(present) >= layout.MAX_FILES:
                raise SglxError(
                    f"{bundle} holds more than {layout.MAX_FILES} files",
                    hint="this is not an sglx bundle folder",
                    code="usage",
                )
            if not stat.S_ISREG(info.st_mode):
                check.findings.append(
                    Finding(
                        "bundle_not_file",
                        f"{layout.shown(rel)} is not a plain file (a link, device or FIFO)",
                        layout.shown(rel),
                        "remove it and re-copy the bundle's files as plain files",
                    )
                )
                continue
            present[rel] = info
    return present

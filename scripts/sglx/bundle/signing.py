"""Signing `bundle.json` with OpenSSH keys: no service, no network, tools every site has.

`ssh-keygen -Y sign -n sglx-bundle` writes `bundle.json.sig`; `ssh-keygen -Y verify` checks it
against an allowed-signers file (one `IDENTITY KEYTYPE KEY` line per trusted key). Because
`SHA256SUMS` is rendered from `bundle.json`, the signature covers every file.

A site configures its signers once, in SITE_ALLOWED_SIGNERS (or the file $SGLX_ALLOWED_SIGNERS
names); from then on verify and install check every bundle against it and refuse an unsigned
one, as `--allowed-signers FILE` does: a site that knows its signers never accepts a bundle
whose signature was simply deleted.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from sglx.bundle import layout
from sglx_core.errors import SglxError

TIMEOUT_S = 60
SITE_ALLOWED_SIGNERS = Path("/etc/sglx/allowed_signers")
SITE_ALLOWED_SIGNERS_ENV = "SGLX_ALLOWED_SIGNERS"
SITE_ATTEST_KEY = Path("/etc/sglx/attest.pub")
SITE_ATTEST_KEY_ENV = "SGLX_ATTEST_KEY"
SITE_WEIGHTS_SIGNER = Path("/etc/sglx/weights_signer.pub")
SITE_WEIGHTS_SIGNER_ENV = "SGLX_WEIGHTS_SIGNER"


def site_allowed_signers(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The site's allowed-signers file: the one $SGLX_ALLOWED_SIGNERS names, else
    SITE_ALLOWED_SIGNERS when anything is at that path (a dangling link or an unreadable file
    still counts: it fails the check rather than turning it off), else None."""
    return _site_file(SITE_ALLOWED_SIGNERS_ENV, SITE_ALLOWED_SIGNERS, environ)


def site_attest_key(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The site's attestation public key ($SGLX_ATTEST_KEY, else SITE_ATTEST_KEY), found the
    way the allowed-signers file is: when it is configured, every bundle must carry
    attestations it verifies (sglx.bundle.attestations)."""
    return _site_file(SITE_ATTEST_KEY_ENV, SITE_ATTEST_KEY, environ)


def site_weights_signer(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The public key the site's weights must be signed with ($SGLX_WEIGHTS_SIGNER, else
    SITE_WEIGHTS_SIGNER): when it is configured, install admits weights into the store only
    with a valid OMS signature by it (sglx.bundle.weights_store.admit)."""
    return _site_file(SITE_WEIGHTS_SIGNER_ENV, SITE_WEIGHTS_SIGNER, environ)


def _site_file(variable: str, default: Path, environ: Mapping[str, str]) -> Path | None:
    named = environ.get(variable, "")
    if named:
        return Path(named)
    return default if os.path.lexists(default) else None


def _ssh_keygen(args: list[str], stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(
            ["ssh-keygen", *args], input=stdin, capture_output=True, timeout=TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        raise SglxError(
            "ssh-keygen not found",
            hint="install OpenSSH's client tools (Debian: openssh-client)",
            code="environment",
        ) from None
    except subprocess.TimeoutExpired:
        raise SglxError(
            f"ssh-keygen took longer than {TIMEOUT_S} s",
            hint="a passphrase-protected key needs ssh-agent: `ssh-add KEY` first",
            code="environment",
        ) from None


def check_key(key: Path) -> None:
    if not key.is_file():
        raise SglxError(
            f"--sign {key}: no such key file",
            hint="make one with `ssh-keygen -t ed25519 -f KEY -N ''`",
            code="usage",
            path=str(key),
        )


def sign(manifest: Path, key: Path) -> Path:
    """Write `manifest`.sig with `key` (a private key file, or a public one held by ssh-agent)."""
    check_key(key)
    proc = _ssh_keygen(
        ["-Y", "sign", "-q", "-f", str(key), "-n", layout.SIGN_NAMESPACE, str(manifest)]
    )
    signature = manifest.with_name(layout.SIGNATURE)
    if proc.returncode != 0 or not signature.is_file():
        raise SglxError(
            f"signing {manifest.name} with {key} failed: "
            + proc.stderr.decode(errors="replace").strip(),
            hint="pass an OpenSSH private key without passphrase, or load it in ssh-agent",
            code="sign_failed",
            path=str(key),
        )
    return signature


def verify(
    manifest_bytes: bytes, signature: bytes, allowed_signers: Path, identity: str | None
) -> str | None:
    """None when `signature` (the bytes of bundle.json.sig, read once and bounded by the
    caller) is good for an allowed signer, else the reason it is not."""
    if not allowed_signers.is_file():
        raise SglxError(
            f"allowed signers {allowed_signers}: no such file",
            hint="pass --allowed-signers FILE, or fix the site's file (one line per trusted "
            f"key: `IDENTITY ssh-ed25519 AAAA...`; ${SITE_ALLOWED_SIGNERS_ENV} or "
            f"{SITE_ALLOWED_SIGNERS})",
            code="usage",
            path=str(allowed_signers),
        )
    with tempfile.TemporaryDirectory(prefix="sglx-signature-") as scratch:
        copy = Path(scratch, layout.SIGNATURE)
        copy.write_bytes(signature)
        return _verify(manifest_bytes, copy, allowed_signers, identity)


def _verify(
    manifest_bytes: bytes, signature: Path, allowed_signers: Path, identity: str | None
) -> str | None:
    if identity is None:
        found = _ssh_keygen(
            ["-Y", "find-principals", "-s", str(signature), "-f", str(allowed_signers)]
        )
        principals = found.stdout.decode(errors="replace").split()
        if found.returncode != 0 or not principals:
            return "it was not made by any key in the allowed-signers file"
        identity = principals[0]
    proc = _ssh_keygen(
        [
            "-Y",
            "verify",
            "-f",
            str(allowed_signers),
            "-I",
            identity,
            "-n",
            layout.SIGN_NAMESPACE,
            "-s",
            str(signature),
        ],
        stdin=manifest_bytes,
    )
    if proc.returncode != 0:
        detail = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
        return f"ssh-keygen refused it ({detail[-1] if detail else 'no reason given'})"
    return None

"""The attestation key: one ECDSA P-256 key the site controls, read from the file formats its
tools already write.

P-256 because it is the one curve every verifier a reviewer may use accepts: cosign, the
sigstore and model-signing libraries, and in-toto (through securesystemslib). The private key
may be PEM (PKCS#8, or SEC1 as `ssh-keygen -m PEM` writes it) or OpenSSH's own format, so the
key that signs `bundle.json` with ssh-keygen can sign the attestations too. The public key may
be PEM (what cosign and in-toto-verify read) or an OpenSSH public-key line (what an
allowed-signers file holds).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from securesystemslib.signer import CryptoSigner, SSlibKey

from sglx_core.errors import SglxError
from sglx_core.untrusted import read_bounded

MAX_KEY_BYTES = 64 << 10
MAKE_KEY = "make one with `ssh-keygen -t ecdsa -b 256 -m PEM -N '' -f KEY`"
PEM_OF_SSH = "`ssh-keygen -e -m PKCS8 -f KEY.pub > KEY.pem` gives its PEM form"


@dataclass(frozen=True)
class VerifyKey:
    """A public key, as securesystemslib (DSSE, in-toto) and Sigstore bundles name it."""

    key: SSlibKey

    @property
    def keyid(self) -> str:
        return str(self.key.keyid)

    @property
    def pem(self) -> bytes:
        return str(self.key.keyval["public"]).encode()

    @property
    def hint(self) -> str:
        """The Sigstore bundle's `publicKey.hint`: the SHA-256 of the PEM public key, as
        model-signing writes it."""
        return hashlib.sha256(self.pem).hexdigest()

    def in_toto_dict(self) -> dict[str, object]:
        """The key as an in-toto layout lists it (its `keys` entry)."""
        return {**self.key.to_dict(), "keyid": self.keyid}


@dataclass(frozen=True)
class SigningKey:
    signer: CryptoSigner

    @property
    def public(self) -> VerifyKey:
        return VerifyKey(self.signer.public_key)


def load_signing_key(path: Path) -> SigningKey:
    """The private key at `path`, refused unless it is an unencrypted ECDSA P-256 key."""
    raw = read_bounded(path, what="attestation key", max_bytes=MAX_KEY_BYTES, hint=MAKE_KEY)
    loaders = (
        serialization.load_ssh_private_key
        if raw.lstrip().startswith(b"-----BEGIN OPENSSH PRIVATE KEY")
        else serialization.load_pem_private_key
    )
    try:
        private = loaders(raw, None)
    except TypeError:
        raise SglxError(
            f"{path}: the attestation key is protected by a passphrase",
            hint="pass a copy without one (`ssh-keygen -p -N '' -f COPY`), kept where only the "
            "builder reads it",
            code="usage",
            path=str(path),
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise SglxError(
            f"{path}: not a private key in PEM or OpenSSH format",
            hint=MAKE_KEY,
            code="usage",
            path=str(path),
        ) from None
    if not isinstance(private, ec.EllipticCurvePrivateKey) or private.curve.name != "secp256r1":
        raise SglxError(
            f"{path}: the attestation key must be ECDSA P-256 (it is {_kind(private)})",
            hint=f"{MAKE_KEY}: cosign, in-toto and Sigstore bundles all verify P-256",
            code="usage",
            path=str(path),
        )
    return SigningKey(CryptoSigner(private))


def load_verify_key(path: Path) -> VerifyKey:
    """The public key at `path`: PEM, or one OpenSSH public-key line."""
    raw = read_bounded(path, what="attestation public key", max_bytes=MAX_KEY_BYTES)
    text = raw.strip()
    try:
        if text.startswith(b"-----BEGIN"):
            public = serialization.load_pem_public_key(text)
        else:
            public = serialization.load_ssh_public_key(text.split(b"\n")[0])
    except (ValueError, UnsupportedAlgorithm):
        raise SglxError(
            f"{path}: not a public key (PEM, or an OpenSSH `ecdsa-sha2-nistp256 AAAA...` line)",
            hint=f"pass the attestation key's public half; {PEM_OF_SSH}",
            code="usage",
            path=str(path),
        ) from None
    if not isinstance(public, ec.EllipticCurvePublicKey) or public.curve.name != "secp256r1":
        raise SglxError(
            f"{path}: the attestation public key must be ECDSA P-256",
            hint="pass the public half of the key `bundle create --attest-key` used",
            code="usage",
            path=str(path),
        )
    return VerifyKey(SSlibKey.from_crypto(public))


def _kind(key: object) -> str:
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return f"ECDSA {key.curve.name}"
    return type(key).__name__.removeprefix("_").replace("PrivateKey", "")

"""In-toto statements in Sigstore bundles (v0.3), signed with the site's key and verified
offline.

The bundle holds a DSSE envelope of the statement and names the key by its `publicKey.hint`
(the SHA-256 of its PEM form, as model-signing writes it), with no certificate and no
transparency-log entry: an air-gapped site has neither Fulcio nor Rekor. That is the form
`cosign verify-blob-attestation --key KEY.pem --insecure-ignore-tlog` checks without a network,
and the one model-signing's key-based signatures use. The DSSE envelope is made and checked by
securesystemslib, the bundle's JSON by sigstore-models.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from securesystemslib.dsse import Envelope
from securesystemslib.exceptions import VerificationError
from securesystemslib.signer import Signature
from sigstore_models.bundle.v1 import Bundle

from sglx.attest.keys import SigningKey, VerifyKey
from sglx.attest.statements import PAYLOAD_TYPE, STATEMENT_TYPE, payload
from sglx_core.errors import SglxError
from sglx_core.untrusted import parse_json

MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"


class AttestationProblem(Exception):
    """What is wrong with an attestation, in one sentence a report can show."""


def sign(statement: dict[str, Any], key: SigningKey) -> bytes:
    """The Sigstore bundle (JSON bytes) of `statement` signed with `key`."""
    body = payload(statement)
    envelope = Envelope(payload=body, payload_type=PAYLOAD_TYPE, signatures={})
    signature = envelope.sign(key.signer)
    bundle = Bundle.from_dict(
        {
            "mediaType": MEDIA_TYPE,
            "verificationMaterial": {"publicKey": {"hint": key.public.hint}, "tlogEntries": []},
            "dsseEnvelope": {
                "payload": _b64(body),
                "payloadType": PAYLOAD_TYPE,
                "signatures": [{"sig": _b64(bytes.fromhex(signature.signature)), "keyid": ""}],
            },
        }
    )
    return (bundle.to_json() + "\n").encode()


def open_statement(raw: bytes, key: VerifyKey, predicate_type: str) -> dict[str, Any]:
    """The statement a Sigstore bundle carries, once its signature by `key` is checked and it is
    an in-toto Statement v1 of `predicate_type`; AttestationProblem otherwise."""
    try:
        parse_json(raw, path=Path("bundle"), what="Sigstore bundle")  # depth and repeated keys
        bundle = Bundle.from_json(raw)
    except (SglxError, ValidationError, ValueError) as exc:
        raise AttestationProblem(f"not a Sigstore bundle ({_first_line(exc)})") from None
    if bundle.dsse_envelope is None:
        raise AttestationProblem("the Sigstore bundle holds no DSSE envelope")
    hint = bundle.verification_material.public_key
    if hint is not None and hint.hint and hint.hint != key.hint:
        raise AttestationProblem(
            f"signed with another key (hint {hint.hint[:16]}..., the given key is "
            f"{key.hint[:16]}...)"
        )
    dsse = bundle.dsse_envelope
    if dsse.payload_type != PAYLOAD_TYPE:
        raise AttestationProblem(f"its payload is {dsse.payload_type!r}, not an in-toto statement")
    if not dsse.signatures:
        raise AttestationProblem("its DSSE envelope carries no signature")
    # One signer, the site's key; the bundle names no keyid (cosign's and model-signing's form).
    signatures = {key.keyid: Signature(key.keyid, dsse.signatures[0].sig.hex())}
    envelope = Envelope(payload=dsse.payload, payload_type=dsse.payload_type, signatures=signatures)
    try:
        envelope.verify([key.key], 1)
    except VerificationError:
        raise AttestationProblem("its signature is not valid for the given key") from None
    try:
        statement = parse_json(dsse.payload, path=Path("payload"), what="in-toto statement")
    except SglxError as exc:
        raise AttestationProblem(f"its statement is not JSON ({exc.message})") from None
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise AttestationProblem(f"its payload is not an in-toto Statement ({STATEMENT_TYPE})")
    if statement.get("predicateType") != predicate_type:
        raise AttestationProblem(
            f"its predicate is {statement.get('predicateType')!r}, not {predicate_type}"
        )
    return statement


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _first_line(exc: Exception) -> str:
    text = getattr(exc, "message", None) or str(exc)
    return text.splitlines()[0][:200] if text else type(exc).__name__

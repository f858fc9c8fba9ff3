"""Converted weights signed per file, in OpenSSF's model-signing format (OMS,
https://github.com/sigstore/model-transparency), by its own library: a manifest of every
file's digest as an in-toto statement in a DSSE envelope, stored as a Sigstore bundle
(`sglx-weights.sig` beside sglx-weights.json), signed with an elliptic-curve key the site
controls. No network: key mode needs neither Fulcio nor Rekor.

A reviewer checks it without sglx: `model_signing verify key --signature DST/sglx-weights.sig
--public_key KEY.pub DST`. The signature covers every file of the folder but itself; sglx's own
manifest check (`weights verify`) still runs: the signature says who vouches for the files,
the manifest what the conversion made.
"""

from __future__ import annotations

from pathlib import Path

from sglx_core.errors import SglxError
from sglx_core.report import Finding, Result, Table
from sglx_core.weights_manifest import MANIFEST_NAME

SIGNATURE_NAME = "sglx-weights.sig"
FIX_KEY = (
    "give a PEM elliptic-curve key (e.g. `openssl ecparam -name prime256v1 -genkey -noout "
    "-out weights.key` and `openssl ec -in weights.key -pubout -out weights.pub`)"
)


def sign_weights(folder: Path, private_key: Path) -> Result:
    """Sign every file of `folder` (its manifest included) with `private_key`."""
    from model_signing import hashing, signing

    if not (folder / MANIFEST_NAME).is_file():
        raise SglxError(
            f"{folder} has no {MANIFEST_NAME}: not a converted model",
            hint="sign the folder `sglx weights convert` wrote",
            code="usage",
        )
    _readable(private_key, "--key")
    signature = folder / SIGNATURE_NAME
    try:
        (
            signing.Config()
            .use_elliptic_key_signer(private_key=private_key)
            .set_hashing_config(hashing.Config().set_ignored_paths(paths=[signature]))
            .sign(folder, signature)
        )
    except (ValueError, TypeError) as exc:
        raise SglxError(f"--key {private_key}: cannot sign with it: {exc}", hint=FIX_KEY,
                        code="usage") from None  # fmt: skip
    count = sum(1 for p in folder.iterdir() if p.name != SIGNATURE_NAME)
    return Result(
        ("weights", "sign"),
        data={"folder": str(folder), "signature": str(signature), "files": count},
        tables=(Table(("signature", "files signed"), ((str(signature), str(count)),)),),
    )


def signature_findings(folder: Path, public_key: Path) -> list[Finding]:
    """Why `folder` is not signed by the holder of `public_key`; none when it is."""
    from model_signing import hashing, verifying

    _readable(public_key, "--signer")
    signature = folder / SIGNATURE_NAME
    if not signature.is_file():
        fix = "sign it with `sglx weights sign DST --key KEY`, or copy it again"
        return [Finding("unsigned", f"{folder} carries no {SIGNATURE_NAME}", str(signature), fix)]
    try:
        (
            verifying.Config()
            .use_elliptic_key_verifier(public_key=public_key)
            .set_hashing_config(hashing.Config().set_ignored_paths(paths=[signature]))
            .verify(folder, signature)
        )
    except ValueError as exc:
        return [Finding("bad_signature", f"{signature}: {exc}"[:2000], str(signature),
                        "the files changed since they were signed, or another key signed "
                        "them: copy the model again, or check --signer")]  # fmt: skip
    return []


def _readable(key: Path, flag: str) -> None:
    if not key.is_file():
        raise SglxError(f"{flag} {key} is not a readable file", hint=FIX_KEY, code="usage")

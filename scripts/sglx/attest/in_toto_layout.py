"""The bundle as an in-toto supply chain that `in-toto-verify` checks on its own.

Two documents, both DSSE envelopes signed with the site's key through the in-toto library:
- the link of the one step, `bundle` (`bundle.<keyid prefix>.link`): its products are every
  file the bundle carries, by path and SHA-256, taken from the hashes `bundle create` already
  computed (nothing is hashed twice);
- the layout (`root.layout`): that step, performed by the key, creates those products and
  nothing else; and an inspection, `files`, that `in-toto-verify` runs in the bundle folder at
  review time (the command `true`: its only job is to record what is there), whose materials
  must match the step's products, apart from the files that describe the bundle (bundle.json,
  SHA256SUMS, the ssh signature and these documents). A changed, missing or added file fails.
  in-toto-verify leaves that inspection's record, `files.link`, in the folder: sglx's verify
  reports it as a file the bundle does not list, so a reviewer removes it (or checks a copy).

The layout expires (a year by default): a reviewer's verification of an old bundle fails
then, as in-toto means it to; sglx's own check reports the expiry the same way.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from in_toto.exceptions import InvalidMetadata, SignatureVerificationError
from in_toto.models.layout import Inspection, Layout, Step
from in_toto.models.link import Link
from in_toto.models.metadata import Envelope, Metadata
from securesystemslib.exceptions import FormatError

from sglx.attest.keys import SigningKey, VerifyKey
from sglx.attest.sigstore_bundle import AttestationProblem
from sglx_core.errors import SglxError
from sglx_core.untrusted import parse_json

STEP = "bundle"
INSPECTION = "files"
LAYOUT = "root.layout"
# What in-toto-verify leaves in the folder it checks: the inspection's own link. A second
# verification must not fail on the first one's record.
INSPECTION_RECORD = f"{INSPECTION}.link"
DEFAULT_VALID_DAYS = 365


def link_name(key: VerifyKey) -> str:
    """The link's file name, as in-toto-verify looks it up: `<step>.<keyid prefix>.link`."""
    return f"{STEP}.{key.keyid[:8]}.link"


@dataclass(frozen=True)
class Documents:
    layout: bytes
    link_name: str
    link: bytes


def write(
    products: Mapping[str, str],
    key: SigningKey,
    *,
    command: Sequence[str],
    described_by: Sequence[str],
    expires: dt.datetime,
) -> Documents:
    """The layout and the step's link for a bundle whose files are `products` (path -> sha256);
    `described_by` are the patterns of the files that are not products (bundle.json, ...)."""
    public = key.public
    link = Link(
        name=STEP,
        materials={},
        products={path: {"sha256": digest} for path, digest in sorted(products.items())},
        command=list(command),
        byproducts={},
        environment={},
    )
    layout = Layout()
    layout.expires = expires.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    layout.keys = {public.keyid: public.in_toto_dict()}
    step = Step(name=STEP)
    step.pubkeys = [public.keyid]
    step.expected_command = list(command)
    step.expected_materials = [["DISALLOW", "*"]]
    step.expected_products = [["CREATE", "*"]]
    inspection = Inspection(name=INSPECTION, run=["true"])
    inspection.expected_materials = [
        ["MATCH", "*", "WITH", "PRODUCTS", "FROM", STEP],
        *(["ALLOW", pattern] for pattern in described_by),
        ["ALLOW", INSPECTION_RECORD],
        ["DISALLOW", "*"],
    ]
    inspection.expected_products = [["ALLOW", "*"]]
    layout.steps = [step]
    layout.inspect = [inspection]
    layout.validate()
    return Documents(_signed(layout, key), link_name(public), _signed(link, key))


def check(layout_raw: bytes, link_raw: bytes, key: VerifyKey, now: dt.datetime) -> dict[str, str]:
    """The products (path -> sha256) of a link and layout signed by `key`, the layout in force
    at `now` and naming the key for its step; AttestationProblem otherwise."""
    layout = _payload(layout_raw, key, Layout, "the in-toto layout")
    try:
        expires = dt.datetime.fromisoformat(str(layout.expires).replace("Z", "+00:00"))
    except ValueError:
        raise AttestationProblem(
            f"the in-toto layout's expiry {layout.expires!r} is not a date"
        ) from None
    if expires <= now:
        raise AttestationProblem(f"the in-toto layout expired on {layout.expires}")
    steps = {step.name: step for step in layout.steps}
    if STEP not in steps or key.keyid not in steps[STEP].pubkeys:
        raise AttestationProblem(f"the in-toto layout does not let the key perform {STEP!r}")
    link = _payload(link_raw, key, Link, "the in-toto link")
    if link.name != STEP:
        raise AttestationProblem(f"the in-toto link is of step {link.name!r}, not {STEP!r}")
    products: dict[str, str] = {}
    for path, hashes in link.products.items():
        digest = hashes.get("sha256") if isinstance(hashes, dict) else None
        products[str(path)] = str(digest)
    return products


def _signed(signable: Any, key: SigningKey) -> bytes:
    envelope = Envelope.from_signable(signable)
    envelope.create_signature(key.signer)
    return (json.dumps(envelope.to_dict(), sort_keys=True) + "\n").encode()


def _payload(raw: bytes, key: VerifyKey, kind: type, what: str) -> Any:
    try:
        document = parse_json(raw, path=Path(what), what=what)
        metadata = Metadata.from_dict(document)
    except (SglxError, InvalidMetadata, FormatError, KeyError, TypeError, ValueError):
        raise AttestationProblem(f"{what} is not in-toto metadata") from None
    if not isinstance(metadata, Envelope):
        raise AttestationProblem(f"{what} is not a DSSE envelope")
    try:
        metadata.verify_signature(key.in_toto_dict())
    except SignatureVerificationError:
        raise AttestationProblem(f"{what} is not signed by the given key") from None
    try:
        payload = metadata.get_payload()
    except (InvalidMetadata, FormatError, KeyError, TypeError, ValueError):
        raise AttestationProblem(f"{what} does not hold a {kind.__name__}") from None
    if not isinstance(payload, kind):
        raise AttestationProblem(f"{what} holds a {type(payload).__name__}, not a {kind.__name__}")
    return payload

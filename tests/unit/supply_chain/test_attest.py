"""sglx.attest: the site's key in the formats its tools write, Sigstore bundles of in-toto
statements, and the in-toto layout and link; each signed here and read back, then damaged.

The round trips through the reviewers' own tools (cosign, in-toto-verify) run on a real bundle
in tests/integration/test_bundle_attested.py; here each reader meets what a hostile or careless
input gives it, random bytes included, and must answer with one sentence (AttestationProblem,
or an SglxError naming the file and the fix), never another exception.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from hypothesis import given, settings
from hypothesis import strategies as st
from securesystemslib.signer import CryptoSigner

from sglx.attest import in_toto_layout, sigstore_bundle, statements
from sglx.attest.keys import SigningKey, VerifyKey, load_signing_key, load_verify_key
from sglx.attest.sigstore_bundle import AttestationProblem
from sglx.attest.statements import Subject
from sglx_core.errors import SglxError

NOW = dt.datetime(2026, 12, 6, tzinfo=dt.UTC)


def pem_private(key: Any, password: bytes | None = None) -> bytes:
    encryption: serialization.KeySerializationEncryption = (
        serialization.BestAvailableEncryption(password)
        if password
        else serialization.NoEncryption()
    )
    return bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> tuple[SigningKey, VerifyKey]:
    path = tmp_path_factory.mktemp("keys") / "site.pem"
    path.write_bytes(pem_private(ec.generate_private_key(ec.SECP256R1())))
    key = load_signing_key(path)
    return key, key.public


@pytest.fixture(scope="module")
def other() -> VerifyKey:
    return fresh_key().public


def fresh_key() -> SigningKey:
    return SigningKey(CryptoSigner(ec.generate_private_key(ec.SECP256R1())))


def provenance() -> dict[str, Any]:
    build = statements.Build(
        parameters={"arch": "cpu"},
        dependencies=(statements.Dependency("lock", {"sha256": "1" * 64}),),
        builder_version={"sglx": "0.0.0"},
        invocation="x",
        started=NOW,
        finished=NOW,
    )
    return statements.provenance([Subject("bundle/a", "a" * 64)], build)


# Made once for the property tests (a key and its documents cost milliseconds each).
SIGNING = fresh_key()
SIGNED = sigstore_bundle.sign(provenance(), SIGNING)
DOCS = in_toto_layout.write({"a": "a" * 64}, SIGNING, command=["x"], described_by=[],
                            expires=NOW + dt.timedelta(days=1))  # fmt: skip


# The key, as each tool writes it.


def test_the_key_is_read_from_each_format_its_tools_write(tmp_path: Path) -> None:
    ssh = tmp_path / "ssh"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "256", "-N", "", "-f", str(ssh)],
                   check=True)  # fmt: skip
    sec1 = tmp_path / "sec1"
    subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "256", "-m", "PEM", "-N", "", "-f",
                    str(sec1)], check=True)  # fmt: skip
    pem = tmp_path / "pub.pem"
    command = ["ssh-keygen", "-e", "-m", "PKCS8", "-f", f"{ssh}.pub"]
    pem.write_bytes(subprocess.run(command, check=True, capture_output=True).stdout)
    from_openssh = load_signing_key(ssh)
    assert load_verify_key(Path(f"{ssh}.pub")).keyid == from_openssh.public.keyid
    assert load_verify_key(pem).hint == from_openssh.public.hint
    assert load_signing_key(sec1).public.keyid == load_verify_key(Path(f"{sec1}.pub")).keyid


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: pem_private(ed25519.Ed25519PrivateKey.generate()), "must be ECDSA P-256"),
        (lambda: pem_private(rsa.generate_private_key(65537, 2048)), "must be ECDSA P-256"),
        (lambda: pem_private(ec.generate_private_key(ec.SECP384R1())), "ECDSA secp384r1"),
        (lambda: pem_private(ec.generate_private_key(ec.SECP256R1()), b"pw"), "passphrase"),
        (lambda: b"-----BEGIN PRIVATE KEY-----\nnot base64\n", "not a private key"),
        (lambda: b"\x00" * 100, "not a private key"),
    ],
)
def test_a_key_no_verifier_accepts_is_refused_naming_the_fix(
    tmp_path: Path, make: Any, words: str
) -> None:
    path = tmp_path / "key"
    path.write_bytes(make())
    with pytest.raises(SglxError) as caught:
        load_signing_key(path)
    assert words in caught.value.message and caught.value.hint, caught.value.message
    assert caught.value.code == "usage"


def test_a_public_key_that_is_not_one_is_refused(tmp_path: Path) -> None:
    for data in (b"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA== x", b"garbage", b"\xff" * 70000):
        path = tmp_path / "pub"
        path.write_bytes(data)
        with pytest.raises(SglxError) as caught:
            load_verify_key(path)
        assert caught.value.hint


# Sigstore bundles.


def test_a_statement_signed_is_read_back_and_any_change_is_caught(
    site: tuple[SigningKey, VerifyKey], other: VerifyKey
) -> None:
    key, public = site
    raw = sigstore_bundle.sign(provenance(), key)
    document = json.loads(raw)
    assert document["mediaType"] == "application/vnd.dev.sigstore.bundle.v0.3+json"
    assert document["verificationMaterial"]["publicKey"] == {"hint": public.hint}
    opened = sigstore_bundle.open_statement(raw, public, statements.SLSA_PROVENANCE)
    assert statements.subjects_of(opened) == {"bundle/a": "a" * 64}
    with pytest.raises(AttestationProblem, match="signed with another key"):
        sigstore_bundle.open_statement(raw, other, statements.SLSA_PROVENANCE)
    with pytest.raises(
        AttestationProblem, match=r"not https://in-toto\.io/attestation/test-result"
    ):
        sigstore_bundle.open_statement(raw, public, statements.TEST_RESULT)
    payload = json.loads(base64.b64decode(document["dsseEnvelope"]["payload"]))
    payload["subject"][0]["digest"]["sha256"] = "b" * 64
    document["dsseEnvelope"]["payload"] = base64.b64encode(json.dumps(payload).encode()).decode()
    with pytest.raises(AttestationProblem, match="signature is not valid"):
        sigstore_bundle.open_statement(
            json.dumps(document).encode(), public, statements.SLSA_PROVENANCE
        )
    del document["verificationMaterial"]["publicKey"]["hint"]  # no hint: the signature decides
    document["dsseEnvelope"]["signatures"] = []
    with pytest.raises(AttestationProblem, match=r"not a Sigstore bundle|no signature"):
        sigstore_bundle.open_statement(
            json.dumps(document).encode(), public, statements.SLSA_PROVENANCE
        )


def test_a_scan_result_names_its_failed_checks() -> None:
    statement = statements.test_result(
        [Subject("img", "c" * 64)], passed=False, failed_tests=["required_missing libx.so"],
        configuration=[Subject("meta/arch.yaml", "d" * 64)],
    )  # fmt: skip
    assert statement["predicateType"] == statements.TEST_RESULT
    assert statement["predicate"]["result"] == "FAILED"
    assert statement["predicate"]["failedTests"] == ["required_missing libx.so"]


@settings(max_examples=80, deadline=None, database=None)
@given(st.one_of(st.binary(max_size=2000), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20).map(lambda d: json.dumps(d).encode())))  # fmt: skip
def test_any_bytes_as_a_sigstore_bundle_give_one_sentence(raw: bytes) -> None:
    with pytest.raises(AttestationProblem):
        sigstore_bundle.open_statement(raw, SIGNING.public, statements.SLSA_PROVENANCE)


@settings(max_examples=60, deadline=None, database=None)
@given(st.data())
def test_a_damaged_sigstore_bundle_gives_one_sentence(data: st.DataObject) -> None:
    raw = bytearray(SIGNED)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    with contextlib.suppress(AttestationProblem):  # a damaged hint or padding may still verify
        sigstore_bundle.open_statement(bytes(raw), SIGNING.public, statements.SLSA_PROVENANCE)


# The in-toto layout and link.


def test_the_layout_and_link_read_back_and_refuse_what_they_should(
    site: tuple[SigningKey, VerifyKey], other: VerifyKey
) -> None:
    key, public = site
    products = {"image/image.tar.000": "a" * 64, "install.sh": "b" * 64}
    expires = NOW + dt.timedelta(days=1)
    docs = in_toto_layout.write(products, key, command=["sglx", "bundle", "create"],
                                described_by=["bundle.json"], expires=expires)  # fmt: skip
    assert docs.link_name == f"bundle.{public.keyid[:8]}.link"
    assert in_toto_layout.check(docs.layout, docs.link, public, NOW) == products
    with pytest.raises(AttestationProblem, match="expired"):
        in_toto_layout.check(docs.layout, docs.link, public, NOW + dt.timedelta(days=2))
    with pytest.raises(AttestationProblem, match="not signed by the given key"):
        in_toto_layout.check(docs.layout, docs.link, other, NOW)
    with pytest.raises(AttestationProblem, match="holds a Link, not a Layout"):
        in_toto_layout.check(docs.link, docs.link, public, NOW)
    layout = json.loads(docs.layout)
    layout["payload"] = base64.b64encode(b'{"_type": "layout"}').decode()
    with pytest.raises(AttestationProblem, match="not signed by the given key"):
        in_toto_layout.check(json.dumps(layout).encode(), docs.link, public, NOW)


@settings(max_examples=60, deadline=None, database=None)
@given(st.binary(max_size=600), st.booleans())
def test_any_bytes_as_a_layout_or_link_give_one_sentence(raw: bytes, as_layout: bool) -> None:
    layout, link = (raw, DOCS.link) if as_layout else (DOCS.layout, raw)
    with pytest.raises(AttestationProblem):
        in_toto_layout.check(layout, link, SIGNING.public, NOW)

"""`bundle create --attest-key`: the attestations a site's reviewers check with their own tools.

A tiny image (labelled as `image build` labels, so the provenance has a base, a lock and a
commit to name) is bundled with one ECDSA P-256 key, made by ssh-keygen, that signs bundle.json
(ssh-keygen) and attests every file. The bundle is then checked as a reviewer would, offline
and without sglx: `cosign verify-blob-attestation` (Debian's cosign, run with no network at
all) for the two Sigstore bundles, `in-toto-verify` in the bundle folder for the layout. And as
a site would with sglx: verify and install with the site's key, which refuse a bundle whose
bundle.json and SHA256SUMS were re-made around a changed file, one attested by another key, and
one not attested at all.
"""

from __future__ import annotations

import base64
import contextlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import import_tiny_image

from sglx import __version__, image_labels
from sglx.bundle.manifest import dump, parse, render_sums, sha256_bytes

pytestmark = pytest.mark.docker

CliRunner = Callable[..., tuple[int, str, str]]
JsonRunner = Callable[..., tuple[int, dict[str, Any]]]
CHUNK = "64KiB"
SLSA = "https://slsa.dev/provenance/v1"
TEST_RESULT = "https://in-toto.io/attestation/test-result/v0.1"
LABELS = {
    image_labels.BASE_NAME: "sglx/cpu-base:bookworm",
    image_labels.BASE_DIGEST: "sha256:" + "b" * 64,
    image_labels.LOCK_DIGEST: "sha256:" + "1" * 64,
    image_labels.REVISION: "c" * 40,
}


def remove_image(docker: Any, ref: str) -> None:
    from docker.errors import ImageNotFound

    with contextlib.suppress(ImageNotFound):
        docker.images.remove(ref, force=True)


def ssh_keygen(*args: str) -> str:
    return subprocess.run(["ssh-keygen", *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """For each of `site` and `other`: the private key (SEC1 PEM, as `ssh-keygen -m PEM`
    writes it), its OpenSSH public line (`.pub`), its PEM public key (`.pem`, what cosign and
    in-toto-verify read) and an allowed-signers file (`.allowed`)."""
    folder = tmp_path_factory.mktemp("attest-keys")
    out: dict[str, Path] = {}
    for name in ("site", "other"):
        key = folder / name
        ssh_keygen("-q", "-t", "ecdsa", "-b", "256", "-m", "PEM", "-N", "", "-C", name, "-f",
                   str(key))  # fmt: skip
        pem = folder / f"{name}.pem"
        pem.write_text(ssh_keygen("-e", "-m", "PKCS8", "-f", f"{key}.pub"))
        kind, blob = (folder / f"{name}.pub").read_text().split()[:2]
        (folder / f"{name}.allowed").write_text(f"{name}@sglx {kind} {blob}\n")
        out |= {name: key, f"{name}.pub": folder / f"{name}.pub", f"{name}.pem": pem,
                f"{name}.allowed": folder / f"{name}.allowed"}  # fmt: skip
    return out


@pytest.fixture(scope="module")
def attested(
    docker: Any, run_id: str, keys: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A bundle of the tiny image, scanned, signed and attested with the site's one key."""
    from sglx.cli import main

    tag = f"sglx-test/bundle-attested:{run_id}"
    import_tiny_image(docker, tag, blob_bytes=200_000, labels=LABELS)
    out = tmp_path_factory.mktemp("attested") / "bundle"
    try:
        code = main(["bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(out),
                     "--chunk-size", CHUNK, "--sign", str(keys["site"]),
                     "--attest-key", str(keys["site"]), "-q"])  # fmt: skip
    finally:
        remove_image(docker, tag)
    assert code == 1, "the tiny image lacks what the cpu profile requires: scan findings"
    yield out
    shutil.rmtree(out.parent, ignore_errors=True)


def statement(bundle: Path, path: str) -> dict[str, Any]:
    """The in-toto statement a Sigstore bundle carries, read as a reviewer would (no sglx)."""
    envelope = json.loads((bundle / path).read_text())["dsseEnvelope"]
    return dict(json.loads(base64.b64decode(envelope["payload"])))


def cosign(bundle: Path, key: Path, attestation: str, predicate: str, blob: str) -> Any:
    """`cosign verify-blob-attestation` of `blob` in a network namespace of its own: nothing it
    does can reach past the machine, and nothing it needs is there."""
    binary = shutil.which("cosign")
    assert binary, "cosign is missing: `make setup` installs Debian sid's cosign package"
    home = bundle.parent / "cosign-home"
    home.mkdir(exist_ok=True)
    env = {"HOME": str(home), "TUF_ROOT": str(home / "tuf"), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        ["unshare", "--net", binary, "verify-blob-attestation", "--key", str(key),
         "--bundle", attestation, "--new-bundle-format", "--insecure-ignore-tlog=true",
         "--type", predicate, blob],
        cwd=bundle, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def in_toto_verify(bundle: Path, key: Path) -> Any:
    """in-toto's own verifier, from the venv the in-toto library is installed in."""
    tool = Path(sys.executable).parent / "in-toto-verify"
    return subprocess.run(
        [str(tool), "--layout", "meta/in-toto/root.layout", "--verification-keys", str(key),
         "--link-dir", "meta/in-toto"],
        cwd=bundle, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_the_reviewers_own_tools_verify_every_attestation_offline(
    attested: Path, keys: dict[str, Path], sglx_json: JsonRunner
) -> None:
    for blob in (
        "meta/sbom.cdx.json",
        "image/image.tar.000",
        "install.sh",
        "meta/scan.sigstore.json",
    ):
        proc = cosign(attested, keys["site.pem"], "meta/provenance.sigstore.json", SLSA, blob)
        assert proc.returncode == 0 and "Verified OK" in proc.stderr, (blob, proc.stderr)
    for blob in ("meta/scan.json", "meta/sbom.cdx.json"):
        proc = cosign(attested, keys["site.pem"], "meta/scan.sigstore.json", TEST_RESULT, blob)
        assert proc.returncode == 0, (blob, proc.stderr)
    proc = cosign(attested, keys["other.pem"], "meta/provenance.sigstore.json", SLSA, "install.sh")
    assert proc.returncode != 0
    for _ in range(2):  # the second run meets the first one's record of its inspection
        proc = in_toto_verify(attested, keys["site.pem"])
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert in_toto_verify(attested, keys["other.pem"]).returncode != 0
    (attested / "files.link").unlink()  # what in-toto-verify left: sglx would call it extra
    # What the provenance says, read without sglx: every file bundle.json lists but itself and
    # the in-toto documents, and the base, lock and commit the image's labels name.
    provenance = statement(attested, "meta/provenance.sigstore.json")
    listed = {
        f["path"]: f["sha256"] for f in json.loads((attested / "bundle.json").read_text())["files"]
    }
    subjects = {s["name"]: s["digest"]["sha256"] for s in provenance["subject"]}
    assert subjects == {p: d for p, d in listed.items() if not p.startswith("meta/in-toto/")
                        and p != "meta/provenance.sigstore.json"}  # fmt: skip
    definition = provenance["predicate"]["buildDefinition"]
    digests = [d["digest"] for d in definition["resolvedDependencies"]]
    assert {"sha256": "b" * 64} in digests and {"sha256": "1" * 64} in digests
    assert {"gitCommit": "c" * 40} in digests
    assert definition["externalParameters"]["arch"] == "cpu"
    assert provenance["predicate"]["runDetails"]["builder"]["version"] == {"sglx": __version__}
    scan = statement(attested, "meta/scan.sigstore.json")
    report = json.loads((attested / "meta" / "scan.json").read_text())
    assert scan["predicate"]["result"] == "FAILED"
    assert len(scan["predicate"]["failedTests"]) == len(
        {(f["code"], f.get("path", "")) for f in report["findings"]}
    )
    image = json.loads((attested / "bundle.json").read_text())["image"]
    assert {"name": image["ref"], "digest": {"sha256": image["id"].split(":")[1]}} in scan[
        "subject"
    ]
    # sglx checks the same, and the one key also signed bundle.json with ssh-keygen.
    code, envelope = sglx_json(
        "bundle", "verify", str(attested), "--no-scan", "--attest-key", str(keys["site.pub"]),
        "--allowed-signers", str(keys["site.allowed"]),
    )  # fmt: skip
    assert (code, envelope["findings"]) == (0, []), envelope
    data = envelope["data"]
    assert data["attestations_checked"] and data["signature_checked"]
    assert data["attested"] == ["meta/in-toto/root.layout", "meta/provenance.sigstore.json",
                                "meta/scan.sigstore.json"]  # fmt: skip
    code, inspected = sglx_json("bundle", "inspect", str(attested))
    assert inspected["data"]["attestations"] == ["SLSA provenance", "scan result", "in-toto layout"]


def remake_around(bundle: Path, path: str, data: bytes) -> None:
    """What someone without the key can do: change a file, then write bundle.json and
    SHA256SUMS to match it and drop the ssh signature."""
    (bundle / path).write_bytes(data)
    manifest = parse((bundle / "bundle.json").read_bytes(), "bundle.json")
    files = tuple(
        e.model_copy(update={"size": len(data), "sha256": sha256_bytes(data)}) if e.path == path
        else e
        for e in manifest.files
    )  # fmt: skip
    changed = manifest.model_copy(update={"files": files})
    raw = dump(changed)
    (bundle / "bundle.json").write_bytes(raw)
    (bundle / "bundle.json.sig").unlink()
    (bundle / "SHA256SUMS").write_text(render_sums(changed, sha256_bytes(raw), None))


def test_a_file_changed_under_a_remade_bundle_json_fails_every_verifier(
    attested: Path, keys: dict[str, Path], sglx_json: JsonRunner, tmp_path: Path
) -> None:
    copy = tmp_path / "bundle"
    shutil.copytree(attested, copy)
    remake_around(copy, "meta/run.json", b'{"image": "attacker/image"}\n')
    code, envelope = sglx_json("bundle", "verify", str(copy), "--no-scan")
    assert (code, envelope["findings"]) == (0, []), "without a key, the copy is self-consistent"
    code, envelope = sglx_json(
        "bundle", "verify", str(copy), "--no-scan", "--attest-key", str(keys["site.pem"])
    )
    assert code == 1
    found = {(f["code"], f["path"]): f["message"] for f in envelope["findings"]}
    assert set(found) == {("bundle_attestation", "meta/provenance.sigstore.json"),
                          ("bundle_attestation", "meta/in-toto")}, found  # fmt: skip
    assert all("of another sha256: meta/run.json" in m for m in found.values()), found
    assert in_toto_verify(copy, keys["site.pem"]).returncode != 0
    proc = cosign(copy, keys["site.pem"], "meta/provenance.sigstore.json", SLSA, "meta/run.json")
    assert proc.returncode != 0 and "digests do not match" in proc.stderr


def test_another_key_no_attestations_and_a_bad_key_are_each_refused(
    attested: Path,
    keys: dict[str, Path],
    sglx: CliRunner,
    sglx_json: JsonRunner,
    docker: Any,
    run_id: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, envelope = sglx_json(
        "bundle", "verify", str(attested), "--no-scan", "--attest-key", str(keys["other.pub"])
    )
    assert code == 1
    messages = " ".join(f["message"] for f in envelope["findings"])
    assert "signed with another key" in messages and "link was made by another key" in messages
    # A bundle made without --attest-key, where the site has a key ($SGLX_ATTEST_KEY):
    # verify and install refuse it, and install installs nothing.
    tag = f"sglx-test/bundle-unattested:{run_id}"
    import_tiny_image(docker, tag, blob_bytes=1000)
    plain = tmp_path / "plain"
    try:
        args = ["bundle", "create", "--arch", "cpu", "--image", tag, "--chunk-size", CHUNK]
        code, _, _ = sglx(*args, "--out", str(plain), "--no-scan", "-q")
        assert code == 0
        # A key that cosign and in-toto cannot all verify is refused before anything is saved.
        ssh_keygen("-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "ed"))
        code, out, err = sglx(*args, "--out", str(tmp_path / "never"),
                              "--attest-key", str(tmp_path / "ed"))  # fmt: skip
        assert code == 2 and "must be ECDSA P-256" in out + err and "Traceback" not in out + err
        assert not (tmp_path / "never").exists()
    finally:
        remove_image(docker, tag)
    monkeypatch.setenv("SGLX_ATTEST_KEY", str(keys["site.pub"]))
    code, envelope = sglx_json("bundle", "verify", str(plain), "--no-scan")
    assert code == 1
    assert [f["code"] for f in envelope["findings"]] == ["bundle_unattested"]
    assert "sglx bundle create --attest-key" in envelope["findings"][0]["hint"]
    code, out, _ = sglx("bundle", "install", "--no-scan", str(plain), "--state",
                        str(tmp_path / "state"), "-q")  # fmt: skip
    assert code == 1 and "nothing was installed" in out


@pytest.fixture(scope="module")
def signed_weights(tmp_path_factory: pytest.TempPathFactory, keys: dict[str, Path]) -> Path:
    """The demo model converted and signed (OMS, `sglx weights sign`) with the site's key."""
    from sglx.cli import main

    folder = tmp_path_factory.mktemp("weights")
    assert main(["model", "demo", str(folder / "demo"), "-q"]) == 0
    assert main(["weights", "convert", str(folder / "demo"), str(folder / "demo-cpu"), "-q"]) == 0
    assert (
        main(["weights", "sign", str(folder / "demo-cpu"), "--key", str(keys["site"]), "-q"]) == 0
    )
    return folder / "demo-cpu"


def test_signed_weights_travel_in_the_bundle_and_only_signed_ones_are_admitted(
    docker: Any, run_id: str, keys: dict[str, Path], signed_weights: Path, sglx: CliRunner,
    tmp_path: Path,
) -> None:  # fmt: skip
    tag = f"sglx-test/bundle-weights-signed:{run_id}"
    image_id = import_tiny_image(docker, tag, blob_bytes=1000)
    unsigned_weights = tmp_path / "weights-unsigned" / "demo-cpu"
    shutil.copytree(signed_weights, unsigned_weights)
    (unsigned_weights / "sglx-weights.sig").unlink()
    try:
        for name, weights in (("signed", signed_weights), ("unsigned", unsigned_weights)):
            code, _, err = sglx("bundle", "create", "--arch", "cpu", "--image", tag, "--out",
                                str(tmp_path / name), "--chunk-size", CHUNK, "--no-scan",
                                "--weights-outside", str(weights), "-q")  # fmt: skip
            assert code == 0, err
    finally:
        remove_image(docker, tag)
    listed = json.loads((tmp_path / "signed" / "bundle.json").read_text())["files"]
    assert "weights/demo-cpu/sglx-weights.sig" in {f["path"] for f in listed}

    def install(bundle: str, signer: str, into: str) -> tuple[int, str]:
        code, out, err = sglx("bundle", "install", "--no-scan", str(tmp_path / bundle),
                              "--state", str(tmp_path / f"state-{into}"), "--weights-dir",
                              str(tmp_path / into),
                              "--weights-signer", str(keys[signer]))  # fmt: skip
        return code, out + err

    try:
        for bundle, signer, said in (
            ("signed", "other.pem", "not admitted to the store: this site requires them signed"),
            ("unsigned", "site.pem", "carries no sglx-weights.sig"),
        ):
            code, out = install(bundle, signer, f"refused-{bundle}")
            assert code == 2 and said in out and "nothing was written" in out, out
            assert "Traceback" not in out and not (tmp_path / f"refused-{bundle}").exists()
            assert image_id not in [i.id for i in docker.images.list(all=True)]
        code, out = install("signed", "site.pem", "placed")
        assert code == 0, out
        placed = tmp_path / "placed" / "demo-cpu"
        tool = Path(sys.executable).with_name("model_signing")  # the reviewer's own verifier
        check = subprocess.run(
            [str(tool), "verify", "key", "--signature", str(placed / "sglx-weights.sig"),
             "--public_key", str(keys["site.pem"]), str(placed)],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert check.returncode == 0, check.stdout + check.stderr
    finally:
        remove_image(docker, image_id)

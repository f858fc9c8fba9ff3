"""Names and sizes of a bundle folder, in one place so create, verify, install and install.sh
agree on them.

    bundle.json            the manifest (every other file, with size and sha256)
    bundle.json.sig        ssh-keygen signature of bundle.json (optional)
    SHA256SUMS             `sha256sum -c` list of every file, bundle.json and the signature too
    install.sh             POSIX sh installer (coreutils and docker only)
    image/image.tar.NNN    the `docker save` archive, split into chunks
    meta/scan.json         `sglx scan --json` of the image
    meta/versions.json     sglang, plugin, runtime, kernels, base and weights digest
    meta/labels.json       the image labels
    meta/arch.yaml         the resolved profile baked into the image (its io.sglx.profile.digest)
    meta/run.json          the run spec (sglx.run_spec): how a host runs the server container
    meta/provenance.sigstore.json  SLSA provenance of every file, a Sigstore bundle (--attest-key)
    meta/scan.sigstore.json        the scan's result as an in-toto test result (--attest-key)
    meta/in-toto/          root.layout and bundle.<keyid>.link, for in-toto-verify (--attest-key)
    wheelhouse/            the arch's lock and its wheels (with --wheelhouse)
    weights/NAME/          converted weights and their manifest (with --weights-outside)
    tuned/                 a tuned set: GEMM tables and their manifest (with --tuned)
    ansible/               playbooks, roles, example inventory with the arch's rendered vars
    ansible/host-checks/   the host-check suite (hostchecks)
    ansible/control-node.txt  the control node's hash-pinned lock (bundles/locks/ansible.txt)
    ansible/wheels/        its wheels (with --control-wheels)
"""

from __future__ import annotations

import re

from sglx_core import paths
from sglx_core.errors import SglxError
from sglx_core.sizes import EXAMPLES, parse_size

MANIFEST = "bundle.json"
SIGNATURE = "bundle.json.sig"
SUMS = "SHA256SUMS"
INSTALL_SH = "install.sh"
IMAGE_ARCHIVE = "image/image.tar"
SCAN_REPORT = "meta/scan.json"
SBOM = "meta/sbom.cdx.json"  # CycloneDX 1.6 JSON (sglx.sbom)
VEX = "meta/vex.json"  # VEX statements the bundle carries (bundle create --vex)
# Attestations (sglx.bundle.attestations), signed with the site's key: listed in bundle.json.
PROVENANCE = "meta/provenance.sigstore.json"
SCAN_ATTESTATION = "meta/scan.sigstore.json"
IN_TOTO = "meta/in-toto"
IN_TOTO_LAYOUT = "meta/in-toto/root.layout"
IN_TOTO_LINK = re.compile(r"meta/in-toto/bundle\.[0-9a-f]{8}\.link")
ATTESTATIONS = {
    PROVENANCE: "SLSA provenance",
    SCAN_ATTESTATION: "scan result",
    IN_TOTO_LAYOUT: "in-toto layout",
}
VERSIONS = "meta/versions.json"
LABELS = "meta/labels.json"
PROFILE = "meta/arch.yaml"
RUN_SPEC = "meta/run.json"
WHEELHOUSE = "wheelhouse"
WHEEL_LOCK = "wheelhouse/requirements.lock"
WEIGHTS = "weights"
TUNED = "tuned"
ANSIBLE = "ansible"
ANSIBLE_HOST_CHECKS = paths.BUNDLE_HOST_CHECKS
ANSIBLE_LOCK = "ansible/control-node.txt"
ANSIBLE_WHEELS = "ansible/wheels"
# Files that describe the bundle and are checked by rendering, not by a manifest entry.
METADATA = (MANIFEST, SIGNATURE, SUMS)

DEFAULT_CHUNK_SIZE = 1 << 30
MIN_CHUNK_SIZE = 1 << 10
SIGN_NAMESPACE = "sglx-bundle"
# Bounds on what is read from a bundle before it is trusted.
MAX_MANIFEST_BYTES = 16 << 20
MAX_SIGNATURE_BYTES = 16 << 10  # an ssh-keygen signature is under 1 KiB
MAX_RECORD_BYTES = 64 << 20  # the install record: a few hundred bytes per verified file
MAX_META_BYTES = 16 << 20  # meta/*.json
MAX_SBOM_BYTES = 256 << 20  # a ROCm image's SBOM: some thousand components, a few MB
MAX_ATTESTATION_BYTES = 64 << 20  # one subject per file: MAX_FILES paths, base64 in JSON
MAX_FILES = 100_000
MAX_LAYERS = 1_000  # an image's layers (overlay2 stacks at most 128)
MAX_PATH_CHARS = 400
MAX_PATH_DEPTH = 16
# Bounds on the Ansible content a bundle carries (ansible/, host checks, lock; not the wheels):
# it is a few hundred KiB, so more means something that does not belong (a venv, a cache).
MAX_ANSIBLE_FILES = 2_000
MAX_ANSIBLE_BYTES = 50 << 20


def chunk_name(index: int) -> str:
    """Zero-padded so that a shell glob and `sort` list chunks in order."""
    return f"{IMAGE_ARCHIVE}.{index:03d}"


def parse_chunk_size(text: str) -> int:
    """'1GiB' -> 1073741824, '64MB' -> 64000000 (sglx_core.sizes); at least 1 KiB."""
    size = parse_size(text)
    if size is None:
        raise SglxError(
            f"--chunk-size '{text}' is not a size",
            hint=f"use {EXAMPLES}; 1GiB is the default",
            code="usage",
        )
    if size < MIN_CHUNK_SIZE:
        raise SglxError(
            f"--chunk-size '{text}' is {size} bytes, below the 1 KiB minimum",
            hint="chunks are copied and re-checked one by one: use e.g. 1GiB or 700MB",
            code="usage",
        )
    return size


def shown(text: str) -> str:
    """A name or value read from a bundle, as a report shows it: unchanged when it is plain
    (letters, digits, `._+@=/:-`), else quoted with its control characters escaped, so a
    newline or an escape sequence in it cannot forge a line of the report."""
    return text if _PLAIN.fullmatch(text) else repr(text)


_PLAIN = re.compile(r"[A-Za-z0-9._+@=/:-]+", re.ASCII)

"""`sglx bundle`: create, verify, install and inspect bundles (the parser and its handlers; the
verify step itself is `verify_command`).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from sglx.audit.report import LEVELS
from sglx.cli_shared import EPILOG, MAX_WORKERS, Subparsers, rendered_file_options, workers
from sglx.commands.scan import ScanInput, read_bundles_with
from sglx_core.errors import SglxError
from sglx_core.report import Result

if TYPE_CHECKING:
    from sglx.bundle.audit import AuditPolicy


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
    bundle = sub.add_parser(
        "bundle",
        help="create, verify, install and inspect air-gapped bundles",
        description="A bundle is one folder (or one tar of it) carrying everything one arch "
        "serves with: the image in sha256-checked chunks, bundle.json, SHA256SUMS, install.sh, "
        "the scan report and versions, optionally wheels, weights and a signature. "
        "Reference: docs/reference/bundle.md.",
        epilog=EPILOG,
    )
    verbs = bundle.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser(
        "create",
        parents=[common, arch_parent],
        help="write a bundle folder for an arch (staged, renamed when complete)",
        description="Stream `docker save` of the image into chunks hashed as they are written, "
        "scan the image, write the manifest, SHA256SUMS and install.sh, sign bundle.json "
        "with --sign. Exit 1 when the image scan has findings (the bundle is still written).",
    )
    p.add_argument("--image", metavar="REF", help="image (default: sglx/<arch>:latest)")
    p.add_argument(
        "--out", type=Path, metavar="DIR", help="new bundle folder (default: sglx-bundle-ARCH-ID)"
    )
    p.add_argument(
        "--chunk-size", default="1GiB", metavar="SIZE", help="image chunk size (default 1GiB)"
    )
    p.add_argument("--sign", type=Path, metavar="KEY", help="sign bundle.json with this ssh key")
    p.add_argument(
        "--attest-key",
        type=Path,
        metavar="KEY",
        help="attest every file with this ECDSA P-256 key (PEM or OpenSSH): SLSA provenance and "
        "the scan's result as Sigstore bundles, and an in-toto layout (docs/reference/trust.md)",
    )
    p.add_argument("--tar", action="store_true", help="also write DIR.tar (uncompressed)")
    p.add_argument(
        "--wheelhouse",
        type=Path,
        metavar="DIR",
        help="carry the arch lock's wheels from DIR, for venv installs (default: not carried)",
    )
    p.add_argument(
        "--weights-outside",
        type=Path,
        metavar="DIR",
        help="carry converted weights (sglx weights convert output) beside the image (an "
        "image built with its weights outside it takes them from its weights store by default)",
    )
    p.add_argument(
        "--tuned",
        type=Path,
        metavar="DIR",
        help="carry a tuned set (`sglx tuned capture`): the hosts' servers read its GEMM tables "
        "(checked for the arch here and again on every host)",
    )
    p.add_argument(
        "--models-root",
        type=Path,
        metavar="DIR",
        help="the weights store an image built with its weights outside it was built into "
        "(default: $SGLX_MODELS_ROOT or the profile's weights.store, /var/lib/sglx/models)",
    )
    p.add_argument(
        "--control-wheels",
        type=Path,
        metavar="DIR",
        help="carry the Ansible control node's wheels (bundles/locks/ansible.txt) from DIR in "
        "ansible/wheels (default: the lock only)",
    )
    p.add_argument("--no-scan", action="store_true", help="do not scan the image")
    p.add_argument(
        "--vex",
        type=Path,
        metavar="FILE",
        help="carry VEX statements (OpenVEX or CycloneDX VEX) at meta/vex.json, under the "
        "signature: `sglx bundle audit` applies them",
    )
    p.add_argument(
        "--since",
        type=Path,
        metavar="PREVIOUS",
        help="write a delta: carry only the layers the image of PREVIOUS (a bundle folder or "
        "its bundle.json) lacks; a site installs PREVIOUS first",
    )
    p.add_argument(
        "--exclude-base",
        action="store_true",
        help="leave out the layers of the image's base (named by its labels, else the profile's "
        "base.ref); a site loads that base first with `sglx base load`",
    )
    p.set_defaults(func=_cmd_bundle_create)

    signing = argparse.ArgumentParser(add_help=False)
    signing.add_argument(
        "--allowed-signers", type=Path, metavar="FILE", help="check the signature against FILE"
    )
    signing.add_argument("--identity", metavar="ID", help="the signer identity to require")
    signing.add_argument(
        "--attest-key",
        type=Path,
        metavar="PUB",
        help="require attestations made with this public key (PEM or an OpenSSH line; "
        "default: $SGLX_ATTEST_KEY, else /etc/sglx/attest.pub when present)",
    )
    signing.add_argument(
        "--require-signature", action="store_true", help="refuse an unsigned bundle"
    )
    signing.add_argument(
        "--jobs",
        type=workers,
        metavar="N",
        help=f"hashing threads (default: the CPUs, at most {MAX_WORKERS})",
    )

    p = verbs.add_parser(
        "verify",
        parents=[common, signing],
        help="check every file, the signature and the image's dependencies, offline",
        description="Every size and sha256, no missing or extra file, SHA256SUMS against "
        "bundle.json, the signature when asked, then the dependency scan of the image archive "
        "with the arch's rules. Exit 1 on findings, each naming the file or chunk to re-copy.",
    )
    p.add_argument("bundle", type=Path, metavar="DIR", help="bundle folder, or its .tar")
    p.add_argument("--no-scan", action="store_true", help="skip the dependency scan")
    p.add_argument(
        "--audit-db",
        type=Path,
        metavar="PATH",
        help="also audit the bundle's SBOM against this OSV database, offline (sglx bundle audit)",
    )
    p.add_argument(
        "--audit-vex",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="the site's VEX statements for the audit (OpenVEX or CycloneDX VEX); repeatable",
    )
    p.add_argument(
        "--audit-fail-on",
        choices=LEVELS,
        metavar="LEVEL",
        help="make an unsuppressed advisory of this severity or above a finding (exit 1); "
        "default: the audit is reported only",
    )
    p.add_argument(
        "--with",
        dest="parents",
        type=Path,
        action="append",
        default=[],
        metavar="PARENT",
        help="for a delta: check that PARENT (a bundle folder or its bundle.json) is the bundle "
        "it names and holds every layer it takes from it; repeat for a chain of deltas",
    )
    p.set_defaults(func=_cmd_bundle_verify)

    p = verbs.add_parser(
        "install",
        parents=[common, signing],
        help="verify, load the image, install wheels, place weights (resumable)",
        description="Verifies first; skips the load when the engine has the image id; checks "
        "free space before writing. The record of verified work lives in --state, so a re-run "
        "redoes nothing done; --full redoes everything.",
    )
    p.add_argument("bundle", type=Path, metavar="DIR", help="bundle folder, or its .tar")
    p.add_argument("--venv", type=Path, metavar="PATH", help="install the wheelhouse here")
    p.add_argument("--weights-dir", type=Path, metavar="PATH", help="place external weights here")
    p.add_argument(
        "--state",
        type=Path,
        metavar="DIR",
        help="install record folder, shared with install.sh and the bundle_install role "
        "(default: $SGLX_STATE_DIR or /var/lib/sglx/bundles)",
    )
    p.add_argument("--full", action="store_true", help="redo every step, ignore the record")
    p.add_argument(
        "--jit-root",
        type=Path,
        metavar="DIR",
        help="where the node-local JIT cache folders live, one per image id (default: "
        "$SGLX_JIT_ROOT or the profile's container.jit_cache.host_root, /var/cache/sglx/jit)",
    )
    p.add_argument(
        "--models-root",
        type=Path,
        metavar="DIR",
        help="the weights store: weights outside the image are placed and checked in "
        "DIR/<digest hex> and mounted from there (default: $SGLX_MODELS_ROOT or the profile's "
        "weights.store, /var/lib/sglx/models); --weights-dir places them by name instead",
    )
    p.add_argument(
        "--replace-weights",
        action="store_true",
        help="replace a weights-store entry that holds other bytes than the bundle's (never "
        "done unasked: every image that mounts the entry would serve them); the bundle's "
        "bytes are checked first",
    )
    p.add_argument(
        "--weights-signer",
        type=Path,
        metavar="PUB",
        help="admit weights into the store only with a valid OMS signature by this key (PEM); "
        "default: $SGLX_WEIGHTS_SIGNER, else /etc/sglx/weights_signer.pub when present",
    )
    p.add_argument(
        "--no-scan",
        action="store_true",
        help="install a bundle that carries no scan report (made with --no-scan), or one whose "
        "report has findings: without it, either is a finding and nothing is installed",
    )
    p.add_argument(
        "--quadlet",
        type=Path,
        metavar="DIR",
        help="also write the server's start as a podman Quadlet unit, DIR/sglx-ARCH.container "
        "(rootful: /etc/containers/systemd; then systemctl daemon-reload and systemctl start "
        "sglx-ARCH)",
    )
    p.set_defaults(func=_cmd_bundle_install)

    p = verbs.add_parser(
        "audit",
        parents=[common],
        help="match the bundle's SBOM against an OSV database, offline, with VEX statements",
        description="Reads the bundle's SBOM (meta/sbom.cdx.json, checked against bundle.json) "
        "and matches its Python distributions and Debian packages against the OSV advisories "
        "under --db (a folder of *.json, or OSV's per-ecosystem all.zip exports), by OSV's "
        "range semantics and each ecosystem's version ordering. Never contacts a network. "
        "VEX statements (OpenVEX or CycloneDX VEX: the bundle's meta/vex.json and --vex FILEs) "
        "mark advisories not_affected or fixed; the report shows them as such. Exit 1 only "
        "with --fail-on, when an advisory at or above that severity affects a component and "
        "no statement covers it. Reference: docs/reference/audit.md.",
        epilog=EPILOG,
    )
    p.add_argument("bundle", type=Path, metavar="DIR", help="bundle folder or its bundle.json")
    p.add_argument(
        "--db",
        type=Path,
        required=True,
        metavar="PATH",
        help="the OSV database the site carries in: a folder of advisories or all.zip exports",
    )
    p.add_argument(
        "--vex",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help="VEX statements of the site (OpenVEX or CycloneDX VEX); repeatable",
    )
    p.add_argument(
        "--fail-on",
        choices=LEVELS,
        metavar="LEVEL",
        help=f"fail (exit 1) on an unsuppressed advisory of this severity or above "
        f"({', '.join(LEVELS)}; unknown severities count as high); default: report only",
    )
    p.set_defaults(func=_cmd_bundle_audit)

    p = verbs.add_parser(
        "sbom",
        parents=[common],
        help="write the bundle's SBOM, as CycloneDX 1.6 or SPDX 2.3 JSON",
        description="Reads the bundle's SBOM (meta/sbom.cdx.json, checked against bundle.json) "
        "and writes it as it is (--format cyclonedx) or converted to SPDX 2.3 with the SPDX "
        "project's spdx-tools, validated (--format spdx). Reference: docs/reference/scan.md.",
    )
    p.add_argument("bundle", type=Path, metavar="DIR", help="bundle folder or its bundle.json")
    p.add_argument("--format", choices=("cyclonedx", "spdx"), default="cyclonedx")
    p.add_argument(
        "--out", type=Path, required=True, metavar="FILE", help="where to write it (not '-')"
    )
    p.set_defaults(func=_cmd_bundle_sbom)

    p = verbs.add_parser(
        "schema",
        parents=[common],
        help="print (or write) the JSON Schema of bundle.json",
        description="The JSON Schema (2020-12) of the manifest, generated from the models "
        "`sglx bundle verify` reads it with, for a site's own tools (bundles/bundle.schema.json; "
        "docs/reference/bundle.md). --check compares --out with what sglx renders and exits 1 "
        "when it is stale.",
    )
    rendered_file_options(p, "the schema", _cmd_bundle_schema)

    p = verbs.add_parser(
        "inspect",
        parents=[common],
        help="show a bundle's image layers: sizes, carried or taken from the parent or base",
        description="Reads bundle.json (and, for a bundle made before it recorded layers, the "
        "image archive's config): the image, its layers bottom first with their sizes, which "
        "the archive carries and which a delta takes from its parent bundle. Checks nothing: "
        "`sglx bundle verify` does.",
    )
    p.add_argument(
        "bundle", type=Path, metavar="DIR", help="bundle folder, its bundle.json or .tar"
    )
    p.set_defaults(func=_cmd_bundle_inspect)
    # `sglx scan --bundle DIR`: the scan reads a generic chunked archive; which chunks and
    # wheels a bundle folder holds is this group's to say.
    read_bundles_with(sub, _bundle_archive)


def _cmd_bundle_schema(args: argparse.Namespace) -> Result:
    from sglx.bundle.schema import bundle_schema

    return bundle_schema(args.out, args.check)


def _bundle_archive(bundle: Path) -> ScanInput:
    from sglx.bundle.scan_target import bundle_scan_input

    archive, rules, image = bundle_scan_input(bundle)
    return ScanInput(archive, rules, image.ref, image.image_id, image.labels)


def _bundle_jobs(args: argparse.Namespace) -> int:
    from sglx_core.processes import default_jobs

    return int(args.jobs or min(default_jobs(), MAX_WORKERS))


def _cmd_bundle_create(args: argparse.Namespace) -> Result:
    from sglx.bundle.create import CreateOptions, create_bundle
    from sglx.bundle.layout import parse_chunk_size
    from sglx.progress import Progress
    from sglx_core.profile import load_profile

    options = CreateOptions(
        image=args.image,
        out=args.out,
        chunk_size=parse_chunk_size(args.chunk_size),
        sign_key=args.sign,
        as_tar=args.tar,
        wheelhouse=args.wheelhouse,
        weights_outside=args.weights_outside,
        models_root=args.models_root,
        scan=not args.no_scan,
        control_wheels=args.control_wheels,
        since=args.since,
        exclude_base=args.exclude_base,
        tuned=args.tuned,
        vex=args.vex,
        attest_key=args.attest_key,
    )
    return create_bundle(
        load_profile(args.arch), options, Progress("bundle create", quiet=args.quiet)
    )


def _cmd_bundle_verify(args: argparse.Namespace) -> Result:
    from sglx.bundle.verify import SignaturePolicy
    from sglx.bundle.verify_command import verify_bundle
    from sglx.progress import Progress

    return verify_bundle(
        args.bundle,
        signature=SignaturePolicy(
            args.allowed_signers, args.identity, args.require_signature, args.attest_key
        ),
        scan=not args.no_scan,
        jobs=_bundle_jobs(args),
        progress=Progress("bundle verify", quiet=args.quiet),
        parents=args.parents,
        audit=_audit_policy(args),
    )


def _audit_policy(args: argparse.Namespace) -> AuditPolicy | None:
    from sglx.bundle.audit import AuditPolicy

    if args.audit_db is None:
        if args.audit_fail_on or args.audit_vex:
            raise SglxError(
                "--audit-fail-on and --audit-vex need --audit-db: the OSV database to audit with",
                hint="pass --audit-db PATH (a folder of OSV advisories or OSV's all.zip exports)",
                code="usage",
            )
        return None
    return AuditPolicy(args.audit_db, tuple(args.audit_vex), args.audit_fail_on)


def _cmd_bundle_audit(args: argparse.Namespace) -> Result:
    from sglx.bundle.audit import audit_bundle
    from sglx.progress import Progress

    return audit_bundle(args.bundle, args.db, args.vex, args.fail_on,
                        Progress("bundle audit", quiet=args.quiet))  # fmt: skip


def _cmd_bundle_sbom(args: argparse.Namespace) -> Result:
    from sglx.bundle.sbom_export import export_sbom

    return export_sbom(args.bundle, args.format, args.out)


def _cmd_bundle_inspect(args: argparse.Namespace) -> Result:
    from sglx.bundle.inspect import inspect_bundle
    from sglx.progress import Progress

    return inspect_bundle(args.bundle, Progress("bundle inspect", quiet=args.quiet))


def _cmd_bundle_install(args: argparse.Namespace) -> Result:
    from sglx.bundle.install import InstallOptions, install_bundle
    from sglx.bundle.record import default_state
    from sglx.bundle.verify import SignaturePolicy
    from sglx.progress import Progress

    options = InstallOptions(
        state=args.state or default_state(),
        venv=args.venv,
        weights_dir=args.weights_dir,
        full=args.full,
        signature=SignaturePolicy(
            args.allowed_signers, args.identity, args.require_signature, args.attest_key
        ),
        jobs=_bundle_jobs(args),
        jit_root=args.jit_root,
        models_root=args.models_root,
        replace_weights=args.replace_weights,
        no_scan=args.no_scan,
        weights_signer=args.weights_signer,
        quadlet=args.quadlet,
    )
    return install_bundle(args.bundle, options, Progress("bundle install", quiet=args.quiet))

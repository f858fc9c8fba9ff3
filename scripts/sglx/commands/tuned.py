"""`sglx tuned`: check and capture tuned GEMM configurations (sglx_core/tuned.py).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
import io
import socket
import tarfile
import tempfile
from pathlib import Path

from sglx import __version__
from sglx.cli_shared import EPILOG, Subparsers
from sglx.engine import docker_client
from sglx_core import tuned
from sglx_core.errors import SglxError
from sglx_core.profile import Profile, load_profile
from sglx_core.report import Finding, Result, Table
from sglx_core.untrusted import is_plain_name, tar_member_bytes


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
    group = sub.add_parser(
        "tuned",
        help="check and capture tuned GEMM configurations (AITER, TunableOp, hipBLASLt)",
        description="Tuned sets: the tables a host's tuning wrote, with a manifest, carried in "
        "a bundle (`sglx bundle create --tuned`) to every host of the arch "
        "(docs/reference/tuned.md).",
        epilog=EPILOG,
    )
    verbs = group.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "check",
        parents=[common, arch_parent],
        help="check a tuned set, or a folder of tuned files, against an arch",
        description="Read every file (bounded), parse it, and check that it belongs to the "
        "arch: AITER rows of its gfx and compute-unit counts, TunableOp and hipBLASLt "
        "version lines. A set with a manifest is matched against it file by file. Exit 1 "
        "names each problem.",
    )
    p.add_argument("folder", type=Path, metavar="DIR", help="the tuned set or folder")
    p.set_defaults(func=_cmd_check)
    p = verbs.add_parser(
        "capture",
        parents=[common, arch_parent],
        help="capture a host's tuned files into a new tuned set",
        description="Copy the tuned files a tuning run wrote (a folder, or the profile's "
        "tuning.capture_from folder of a running server container) into a new set with a "
        "manifest: hashes, the facts tying each file to its hardware and software, and where "
        "it came from. Other files there are left behind and named.",
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--from", dest="source", type=Path, metavar="DIR", help="a folder")
    source.add_argument("--container", metavar="NAME", help="a running server container")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the new set's folder")
    p.add_argument("--host", default=socket.gethostname(), help="the tuned host's name")
    p.set_defaults(func=_cmd_capture)


def _cmd_check(args: argparse.Namespace) -> Result:
    profile = load_profile(args.arch)
    folder: Path = args.folder
    findings: list[Finding] = []
    rows: list[tuple[str, ...]] = []
    digest = None
    try:
        if (folder / tuned.MANIFEST).exists():
            tuned_set = tuned.load(folder, profile)
            records = list(tuned_set.manifest.files)
            digest = tuned_set.digest
        else:
            records = []
            for path in sorted(folder.iterdir()):
                try:
                    records.append(tuned.check_file(path, profile))
                except SglxError as exc:
                    findings.append(Finding(exc.code, exc.message, hint=exc.hint))
    except SglxError as exc:
        findings.append(Finding(exc.code, exc.message, hint=exc.hint))
        records = []
    for record in records:
        rows.append((record.name, record.rule, str(record.rows), tuned.describe(record)))
    return Result(
        command=("tuned", "check"),
        data={
            "folder": str(folder),
            "arch": profile.arch,
            "digest": digest,
            "files": [r.model_dump(mode="json") for r in records],
        },
        findings=tuple(findings),
        tables=(Table(("file", "kind", "rows", "tuned for"), tuple(rows)),) if rows else (),
        lines=() if findings else (f"{len(records)} tuned file(s) fit {profile.arch}",),
    )


def _cmd_capture(args: argparse.Namespace) -> Result:
    profile = load_profile(args.arch)
    out: Path = args.out
    if out.exists():
        raise SglxError(
            f"--out {out} exists; a tuned set is written to a new folder",
            hint="name a new folder (or remove the old set first)",
            code="usage",
        )
    with tempfile.TemporaryDirectory(prefix="sglx-tuned-") as staging:
        if args.container:
            source = Path(staging) / "copied"
            _copy_from_container(args.container, profile, source)
            where = f"container {args.container}:{profile.tuning.capture_from}"
        else:
            source, where = args.source, str(args.source)
        tuned_set, left = tuned.capture(
            source, out, profile, captured_from=where, host=args.host, sglx=__version__
        )
    rows = tuple((r.name, r.rule, str(r.rows), tuned.describe(r)) for r in tuned_set.manifest.files)
    lines = [f"tuned set {tuned_set.digest} ({len(rows)} files) written to {out}"]
    if left:
        lines.append(f"left behind (no tuned file of {profile.arch}): {', '.join(left)}")
    return Result(
        command=("tuned", "capture"),
        data={**tuned.to_json(tuned_set), "folder": str(out), "left_behind": left},
        tables=(Table(("file", "kind", "rows", "tuned for"), rows),),
        lines=tuple(lines),
    )


def _copy_from_container(name: str, profile: Profile, dest: Path) -> None:
    """The regular files directly in the profile's capture folder of container `name`, copied
    to the new folder `dest`: names and sizes bounded, links and nested folders left out."""
    from docker.errors import DockerException, NotFound

    folder = profile.tuning.capture_from
    if folder is None:
        raise SglxError(
            f"the {profile.arch} profile names no folder tuning runs write to",
            hint="capture from a folder with --from DIR",
            code="usage",
        )
    limit = profile.tuning.max_files * profile.tuning.max_file_bytes
    try:
        stream, _ = docker_client().api.get_archive(name, folder)
        data = bytearray()
        for chunk in stream:
            data += chunk
            if len(data) > limit + (1 << 20):
                raise SglxError(
                    f"container {name}: {folder} holds more than a tuned set ever does",
                    hint="copy the tuned files out yourself and use --from DIR",
                    code="too_large",
                )
    except NotFound:
        raise SglxError(
            f"container {name} has no {folder} (or no such container runs)",
            hint="name the server container that ran the tuning (`docker ps`)",
            code="not_found",
        ) from None
    except DockerException as exc:
        raise SglxError(
            f"cannot copy {folder} out of container {name}: {exc}",
            hint="check the engine with `docker info`",
            code="environment",
        ) from None
    dest.mkdir()
    _extract_top_files(bytes(data), dest, profile)


def _extract_top_files(data: bytes, dest: Path, profile: Profile) -> None:
    try:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar:
                parts = member.name.split("/")
                if len(parts) != 2 or not member.isfile() or not is_plain_name(parts[1]):
                    continue
                if member.size > profile.tuning.max_file_bytes:
                    continue  # tuned.capture names it: it is left behind, not read
                content = tar_member_bytes(
                    tar, member.name, max_bytes=profile.tuning.max_file_bytes
                )
                if content is not None:
                    (dest / parts[1]).write_bytes(content)
    except tarfile.TarError as exc:
        raise SglxError(
            f"the engine's copy of the capture folder is not a readable tar ({exc})",
            hint="check the engine with `docker info`",
            code="environment",
        ) from None

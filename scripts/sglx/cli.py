"""The `sglx` command line: argument parsing only.

Each subcommand is a pair: `_add_<cmd>` declares its help and arguments, `_cmd_<cmd>` calls one
function of a step module and returns its `Result`. `main` renders the result (table or --json)
and maps errors to exit codes: 0 ok, 1 findings, 2 usage or environment error.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from sglx import __version__
from sglx.errors import SglxError
from sglx.failures import (
    DEBUG_ENV,
    Parser,
    UsageError,
    early_flags,
    report_broken_pipe,
    report_interrupt,
    report_unexpected,
    report_usage_error,
)
from sglx.report import Result, error_result, render

Handler = Callable[[argparse.Namespace], Result]
EPILOG = (
    "exit codes: 0 ok, 1 findings, 2 usage or environment error. "
    "Reference: docs/reference/ (exit-codes.md, json-output.md, profile.md)."
)


def _default_arch() -> str:
    return os.environ.get("ARCH", "cpu")


MAX_WORKERS = 64


def _workers(text: str) -> int:
    """The type of every --jobs and --workers option: a whole number from 1 to MAX_WORKERS.

    The limit is fixed rather than a multiple of os.cpu_count(), so that a command line that
    works on the build host works on the control node. 64 is past the point of any gain: the
    threads and processes these options start hash files, read ELF headers or hold one SSH
    session per host, and disks and links saturate well before 64 streams, while 300 forked
    workers (issue 21) only cost memory and file descriptors. Defaults stay within it too.
    """
    try:
        count = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a whole number (give 1 to {MAX_WORKERS})"
        ) from None
    if not 1 <= count <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"{count} is out of range: give 1 to {MAX_WORKERS}")
    return count


# --------------------------------------------------------------------------------------------
# sglx arch
# --------------------------------------------------------------------------------------------


def _add_arch(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    arch = sub.add_parser(
        "arch",
        help="list, show and validate architecture profiles",
        description="Architecture profiles (images/<arch>/arch.yaml) are the single source of "
        "truth for each arch: base image, devices, env, SGLang defaults and refusals, scan "
        "rules and host settings.",
        epilog=EPILOG,
    )
    verbs = arch.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser(
        "list",
        parents=[common],
        help="list the known arches",
        description="One line per arch: family, support level, base image.",
    )
    p.set_defaults(func=_cmd_arch_list)

    p = verbs.add_parser(
        "show",
        parents=[common],
        help="print the resolved profile of an arch",
        description="Print the profile after shared fragments are merged in (YAML, or the "
        "profile under data.profile with --json).",
    )
    p.add_argument("arch", metavar="ARCH", help="an arch name, e.g. cpu or gfx942")
    p.set_defaults(func=_cmd_arch_show)

    p = verbs.add_parser(
        "validate",
        parents=[common],
        help="validate profiles against the schema",
        description="Validate every profile (default) or the given arch.yaml files/folders. "
        "Each problem names the file, line, key path, what was expected and what was found. "
        "Exit 1 if any profile is invalid.",
    )
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="arch.yaml files or their folders (default: every images/<arch>)",
    )
    p.set_defaults(func=_cmd_arch_validate)

    p = verbs.add_parser(
        "schema",
        parents=[common],
        help="print the profile reference (Markdown)",
        description="Print docs/reference/profile.md, generated from the schema.",
    )
    p.set_defaults(func=_cmd_arch_schema)


def _cmd_arch_list(args: argparse.Namespace) -> Result:
    from sglx.arch import list_arches

    return list_arches()


def _cmd_arch_show(args: argparse.Namespace) -> Result:
    from sglx.arch import show_arch

    return show_arch(args.arch)


def _cmd_arch_validate(args: argparse.Namespace) -> Result:
    from sglx.arch import validate_profiles

    return validate_profiles(args.paths)


def _cmd_arch_schema(args: argparse.Namespace) -> Result:
    from sglx.arch import schema_reference

    return schema_reference()


# --------------------------------------------------------------------------------------------
# sglx base
# --------------------------------------------------------------------------------------------


def _add_base(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    arch_parent: argparse.ArgumentParser,
) -> None:
    base = sub.add_parser(
        "base",
        help="make or bring in the base image of an arch",
        description="Base images come from no registry: the cpu base is debootstrapped from "
        "Debian and imported; vendor bases are loaded from a tar carried into the site.",
        epilog=EPILOG,
    )
    verbs = base.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "build",
        parents=[common, arch_parent],
        help="build a base from Debian with debootstrap",
        description="Debootstrap the profile's Debian suite and packages into a scratch folder "
        "and import it as the profile's base.ref (or --tag). Needs root, debootstrap and a "
        "Docker engine.",
    )
    p.add_argument("--tag", help="image tag (default: the profile's base.ref)")
    p.add_argument("--mirror", help="Debian mirror URL (default: the profile's base.build.mirror)")
    p.set_defaults(func=_cmd_base_build)

    p = verbs.add_parser(
        "ensure",
        parents=[common, arch_parent],
        help="make sure the arch's base is in the engine (build it if sglx builds it)",
        description="Nothing to do when the base is present; the cpu base is built (as by "
        "`base build`); a vendor base that is missing is an error saying how to get it.",
    )
    p.add_argument("--mirror", help="Debian mirror URL for a base sglx builds")
    p.set_defaults(func=_cmd_base_ensure)

    p = verbs.add_parser(
        "load",
        parents=[common],
        help="load a vendor base carried in as a tar, checksum verified",
        description="Load a base image from a `docker save` archive (or an OCI layout tar) made "
        "on a connected machine. The sha256 comes from --sha256 or FILE.sha256 next to it "
        "(sha256sum format); a mismatch loads nothing. Its members, manifest (or OCI index) "
        "and, with --arch, the pinned digest are checked before the engine sees it, and the "
        "image is tagged only once the engine's id is verified.",
    )
    p.add_argument("file", type=Path, metavar="FILE", help="the image archive")
    p.add_argument("--sha256", help="expected sha256 of FILE (default: read FILE.sha256)")
    p.add_argument("--tag", help="tag the loaded image (default: the tag in the archive)")
    p.add_argument("--arch", help="check the loaded image against this arch's base.digest")
    p.set_defaults(func=_cmd_base_load)


def _cmd_base_ensure(args: argparse.Namespace) -> Result:
    from sglx.base import ensure_base
    from sglx.profile import load_profile
    from sglx.progress import Progress

    return ensure_base(
        load_profile(args.arch), mirror=args.mirror, progress=Progress("base", quiet=args.quiet)
    )


def _cmd_base_load(args: argparse.Namespace) -> Result:
    from sglx.base import load_base
    from sglx.profile import load_profile
    from sglx.progress import Progress

    return load_base(
        args.file,
        sha256=args.sha256,
        tag=args.tag,
        profile=load_profile(args.arch) if args.arch else None,
        progress=Progress("base load", quiet=args.quiet),
    )


def _cmd_base_build(args: argparse.Namespace) -> Result:
    from sglx.base import build_base
    from sglx.profile import load_profile
    from sglx.progress import Progress

    return build_base(
        load_profile(args.arch),
        tag=args.tag,
        mirror=args.mirror,
        progress=Progress("base build", quiet=args.quiet),
    )


# --------------------------------------------------------------------------------------------
# sglx model
# --------------------------------------------------------------------------------------------


def _add_model(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    model = sub.add_parser(
        "model",
        help="make a small demo model locally",
        description="Models for trying sglx and for tests, made here without any hub.",
        epilog=EPILOG,
    )
    verbs = model.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "demo",
        parents=[common],
        help="write a tiny random Llama/Qwen2 model with a locally trained tokenizer",
        description="Train a byte-level BPE tokenizer on a built-in corpus and save a tiny "
        "randomly initialised model (safetensors). Its output is gibberish by design; a "
        "sglx-demo.json marker labels it as a demo model.",
    )
    p.add_argument("dst", type=Path, metavar="DST", help="new folder to write the model to")
    p.add_argument("--family", choices=["llama", "qwen2"], default="llama")
    p.add_argument("--dtype", default="float32", help="float32 (default), float16 or bfloat16")
    p.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    p.set_defaults(func=_cmd_model_demo)


def _cmd_model_demo(args: argparse.Namespace) -> Result:
    from sglx.demo_model import make_demo_model

    path = make_demo_model(args.dst, family=args.family, dtype=args.dtype, seed=args.seed)
    files = sorted(p.name for p in path.iterdir())
    return Result(
        command=("model", "demo"),
        data={"path": str(path), "family": args.family, "dtype": args.dtype, "files": files},
        lines=(f"demo model ({args.family}, {args.dtype}, seed {args.seed}) written to {path}",),
    )


# --------------------------------------------------------------------------------------------
# sglx weights
# --------------------------------------------------------------------------------------------


def _add_weights(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    arch_parent: argparse.ArgumentParser,
) -> None:
    weights = sub.add_parser(
        "weights",
        help="convert, verify and check model weights",
        description="Converted weights are a Hugging Face safetensors checkpoint re-stored in "
        "the arch profile's dtype (weights.dtype), with a manifest (sglx-weights.json) of "
        "every file and tensor. Reference: docs/reference/weights.md.",
        epilog=EPILOG,
    )
    verbs = weights.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser(
        "convert",
        parents=[common, arch_parent],
        help="convert a safetensors checkpoint to an arch's dtype, with a manifest",
        description="Float tensors are stored in the profile's weights.dtype; integer and "
        "quantized tensors are carried as they are; a quantization method the arch refuses "
        "stops the conversion. Config, tokenizer and generation files are copied (config.json "
        "with its dtype updated). DST appears only when complete: the output is staged in a "
        "hidden folder next to it and renamed. NaN/Inf, overflow and damaged input stop the "
        "run with nothing written.",
    )
    p.add_argument(
        "src",
        type=Path,
        metavar="SRC",
        help="checkpoint folder (config.json, *.safetensors, optional *.safetensors.index.json)",
    )
    p.add_argument("dst", type=Path, metavar="DST", help="new folder for the converted model")
    p.add_argument(
        "--max-shard-size",
        metavar="SIZE",
        help="re-shard into files of at most SIZE (e.g. 5GB, 500MB, 2GiB); default: keep the "
        "source's shards",
    )
    p.add_argument(
        "--jobs", type=_workers, metavar="N", help="conversion threads (default: up to 4)"
    )
    p.set_defaults(func=_cmd_weights_convert)

    p = verbs.add_parser(
        "verify",
        parents=[common],
        help="re-check a converted model against its manifest",
        description="Every file the manifest lists must be present with its size and sha256, "
        "no other file may be present, and every shard header must match the manifest's "
        "tensors. Exit 1 on any difference.",
    )
    p.add_argument("dst", type=Path, metavar="DST", help="converted model folder")
    p.add_argument("--jobs", type=_workers, metavar="N", help="hashing threads (default: up to 4)")
    p.set_defaults(func=_cmd_weights_verify)

    p = verbs.add_parser(
        "check",
        parents=[common],
        help="compare a converted model's numbers with its source",
        description="Checks DST's structure (truncated shards, missing tensors), compares "
        "every tensor with SRC (kept dtypes bit-identical, converted ones within rounding), "
        "then loads both with transformers on CPU and compares logits on fixed prompts. "
        "Exit 1 when anything is outside tolerance, NaN/Inf or truncated.",
    )
    p.add_argument("src", type=Path, metavar="SRC", help="the source checkpoint folder")
    p.add_argument("dst", type=Path, metavar="DST", help="the converted model folder")
    p.add_argument("--prompts", nargs="+", metavar="TEXT", help="prompts to compare logits on")
    p.add_argument(
        "--tolerance",
        type=float,
        metavar="REL",
        help="max logit error relative to the largest logit (default: by the narrowest dtype "
        "the conversion rounded to, docs/reference/weights.md)",
    )
    p.set_defaults(func=_cmd_weights_check)


def _cmd_weights_convert(args: argparse.Namespace) -> Result:
    from sglx.profile import load_profile
    from sglx.progress import Progress
    from sglx.weights.convert import convert_weights
    from sglx.weights.plan import parse_size

    return convert_weights(
        args.src,
        args.dst,
        load_profile(args.arch),
        max_shard_size=None if args.max_shard_size is None else parse_size(args.max_shard_size),
        jobs=args.jobs,
        progress=Progress("weights convert", quiet=args.quiet),
    )


def _cmd_weights_verify(args: argparse.Namespace) -> Result:
    from sglx.progress import Progress
    from sglx.weights.verify import verify_weights

    return verify_weights(
        args.dst, jobs=args.jobs, progress=Progress("weights verify", quiet=args.quiet)
    )


def _cmd_weights_check(args: argparse.Namespace) -> Result:
    from sglx.progress import Progress
    from sglx.weights.check import DEFAULT_PROMPTS, check_weights

    return check_weights(
        args.src,
        args.dst,
        prompts=tuple(args.prompts or DEFAULT_PROMPTS),
        tolerance=args.tolerance,
        progress=Progress("weights check", quiet=args.quiet),
    )


# --------------------------------------------------------------------------------------------
# sglx scan
# --------------------------------------------------------------------------------------------


def _add_scan(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    p = sub.add_parser(
        "scan",
        parents=[common],
        help="resolve every ELF dependency of a tree, an image or a bundle, without running it",
        description="Read every ELF file's DT_NEEDED, RPATH and RUNPATH (pyelftools) and "
        "resolve them the way glibc's loader would inside the scanned root: its ld.so.conf, "
        "system directories and LD_LIBRARY_PATH. With --arch, also check the profile's scan "
        "rules (required, host-provided, forbidden and dlopen'ed libraries, data files). "
        "Nothing scanned is executed. Exit 1 on any unresolved dependency or broken rule. "
        "Reference: docs/reference/scan.md.",
        epilog=EPILOG,
    )
    p.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="a folder scanned as a root (an unpacked image, a venv); with --root, files or "
        "folders inside that root",
    )
    p.add_argument("--image", metavar="REF", help="an image of the local engine (never started)")
    p.add_argument(
        "--bundle",
        type=Path,
        metavar="DIR",
        help="a bundle folder written by `sglx bundle create` (its image chunks and wheelhouse)",
    )
    p.add_argument(
        "--root",
        type=Path,
        metavar="DIR",
        help="resolve PATHs against this root instead (e.g. --root / for this machine)",
    )
    p.add_argument(
        "--arch",
        help="check this arch profile's scan rules (default: none, only unresolved dependencies)",
    )
    p.add_argument(
        "--jobs",
        type=_workers,
        metavar="N",
        help=f"processes reading ELF headers (default: the CPUs this process may use, at most "
        f"{MAX_WORKERS})",
    )
    p.set_defaults(func=_cmd_scan)


def _cmd_scan(args: argparse.Namespace) -> Result:
    from sglx.progress import Progress
    from sglx.scan.command import default_jobs, scan_bundle, scan_image, scan_paths
    from sglx.scan.rules import Rules

    if args.root is not None and not args.paths:
        raise SglxError(
            "--root goes with PATHs", hint="e.g. `sglx scan --root / PATH`", code="usage"
        )
    given = [bool(args.paths), args.image is not None, args.bundle is not None]
    if sum(given) != 1:
        raise SglxError(
            "give exactly one of PATH, --image REF or --bundle DIR",
            hint="e.g. `sglx scan --image sglx/cpu:latest --arch cpu`",
            code="usage",
        )
    rules = Rules()
    if args.arch is not None:
        from sglx.profile import load_profile

        rules = Rules.from_profile(load_profile(args.arch))
    jobs = args.jobs or min(default_jobs(), MAX_WORKERS)
    progress = Progress("scan", quiet=args.quiet)
    if args.image is not None:
        return scan_image(args.image, rules=rules, jobs=jobs, progress=progress)
    if args.bundle is not None:
        return scan_bundle(args.bundle, rules=rules, jobs=jobs, progress=progress)
    return scan_paths(args.paths, root=args.root, rules=rules, jobs=jobs, progress=progress)


# --------------------------------------------------------------------------------------------
# sglx wheels
# --------------------------------------------------------------------------------------------


def _add_wheels(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    arch_parent: argparse.ArgumentParser,
) -> None:
    wheels = sub.add_parser(
        "wheels",
        help="lock, fetch and verify the frozen wheels of an arch",
        description="bundles/locks/<arch>.txt pins every wheel an image installs on top of its "
        "base, with sha256 hashes, resolved from the profile's python section for the image's "
        "Python and platform. Images install from a wheelhouse with --no-index --require-hashes.",
        epilog=EPILOG,
    )
    verbs = wheels.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser(
        "lock",
        parents=[common, arch_parent],
        help="resolve the profile's requirements into bundles/locks/<arch>.txt",
        description="Resolve python.requirements with pip's resolver for the image's Python and "
        "glibc (never this machine's), leave out what the base provides, and write the lock "
        "with hashes. The lock records the index cutoff it was resolved with "
        "(--uploaded-prior-to, default now), so --check, which resolves again with that cutoff "
        "and compares, gives the same answer on any later day (exit 1 when stale); --drift "
        "lists what today's index would change, as information.",
    )
    p.add_argument(
        "--find-links",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="extra wheel folder (e.g. the sglang wheel built from source)",
    )
    p.add_argument("--check", action="store_true", help="compare with the committed lock only")
    p.add_argument(
        "--uploaded-prior-to",
        metavar="TIME",
        help="resolve from what the index held before TIME (ISO 8601, UTC; default: now, or "
        "with --check the lock's own cutoff)",
    )
    p.add_argument(
        "--drift",
        action="store_true",
        help="with --check: also list what a resolution against today's index would change",
    )
    p.set_defaults(func=_cmd_wheels_lock)

    p = verbs.add_parser(
        "fetch",
        parents=[common, arch_parent],
        help="download the locked wheels into a wheelhouse (connected side)",
        description="Download every wheel of the lock with pip, hash-checked. Resumable: wheels "
        "already present with the right hash are kept, damaged ones fetched again.",
    )
    p.add_argument("--dest", type=Path, help="wheelhouse folder (default: wheelhouse/<arch>)")
    p.set_defaults(func=_cmd_wheels_fetch)

    p = verbs.add_parser(
        "verify",
        parents=[common, arch_parent],
        help="check a wheelhouse against the lock (exit 1 on a missing or tampered wheel)",
        description="Every locked wheel must be present with its sha256. Hashes already checked "
        "are remembered per user outside the wheelhouse ($SGLX_CACHE_DIR, $XDG_CACHE_HOME/sglx "
        "or ~/.cache/sglx), keyed on inode, size, mtime and ctime and HMAC-signed; a wheel that "
        "changed in any way is hashed again.",
    )
    p.add_argument("--wheelhouse", type=Path, help="folder (default: wheelhouse/<arch>)")
    p.add_argument(
        "--full", action="store_true", help="re-hash every wheel, trusting no cached result"
    )
    p.set_defaults(func=_cmd_wheels_verify)


def _cmd_wheels_lock(args: argparse.Namespace) -> Result:
    from sglx.profile import load_profile
    from sglx.progress import Progress
    from sglx.wheels.steps import lock

    if args.drift and not args.check:
        raise SglxError(
            "--drift needs --check", hint="sglx wheels lock --check --drift", code="usage"
        )
    return lock(
        load_profile(args.arch),
        args.find_links,
        args.check,
        Progress("wheels lock", quiet=args.quiet),
        uploaded_prior_to=args.uploaded_prior_to,
        drift=args.drift,
    )


def _cmd_wheels_fetch(args: argparse.Namespace) -> Result:
    from sglx.profile import load_profile
    from sglx.progress import Progress
    from sglx.wheels.steps import fetch

    return fetch(load_profile(args.arch), args.dest, Progress("wheels fetch", quiet=args.quiet))


def _cmd_wheels_verify(args: argparse.Namespace) -> Result:
    from sglx.profile import load_profile
    from sglx.progress import Progress
    from sglx.wheels.steps import verify

    return verify(
        load_profile(args.arch),
        args.wheelhouse,
        Progress("wheels verify", quiet=args.quiet),
        full=args.full,
    )


# --------------------------------------------------------------------------------------------
# sglx image
# --------------------------------------------------------------------------------------------


def _add_image(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    arch_parent: argparse.ArgumentParser,
) -> None:
    image = sub.add_parser(
        "image",
        help="render Dockerfiles, build per-arch serving images, prune build leftovers",
        description="images/<arch>/Dockerfile is rendered from images/Dockerfile.j2 and the "
        "arch profile, and committed. Builds run through the Docker SDK with no network.",
        epilog=EPILOG,
    )
    verbs = image.add_subparsers(dest="verb", required=True, metavar="VERB")

    p = verbs.add_parser(
        "render",
        parents=[common],
        help="render images/<arch>/Dockerfile from the template (--check: report drift)",
        description="Write every arch's Dockerfile (or the given ones). With --check nothing is "
        "written and stale files are findings (exit 1).",
    )
    p.add_argument("arches", nargs="*", metavar="ARCH", help="arches (default: all)")
    p.add_argument("--check", action="store_true", help="only report stale Dockerfiles")
    p.set_defaults(func=_cmd_image_render)

    p = verbs.add_parser(
        "build",
        parents=[common, arch_parent],
        help="build the serving image of an arch",
        description="Check the lock and the wheelhouse, convert the model (or generate the demo "
        "model), import wheels and weights into the engine, build the committed Dockerfile with "
        "no network and print tag, image id, size and the layers.",
    )
    p.add_argument("--base", help="base image reference (default: the profile's base.ref)")
    p.add_argument(
        "--model",
        type=Path,
        help="Hugging Face checkpoint folder (default: a generated demo model)",
    )
    p.add_argument("--tag", help="image tag (default: sglx/<arch>:latest)")
    p.add_argument("--wheelhouse", type=Path, help="wheel folder (default: wheelhouse/<arch>)")
    p.add_argument(
        "--no-cache", action="store_true", help="re-import wheels and weights, rebuild every layer"
    )
    p.set_defaults(func=_cmd_image_build)

    p = verbs.add_parser(
        "prune",
        parents=[common],
        help="remove sglx's build leftovers (deps stages, unused payload images) and say how "
        "much that freed",
        description="Remove the deps-stage images builds keep for their cache, wheelhouse and "
        "weights payload images no tagged serving image was built from, and serving images a "
        "rebuild untagged. Never a tagged serving image, a base, or an image a container uses "
        "(that one is a finding, exit 1). The next build is slower: it reinstalls the venv.",
    )
    p.add_argument("--arch", help="only this arch's leftovers (default: every arch)")
    p.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    p.set_defaults(func=_cmd_image_prune)


def _cmd_image_render(args: argparse.Namespace) -> Result:
    from sglx.image.render import render

    return render(args.arches, args.check)


def _cmd_image_build(args: argparse.Namespace) -> Result:
    from sglx.image.build import build_image
    from sglx.profile import load_profile
    from sglx.progress import Progress

    return build_image(
        load_profile(args.arch),
        base=args.base,
        model=args.model,
        tag=args.tag,
        wheels=args.wheelhouse,
        progress=Progress("image", quiet=args.quiet),
        no_cache=args.no_cache,
    )


def _cmd_image_prune(args: argparse.Namespace) -> Result:
    from sglx.image.prune import prune
    from sglx.progress import Progress

    return prune(args.arch, dry_run=args.dry_run, progress=Progress("image", quiet=args.quiet))


# --------------------------------------------------------------------------------------------
# sglx bundle
# --------------------------------------------------------------------------------------------


def _add_bundle(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    arch_parent: argparse.ArgumentParser,
) -> None:
    bundle = sub.add_parser(
        "bundle",
        help="create, verify and install air-gapped bundles",
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
        help="carry converted weights (sglx weights convert output) beside the image",
    )
    p.add_argument(
        "--control-wheels",
        type=Path,
        metavar="DIR",
        help="carry the Ansible control node's wheels (bundles/locks/ansible.txt) from DIR in "
        "ansible/wheels (default: the lock only)",
    )
    p.add_argument("--no-scan", action="store_true", help="do not scan the image")
    p.set_defaults(func=_cmd_bundle_create)

    signing = argparse.ArgumentParser(add_help=False)
    signing.add_argument(
        "--allowed-signers", type=Path, metavar="FILE", help="check the signature against FILE"
    )
    signing.add_argument("--identity", metavar="ID", help="the signer identity to require")
    signing.add_argument(
        "--require-signature", action="store_true", help="refuse an unsigned bundle"
    )
    signing.add_argument(
        "--jobs",
        type=_workers,
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
        help="install record folder (default: $SGLX_STATE_DIR or /var/lib/sglx/installs)",
    )
    p.add_argument("--full", action="store_true", help="redo every step, ignore the record")
    p.set_defaults(func=_cmd_bundle_install)


def _bundle_jobs(args: argparse.Namespace) -> int:
    from sglx.bundle.hashing import default_jobs

    return int(args.jobs or min(default_jobs(), MAX_WORKERS))


def _cmd_bundle_create(args: argparse.Namespace) -> Result:
    from sglx.bundle.create import CreateOptions, create_bundle
    from sglx.bundle.layout import parse_chunk_size
    from sglx.profile import load_profile
    from sglx.progress import Progress

    options = CreateOptions(
        image=args.image,
        out=args.out,
        chunk_size=parse_chunk_size(args.chunk_size),
        sign_key=args.sign,
        as_tar=args.tar,
        wheelhouse=args.wheelhouse,
        weights_outside=args.weights_outside,
        scan=not args.no_scan,
        control_wheels=args.control_wheels,
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
        signature=SignaturePolicy(args.allowed_signers, args.identity, args.require_signature),
        scan=not args.no_scan,
        jobs=_bundle_jobs(args),
        progress=Progress("bundle verify", quiet=args.quiet),
    )


def _cmd_bundle_install(args: argparse.Namespace) -> Result:
    from sglx.bundle.install import InstallOptions, default_state, install_bundle
    from sglx.bundle.verify import SignaturePolicy
    from sglx.progress import Progress

    options = InstallOptions(
        state=args.state or default_state(),
        venv=args.venv,
        weights_dir=args.weights_dir,
        full=args.full,
        signature=SignaturePolicy(args.allowed_signers, args.identity, args.require_signature),
        jobs=_bundle_jobs(args),
    )
    return install_bundle(args.bundle, options, Progress("bundle install", quiet=args.quiet))


# --------------------------------------------------------------------------------------------
# sglx ansible
# --------------------------------------------------------------------------------------------


def _add_ansible(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
    common: argparse.ArgumentParser,
    arch_parent: argparse.ArgumentParser,
) -> None:
    ansible = sub.add_parser(
        "ansible",
        help="render the arch profile into the Ansible roles' variables",
        description="The roles under ansible/ restate no arch fact: they read the variables "
        "rendered here from the profile. Reference: docs/reference/ansible.md.",
        epilog=EPILOG,
    )
    verbs = ansible.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "vars",
        parents=[common, arch_parent],
        help="print (or write) the role variables of an arch",
        description="Print the variables as a YAML group_vars file, or write it with --out "
        "(atomically). --check compares --out with the profile and exits 1 when it is stale.",
    )
    p.add_argument("--out", type=Path, metavar="FILE", help="write the variables to FILE")
    p.add_argument("--check", action="store_true", help="exit 1 if FILE is stale")
    p.set_defaults(func=_cmd_ansible_vars)


def _cmd_ansible_vars(args: argparse.Namespace) -> Result:
    from sglx.ansible_vars import ansible_vars

    return ansible_vars(args.arch, args.out, args.check)


# --------------------------------------------------------------------------------------------
# sglx hosts
# --------------------------------------------------------------------------------------------


def _add_hosts(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    hosts = sub.add_parser(
        "hosts",
        help="check hosts before (preflight) and after (acceptance) a rollout",
        description="testinfra host checks (tests/host) over the inventory the playbooks use. "
        "Reference: docs/reference/hosts.md.",
        epilog=EPILOG,
    )
    verbs = hosts.add_subparsers(dest="verb", required=True, metavar="VERB")
    p = verbs.add_parser(
        "check",
        parents=[common],
        help="run the host checks of one mode on an inventory's hosts",
        description="preflight: device nodes, groups, kernel command line, sysctls, engine, "
        "disk, driver floors and sglx-preflight in the image. acceptance: all of preflight, "
        "plus the bundle's image, the service, the running server's devices and environment, "
        "a completion, and the same configuration on every host of a group. Exit 0 all "
        "passed (pending reboots included), 1 a check failed, 2 the checks could not run.",
    )
    p.add_argument("-i", "--inventory", type=Path, required=True, help="Ansible inventory")
    p.add_argument("--limit", default="sglx", help="group or host pattern (default: sglx)")
    p.add_argument("--mode", choices=("preflight", "acceptance"), default="preflight")
    p.add_argument("--arch", help="arch profile (default: each host's sglx_arch)")
    p.add_argument("--bundle", type=Path, help="bundle folder (its size and digest)")
    p.add_argument("--junitxml", type=Path, metavar="FILE", help="also write the JUnit report")
    p.add_argument(
        "--workers", type=_workers, help="parallel workers (default: one per host, <=16)"
    )
    p.add_argument(
        "--no-sudo", dest="sudo", action="store_false", help="run as the SSH user (already root)"
    )
    p.set_defaults(func=_cmd_hosts_check)


def _cmd_hosts_check(args: argparse.Namespace) -> Result:
    from sglx.hosts.check import CheckOptions, check_hosts
    from sglx.progress import Progress

    options = CheckOptions(
        args.inventory,
        args.limit,
        args.mode,
        args.arch,
        args.bundle,
        args.junitxml,
        args.workers,
        args.sudo,
    )
    return check_hosts(options, Progress("hosts check", quiet=args.quiet or args.json))


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--json",
        action="store_true",
        help="print one JSON envelope on stdout (docs/reference/json-output.md)",
    )
    common.add_argument(
        "-v",
        "--verbose",
        action="count",
        default=0,
        help="more logging; -v also shows tracebacks of errors",
    )
    common.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
    common.add_argument(
        "--debug",
        action="store_true",
        help=f"show the traceback of an unexpected error (also {DEBUG_ENV}=1)",
    )
    # The arch a command works for; `base load` and `scan` declare their own optional --arch.
    arch_parent = argparse.ArgumentParser(add_help=False)
    arch_parent.add_argument(
        "--arch", default=_default_arch(), help="arch profile (default: $ARCH or cpu)"
    )

    # Subparsers are made of the same class, so every usage error reaches `main`.
    parser: argparse.ArgumentParser = Parser(
        prog="sglx",
        description="sglx: build, bundle, scan and roll out SGLang for AMD Instinct/Radeon and "
        "Kunlun XPUs (and the cpu reference) in sites with no internet.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"sglx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_arch(sub, common)
    _add_base(sub, common, arch_parent)
    _add_model(sub, common)
    _add_wheels(sub, common, arch_parent)
    _add_image(sub, common, arch_parent)
    _add_weights(sub, common, arch_parent)
    _add_scan(sub, common)
    _add_bundle(sub, common, arch_parent)
    _add_ansible(sub, common, arch_parent)
    _add_hosts(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every failure is a message and exit 2, never a traceback (see
    sglx.failures). --help and --version still exit through SystemExit(0)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    as_json, debug = early_flags(argv)
    command: list[str] = []
    restore_sigterm = _sigterm_as_interrupt()
    try:
        args = build_parser().parse_args(argv)
        as_json, debug = args.json, debug or args.debug or args.verbose > 0
        logging.basicConfig(
            level=logging.WARNING - 10 * min(args.verbose, 2),
            format="sglx: %(levelname)s %(name)s: %(message)s",
        )
        command = [a for a in (args.command, getattr(args, "verb", None)) if a]
        handler: Handler = args.func
        try:
            result = handler(args)
        except SglxError as exc:
            if debug:
                logging.exception("error details")
            result = error_result(command, exc)
        code = render(result, as_json=as_json)
        sys.stdout.flush()  # a closed pipe fails here, not in the interpreter's exit
        return code
    except UsageError as exc:
        return report_usage_error(exc, as_json=as_json)
    except KeyboardInterrupt:
        return report_interrupt(command, as_json=as_json)
    except BrokenPipeError:
        return report_broken_pipe()
    except Exception as exc:  # the last line of defence: one message, no traceback
        return report_unexpected(exc, command, as_json=as_json, debug=debug)
    finally:
        restore_sigterm()


def _sigterm_as_interrupt() -> Callable[[], None]:
    """Make SIGTERM (what `docker stop`, systemd and CI send) take Ctrl-C's path while a
    command runs: KeyboardInterrupt, so every `finally` cleans up as it does for SIGINT
    (scratch roots, export containers, the unpacked copy of a bundle tar) and the run ends with
    "interrupted", exit 2. Returns what puts the previous handler back. Only the main thread
    may set handlers; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)

    return restore


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


if __name__ == "__main__":
    sys.exit(main())

"""`sglx weights`: convert, verify and check model weights (the parser and its handlers).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sglx.cli_shared import EPILOG, Subparsers, workers
from sglx_core.arg_types import positive
from sglx_core.report import Result


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
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
        "--jobs", type=workers, metavar="N", help="conversion threads (default: up to 4)"
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
    p.add_argument("--jobs", type=workers, metavar="N", help="hashing threads (default: up to 4)")
    p.add_argument(
        "--signer",
        type=Path,
        metavar="PUBKEY",
        help="also require DST's OMS signature (sglx-weights.sig) to verify with this PEM "
        "public key; a folder unsigned or signed by another key is a finding",
    )
    p.set_defaults(func=_cmd_weights_verify)

    p = verbs.add_parser(
        "sign",
        parents=[common],
        help="sign a converted model per file, in OpenSSF's model-signing format",
        description="Writes DST/sglx-weights.sig: a Sigstore bundle whose DSSE envelope holds "
        "an in-toto statement of every file's digest, signed with a PEM elliptic-curve key "
        "(OpenSSF model-signing, key mode: no network). Check it with `sglx weights verify "
        "DST --signer KEY.pub`, or without sglx: `model_signing verify key --signature "
        "DST/sglx-weights.sig --public_key KEY.pub DST`.",
    )
    p.add_argument("dst", type=Path, metavar="DST", help="converted model folder")
    p.add_argument("--key", type=Path, required=True, metavar="KEY", help="PEM private key")
    p.set_defaults(func=_cmd_weights_sign)

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
        type=positive("--tolerance"),
        metavar="REL",
        help="max logit error relative to the largest logit (default: by the narrowest dtype "
        "the conversion rounded to, docs/reference/weights.md)",
    )
    p.set_defaults(func=_cmd_weights_check)


def _cmd_weights_convert(args: argparse.Namespace) -> Result:
    from sglx.progress import Progress
    from sglx.weights.convert import convert_weights
    from sglx.weights.plan import parse_shard_size
    from sglx_core.profile import load_profile

    return convert_weights(
        args.src,
        args.dst,
        load_profile(args.arch),
        max_shard_size=None
        if args.max_shard_size is None
        else parse_shard_size(args.max_shard_size),
        jobs=args.jobs,
        progress=Progress("weights convert", quiet=args.quiet),
    )


def _cmd_weights_verify(args: argparse.Namespace) -> Result:
    from sglx.progress import Progress
    from sglx.weights.verify import verify_weights

    result = verify_weights(
        args.dst, jobs=args.jobs, progress=Progress("weights verify", quiet=args.quiet)
    )
    if args.signer is None:
        return result
    from dataclasses import replace

    from sglx.weights.signature import signature_findings

    found = signature_findings(args.dst, args.signer)
    data = {**result.data, "signature": "ok" if not found else "findings"}
    return replace(result, data=data, findings=(*result.findings, *found))


def _cmd_weights_sign(args: argparse.Namespace) -> Result:
    from sglx.weights.signature import sign_weights

    return sign_weights(args.dst, args.key)


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

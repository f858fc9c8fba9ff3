"""`sglx model`: make a small demo model locally (the parser and its handler).

Registered by `sglx.cli`, which owns the shared options and the error envelope.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from sglx.cli_shared import EPILOG, Subparsers
from sglx_core.report import Result


def register(
    sub: Subparsers, common: argparse.ArgumentParser, arch_parent: argparse.ArgumentParser
) -> None:
    """Add the group's parser and verbs to `sub` (`arch_parent` carries --arch)."""
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

"""The `sglx` command line: argument parsing only.

Each subcommand is a pair: `_add_<cmd>` declares its help and arguments, `_cmd_<cmd>` calls one
function of a step module and returns its `Result`. `main` renders the result (table or --json)
and maps errors to exit codes: 0 ok, 1 findings, 2 usage or environment error.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from sglx import __version__
from sglx.errors import SglxError
from sglx.report import EXIT_ERROR, Result, error_result, render

Handler = Callable[[argparse.Namespace], Result]
EPILOG = (
    "exit codes: 0 ok, 1 findings, 2 usage or environment error. "
    "Reference: docs/reference/ (exit-codes.md, json-output.md, profile.md)."
)


def _default_arch() -> str:
    return os.environ.get("ARCH", "cpu")


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
    sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
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
        parents=[common],
        help="build a base from Debian with debootstrap",
        description="Debootstrap the profile's Debian suite and packages into a scratch folder "
        "and import it as the profile's base.ref (or --tag). Needs root, debootstrap and a "
        "Docker engine.",
    )
    p.add_argument("--arch", default=_default_arch(), help="arch profile (default: $ARCH or cpu)")
    p.add_argument("--tag", help="image tag (default: the profile's base.ref)")
    p.add_argument("--mirror", help="Debian mirror URL (default: the profile's base.build.mirror)")
    p.set_defaults(func=_cmd_base_build)


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

    parser = argparse.ArgumentParser(
        prog="sglx",
        description="sglx: build, bundle, scan and roll out SGLang for AMD Instinct/Radeon and "
        "Kunlun XPUs (and the cpu reference) in sites with no internet.",
        epilog=EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"sglx {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_arch(sub, common)
    _add_base(sub, common)
    _add_model(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2),
        format="sglx: %(levelname)s %(name)s: %(message)s",
    )
    command = [a for a in (args.command, getattr(args, "verb", None)) if a]
    handler: Handler = args.func
    try:
        result = handler(args)
    except SglxError as exc:
        if args.verbose:
            logging.exception("error details")
        return render(error_result(command, exc), as_json=args.json)
    except KeyboardInterrupt:
        sys.stderr.write("sglx: interrupted\n")
        return EXIT_ERROR
    return render(result, as_json=args.json)


if __name__ == "__main__":
    sys.exit(main())

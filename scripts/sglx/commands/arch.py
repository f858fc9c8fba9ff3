"""`sglx arch`: list, show and validate architecture profiles (the parser and its handlers).

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

"""The user's launch_server arguments read as sglang's own parser reads them, without importing
sglang (which imports torch: `sglx-serve --dry-run` answers in half a second).

sglang 0.5.23's `launch_server` parses with an `argparse.ArgumentParser` built by
`ServerArgs.add_cli_args`, whose `allow_abbrev` is on: `--mem-fraction 0.45` IS
`--mem-fraction-static 0.45`, and sglang honours `--dtype float32` however it is spelled. A reader
that matches flags by their full names alone lets a capacity check pass what the server then
runs (issue 37 item 3). So the option table of that very parser is kept here as data
(`sglang_flags.json`: each option string with its destination, how many values it takes, their
type and choices; `python -m sglx_core.serving.flags --write` makes it from the installed
sglang, and a test keeps it equal to the wheel's), and `read_args`:

- resolves every flag as argparse does: the exact option, else the one option it is a unique
  prefix of; an ambiguous prefix or an unknown flag is refused, as the server would refuse it;
- takes each flag's values by its arity, so a word that is another flag's value is never read as
  a flag of sglx-serve's own (`--dry-run`, `--version`), and a flag left without its value is
  refused;
- checks every int and float value (a finite number) and every choice;
- keys every value by its full option name, so a check of `--mem-fraction-static` sees the
  value however it was spelled; the words themselves go to the server as given, so the command
  `--dry-run` prints is what the server's /proc/PID/cmdline holds.

Every refusal is an SglxError naming the flag, the value and the fix (exit 2, no traceback).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from importlib import resources
from typing import Any

from sglx_core.errors import SglxError

TABLE = "sglang_flags.json"
SGLANG_VERSION = "0.5.23"
_HINT = "run `python -m sglang.launch_server --help` in the image for sglang's flags"


@dataclass(frozen=True)
class Option:
    dest: str
    nargs: int | str  # 0 (a switch), 1, or argparse's "?", "*", "+"
    type: str  # "int", "float", "human_readable_int", or "str" (any other converter, which
    # sglang applies itself)
    choices: tuple[str, ...] | None


@dataclass(frozen=True)
class ReadArgs:
    """The user's arguments as sglang reads them."""

    argv: list[str]  # the words as given, less sglx-serve's own: what the server is handed
    values: dict[str, str | None]  # full option string -> last value (None: a switch); argparse
    # keeps the last occurrence
    own: set[str]  # sglx-serve's own flags found in option position


@cache
def options() -> dict[str, Option]:
    """sglang's launch_server options, by option string."""
    raw = resources.files("sglx_core.serving").joinpath(TABLE).read_text()
    table = json.loads(raw)  # sglx's own data, shipped in the wheel
    return {
        name: Option(
            o["dest"], o["nargs"], o["type"], tuple(o["choices"]) if o["choices"] else None
        )
        for name, o in table["options"].items()
    }


def resolve_flag(token: str, own: Sequence[str] = ()) -> str:
    """The full option string `token` names, as argparse resolves it (allow_abbrev)."""
    table = options()
    if token in table or token in own:
        return token
    matches = sorted(name for name in (*table, *own) if name.startswith(token))
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise SglxError(
            f"{token} is not an argument of sglang {SGLANG_VERSION}'s launch_server",
            hint=f"check the spelling; {_HINT}",
            code="usage",
        )
    shown = ", ".join(matches[:6]) + (" ..." if len(matches) > 6 else "")
    raise SglxError(
        f"{token} is ambiguous: sglang's parser would take it for any of {shown}",
        hint="spell the flag out in full",
        code="usage",
    )


def read_args(argv: Sequence[str], own: Sequence[str] = ()) -> ReadArgs:
    """`argv` (the user's launch_server arguments, with sglx-serve's `own` switches among them)
    read as sglang's parser reads it; refused where it would refuse."""
    table = options()
    out: list[str] = []
    values: dict[str, str | None] = {}
    found_own: set[str] = set()
    index = 0
    while index < len(argv):
        token = argv[index]
        index += 1
        if not _is_flag(token):
            raise SglxError(
                f"{token!r} is not a value of any flag: launch_server takes no positional "
                "arguments",
                hint="give each value after its flag (--flag VALUE or --flag=VALUE)",
                code="usage",
            )
        name, eq, inline = token.partition("=")
        flag = resolve_flag(name, own)
        if flag in own:
            if eq:
                raise SglxError(f"{flag} takes no value", hint=f"give {flag} alone", code="usage")
            found_own.add(flag)
            continue
        option = table[flag]
        given: list[str] = []
        if eq:
            given = [inline]
        elif option.nargs in (1, "+"):
            if index >= len(argv) or _is_flag(argv[index]):
                raise SglxError(f"{flag} expects a value", hint=f"give {flag} VALUE", code="usage")
            given = [argv[index]]
            index += 1
        if option.nargs in ("+", "*", "?") and not eq:
            while index < len(argv) and not _is_flag(argv[index]):
                given.append(argv[index])
                index += 1
                if option.nargs == "?":
                    break
        if option.nargs == 0 and eq:
            raise SglxError(f"{flag} takes no value", hint=f"give {flag} alone", code="usage")
        read = [_check(flag, option, value) for value in given]
        out += [token, *([] if eq else given)]
        values[flag] = " ".join(read) if given else None
    return ReadArgs(out, values, found_own)


def _is_flag(token: str) -> bool:
    """Whether argparse takes `token` for an option: not a negative number, and no space in it
    (argparse's `_parse_optional` takes `--a b` as one value)."""
    if not token.startswith("-") or token == "-":
        return False
    if " " in token:
        name, eq, _ = token.partition("=")
        return bool(eq) and name in options()
    try:
        float(token)
    except ValueError:
        return True
    return False


def _check(flag: str, option: Option, value: str) -> str:
    """`value` checked as sglang's converter would; returned as the reader should take it (a
    human-readable integer as plain digits)."""
    if option.type == "human_readable_int":
        number = human_readable_int(value)
        if number is None:
            raise SglxError(
                f"{flag} {value!r} is not an integer",
                hint=f"give {flag} a plain integer or one with an SI or IEC suffix (128k, 32Ki)",
                code="usage",
            )
        return str(number)
    if option.type in ("int", "float"):
        kind = int if option.type == "int" else float
        try:
            parsed: float | None = kind(value) if value.strip().isascii() else None
        except ValueError:
            parsed = None
        if parsed is None or not math.isfinite(parsed):
            word = "an integer" if kind is int else "a finite number"
            raise SglxError(
                f"{flag} {value!r} is not {word}",
                hint=f"give {flag} {word}, e.g. {flag} {'2' if kind is int else '0.8'}",
                code="usage",
            )
    if option.choices is not None and value not in option.choices:
        raise SglxError(
            f"{flag} {value!r} is not one of sglang's choices ({', '.join(option.choices)})",
            hint=f"give {flag} one of them",
            code="usage",
        )
    return value


_HUMAN = re.compile(r"([0-9]+(?:\.[0-9]+)?)(Ki|Mi|Gi|Ti|k|M|G|T)")
_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def human_readable_int(value: str) -> int | None:
    """sglang 0.5.23's `human_readable_int` (srt/utils/common.py: `--context-length` and three
    more): a plain integer, an SI suffix (decimals allowed: 25.6k) or an IEC one (integers
    only); None where sglang's raises."""
    text = value.strip()
    if len(text) > 40:
        return None
    match = _HUMAN.fullmatch(text)
    if match:
        number, suffix = match.groups()
        if suffix in _IEC:
            return None if "." in number else int(number) * _IEC[suffix]
        return int(Decimal(number) * _SI[suffix])
    if not re.fullmatch(r"\s*[+-]?[0-9_]+\s*", value, flags=re.ASCII):
        return None
    try:
        return int(text)
    except ValueError:
        return None


def table_of_parser() -> dict[str, Any]:
    """The option table of the installed sglang's launch_server parser (imports sglang)."""
    import argparse

    from sglang.srt.server_args import ServerArgs
    from sglang.version import __version__

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    found: dict[str, Any] = {}
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        nargs: int | str = 0 if action.nargs == 0 else 1 if action.nargs is None else action.nargs
        kind = getattr(action.type, "__name__", "str")
        for name in action.option_strings:
            found[name] = {
                "dest": action.dest,
                "nargs": nargs,
                "type": kind if kind in ("int", "float", "human_readable_int") else "str",
                "choices": sorted(str(c) for c in action.choices) if action.choices else None,
            }
    return {"sglang": __version__, "options": dict(sorted(found.items()))}


def _main(argv: Sequence[str] | None = None) -> int:
    import argparse
    from pathlib import Path

    parser = argparse.ArgumentParser(
        prog="python -m sglx_core.serving.flags",
        description=f"Write {TABLE} from the installed sglang's launch_server parser.",
    )
    parser.add_argument("--write", action="store_true", help="write the table beside this module")
    args = parser.parse_args(argv)
    text = json.dumps(table_of_parser(), indent=1, sort_keys=True) + "\n"
    if args.write:
        (Path(__file__).parent / TABLE).write_text(text)
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())

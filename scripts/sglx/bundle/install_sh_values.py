"""install.sh's templates and the values put into them (sglx.bundle.install_sh and its weights
part, sglx.bundle.install_sh_weights).

The templates are real sh files in `sh/` beside this module (shipped as package data), so that
an editor, a reviewer and ShellCheck read them as shell: `part` reads one, without its `#:`
lines (the template's own notes). `fill` puts values in for their `@NAME@` placeholders in one
pass, so a value that happens to hold `@NAME@` is never filled again. `plain` refuses a value
holding a control character, which install.sh would print raw.
"""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files

from sglx_core.errors import SglxError

_NOTE = re.compile(r"^#:.*\n", re.M)


def plain(value: str, what: str) -> str:
    """`value`, refused when it holds a control character (install.sh prints it)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SglxError(
            f"{what} {value!r} holds a control character; install.sh would print it raw",
            hint="remove newlines, escapes and other control characters from it",
            code="usage",
        )
    return value


@cache
def part(name: str) -> str:
    """The template `sh/NAME` without its `#:` lines and its last newline (a part goes in
    where its placeholder stands alone on a line)."""
    text = (files("sglx.bundle") / "sh" / name).read_text(encoding="utf-8")
    return _NOTE.sub("", text).removesuffix("\n")


def fill(template: str, values: dict[str, str]) -> str:
    """`template` with each key of `values` (an `@NAME@` placeholder) replaced by its value,
    in one pass. A key the template does not hold is a bug in sglx, and says so."""
    missing = [key for key in values if key not in template]
    if missing:
        raise AssertionError(f"install.sh's template holds no {', '.join(missing)}")
    if not values:
        return template
    keys = re.compile("|".join(re.escape(key) for key in sorted(values, key=len, reverse=True)))
    return keys.sub(lambda found: values[found.group(0)], template)

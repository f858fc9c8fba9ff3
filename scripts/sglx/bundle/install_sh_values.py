"""Values in install.sh's templates (sglx.bundle.install_sh and its weights part,
sglx.bundle.install_sh_weights): `plain` refuses a value holding a control character, which
install.sh would print raw; `fill` puts values in for their `@NAME@` placeholders."""

from __future__ import annotations

from sglx_core.errors import SglxError


def plain(value: str, what: str) -> str:
    """`value`, refused when it holds a control character (install.sh prints it)."""
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise SglxError(
            f"{what} {value!r} holds a control character; install.sh would print it raw",
            hint="remove newlines, escapes and other control characters from it",
            code="usage",
        )
    return value


def fill(template: str, values: dict[str, str]) -> str:
    """`template` with each key of `values` (an `@NAME@` placeholder) replaced by its value."""
    for key, value in values.items():
        template = template.replace(key, value)
    return template

"""Values written into the server's systemd unit and environment file: escaped, or refused.

Every value the templates interpolate passes through one of these filters, so no value can
split into two arguments, start a new setting or variable, or be expanded by systemd.

- The unit (templates/server.service.j2) is read by systemd. A command line is split into
  words at whitespace, with double and single quotes and C escapes (systemd.syntax(7)
  "Quoting"); `%` starts a specifier (systemd.unit(5) "Specifiers"), `$` an environment
  variable (systemd.service(5) "Command lines"), a lone `;` separates commands, and a newline
  ends the setting. `sglx_systemd_word` writes a plain word ([A-Za-z0-9_+=:,./@-]) as it is, and
  any other in double quotes with `\\` and `"` backslash-escaped, `%` as `%%` and `$` as `$$`:
  systemd hands the process exactly the value. `sglx_systemd_words` does it to each item of a
  list. `sglx_systemd_text` writes the value of a setting that is no command line
  (Description=): only specifiers are expanded there.
- The environment file (templates/server.env.j2) is read by `docker run --env-file`: one
  NAME=value a line, the value verbatim, with no quoting and no escape at all. So nothing is
  escaped there: `sglx_env_name` refuses a name that is not [A-Za-z_][A-Za-z0-9_]*, and
  `sglx_env_value` passes the value as it is.

A control character (U+0000-U+001F, U+007F: a newline, a tab, an escape) has no spelling in
either file that every reader takes the same way, so every filter refuses it. The role's
preflight names the variable that holds one first (`sglx_control_characters`); these refusals
guard the templates themselves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
PLAIN_WORD = re.compile(r"[A-Za-z0-9_+=:,./@-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _text(value: Any, what: str) -> str:
    if isinstance(value, Mapping | list | tuple | set):
        raise AnsibleFilterError(f"{what}: expected one value, found {type(value).__name__}")
    text = str(value)
    found = CONTROL.search(text)
    if found:
        raise AnsibleFilterError(
            f"{what}: {text!r} holds the control character {found.group()!r}, which would "
            "start a new line in the server's unit or environment file: remove it"
        )
    return text


def sglx_systemd_word(value: Any) -> str:
    """One word of a systemd command line that systemd passes on exactly as `value`."""
    text = _text(value, "a word of the server's command line")
    if PLAIN_WORD.fullmatch(text):
        return text
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%").replace("$", "$$")
    return f'"{escaped}"'


def sglx_systemd_words(values: Any) -> str:
    """The items of `values`, each one word of a systemd command line, joined by spaces."""
    if isinstance(values, str | Mapping) or not isinstance(values, list | tuple):
        raise AnsibleFilterError(
            f"the server's arguments: expected a list, found {type(values).__name__}"
        )
    return " ".join(sglx_systemd_word(value) for value in values)


def sglx_systemd_text(value: Any) -> str:
    """The value of a systemd setting that is no command line, with specifiers escaped."""
    return _text(value, "a setting of the server's unit").replace("%", "%%")


def sglx_env_name(value: Any) -> str:
    """A variable name of docker's --env-file, checked."""
    text = _text(value, "a variable of the server's environment")
    if not ENV_NAME.fullmatch(text):
        raise AnsibleFilterError(
            f"the server's environment: {text!r} is no variable name: a name is letters, "
            "digits and '_', not starting with a digit"
        )
    return text


def sglx_env_value(value: Any) -> str:
    """A value of docker's --env-file (taken verbatim to the end of its line), checked."""
    return _text(value, "a value of the server's environment")


def sglx_control_characters(values: Mapping[str, Any]) -> list[str]:
    """Where the values hold a control character, as variable paths (`name`, `name[2]`,
    `name.KEY`), over strings, mapping keys and values, and list items at any depth."""
    found: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, Mapping):
            for key, item in value.items():
                if isinstance(key, str) and CONTROL.search(key):
                    found.append(f"{path} (the key {key!r})")
                walk(item, f"{path}.{key}")
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                walk(item, f"{path}[{index}]")
        elif isinstance(value, str) and CONTROL.search(value):
            found.append(path)

    for name, value in values.items():
        walk(value, str(name))
    return found


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglx_systemd_word": sglx_systemd_word,
            "sglx_systemd_words": sglx_systemd_words,
            "sglx_systemd_text": sglx_systemd_text,
            "sglx_env_name": sglx_env_name,
            "sglx_env_value": sglx_env_value,
            "sglx_control_characters": sglx_control_characters,
        }

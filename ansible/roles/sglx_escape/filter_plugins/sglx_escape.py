"""Values the roles write into files and command lines on a host: escaped, or refused. The one
escaping layer of every sglx role, one filter per target syntax (issue 37): a role that writes a
value into a file another program parses, or onto a command line, passes it through the filter
of that syntax, and a command takes its arguments as a list (`argv:`), never a joined string.
Roles load these filters by depending on this role (meta/main.yml `dependencies`).

- A systemd unit (sglang_service's server.service.j2, accel_host's load-modules unit) is read by
  systemd. A command line is split into words at whitespace, with double and single quotes and
  C escapes (systemd.syntax(7) "Quoting"); `%` starts a specifier (systemd.unit(5)
  "Specifiers"), `$` an environment variable (systemd.service(5) "Command lines"), a lone `;`
  separates commands, and a newline ends the setting. `sglx_systemd_word` writes a plain word
  ([A-Za-z0-9_+=:,./@-]) as it is, and any other in double quotes with `\\` and `"`
  backslash-escaped, `%` as `%%` and `$` as `$$`: systemd hands the process exactly the value.
  `sglx_systemd_words` does it to each item of a list. `sglx_systemd_text` writes the value of a
  setting that is no command line (Description=): only specifiers are expanded there.
- An environment file (server.env.j2, accel.env.j2) is read by `docker run --env-file`: one
  NAME=value a line, the value verbatim, with no quoting and no escape at all. So nothing is
  escaped there: `sglx_env_name` refuses a name that is not [A-Za-z_][A-Za-z0-9_]*, and
  `sglx_env_value` passes the value as it is.
- The GRUB drop-in is sourced by /bin/sh (update-grub) inside a double-quoted string, where
  `$(...)`, a backquote, `$VAR` and `\\` act: `sglx_kernel_arg` passes a kernel argument made
  of [A-Za-z0-9_.,:=/+@-] only (every argument the profiles name is such) and refuses another.
- sysctl: `sglx_sysctl_key` passes a dotted or slashed name ([A-Za-z0-9_-] parts, never one
  that starts with `-`, which sysctl would take as an option such as `-p FILE`);
  `sglx_sysctl_value` passes a value of words separated by single spaces (a multi-value sysctl
  such as net.ipv4.ip_local_port_range "32768 60999" is one value; the kernel prints it with a
  tab, and the roles compare words).
- A kernel module name (modules-load.d, `modprobe`, /sys/module): `sglx_module_name`, letters,
  digits, `_` and `-`, not starting with `-` (modprobe would take `-C DIR` as an option).
- A line of a line-based file (a udev rule, a limits.d field): `sglx_line` refuses a control
  character, so a value cannot add a line (udev `RUN+=`); `sglx_limits_word` passes one
  whitespace-free field of limits.conf.
- A systemd unit name: `sglx_unit_name`, [A-Za-z0-9_.@-] ending in .service, no newline (Jinja's
  `match` test takes a trailing newline after `$`).

A control character (U+0000-U+001F, U+007F: a newline, a tab, an escape) has no spelling in any
of these files that every reader takes the same way, so every filter refuses it. The roles'
preflights name the variable that holds one first (`sglx_control_characters`); these refusals
guard the templates and commands themselves.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

CONTROL = re.compile(r"[\x00-\x1f\x7f]")
PLAIN_WORD = re.compile(r"[A-Za-z0-9_+=:,./@-]+")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
KERNEL_ARG = re.compile(r"[A-Za-z0-9_.,:=/+@-]+")
SYSCTL_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*(?:[./][A-Za-z0-9_-]+)*")
SYSCTL_WORD = re.compile(r"[^\s\x00-\x1f\x7f]+")
MODULE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
LIMITS_WORD = re.compile(r"[A-Za-z0-9_.:@%*+-]+")
UNIT_NAME = re.compile(r"[A-Za-z0-9_.@-]+\.service")


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


def _pattern(value: Any, pattern: re.Pattern[str], what: str, rule: str) -> str:
    text = _text(value, what)
    if not pattern.fullmatch(text):
        raise AnsibleFilterError(f"{what}: {text!r} is not {rule}: remove what else it holds")
    return text


def sglx_kernel_arg(value: Any) -> str:
    """One kernel command-line argument for the GRUB drop-in, which sh sources."""
    return _pattern(
        value,
        KERNEL_ARG,
        "a kernel argument (accel_host_kernel_cmdline)",
        "one word of letters, digits and _ . , : = / + @ - (the GRUB drop-in is shell: a "
        "space, quote, $ or backquote there would run or split)",
    )


def sglx_sysctl_key(value: Any) -> str:
    """A sysctl name, never an option of sysctl."""
    return _pattern(
        value,
        SYSCTL_KEY,
        "a sysctl name (accel_host_sysctl)",
        "a dotted name such as vm.max_map_count (parts of letters, digits, _ and -; not "
        "starting with -, which sysctl takes as an option)",
    )


def sglx_sysctl_value(value: Any) -> str:
    """A sysctl value: its words joined by single spaces (one value, even with several)."""
    text = _text(value, "a sysctl value (accel_host_sysctl)")
    words = SYSCTL_WORD.findall(text)
    if not words:
        raise AnsibleFilterError(f"a sysctl value (accel_host_sysctl): {text!r} is empty")
    return " ".join(words)


def sglx_module_name(value: Any) -> str:
    """A kernel module name, never an option of modprobe."""
    return _pattern(
        value,
        MODULE_NAME,
        "a kernel module (accel_host_modules, accel_host_after_boot_modules)",
        "a module name (letters, digits, _ and -, not starting with -)",
    )


def sglx_line(value: Any) -> str:
    """One line of a line-based file (a udev rule): no control character, so no second line."""
    return _text(value, "a line of a host file (accel_host_udev_rules)")


def sglx_limits_word(value: Any) -> str:
    """One field of a limits.d line."""
    return _pattern(
        value,
        LIMITS_WORD,
        "a field of the limits file (accel_host_limits, accel_host_service_user)",
        "one word (letters, digits and _ . : @ % * + -)",
    )


def sglx_unit_name(value: Any) -> str:
    """A systemd service unit name."""
    return _pattern(
        value,
        UNIT_NAME,
        "a unit name (accel_host_after_boot_unit)",
        "a file name ending in .service (letters, digits and _ . @ -)",
    )


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
            "sglx_kernel_arg": sglx_kernel_arg,
            "sglx_sysctl_key": sglx_sysctl_key,
            "sglx_sysctl_value": sglx_sysctl_value,
            "sglx_module_name": sglx_module_name,
            "sglx_line": sglx_line,
            "sglx_limits_word": sglx_limits_word,
            "sglx_unit_name": sglx_unit_name,
        }

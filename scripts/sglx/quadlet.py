"""The run spec as a podman Quadlet unit (`<name>.container`): podman's own way of running a
container under systemd (podman-systemd.unit(5)), for a site whose engine is podman.

The unit is a translation of `run_spec.docker_run_words`, flag by flag, never a second
description of the container: what `docker run` gets, podman gets. Each option becomes the key
Quadlet documents for it (`--name` ContainerName, `--network` Network, `-p` PublishPort,
`--device` AddDevice, `-v` Volume, `-e` Environment, the image Image, the server's arguments
Exec); the others (`--ipc`, `--shm-size`, `--ulimit`, `--group-add`) pass through PodmanArgs,
which every Quadlet since podman 4.4 takes as it is. docker's restart policy becomes systemd's
`Restart=` in [Service]. podman does not create a missing bind-mount source: the installers
create the lock and JIT folders first (run_spec.make_lock_folder, make_jit_folder).

Quadlet reads a unit as systemd does (systemd.syntax(7)), and hands specifiers (`%h`) and
`$VAR` on to the service it generates. The keys it splits into words (Environment, Exec,
PodmanArgs) get each word in systemd's quoting: a plain word as it is, any other in double
quotes with `\\` and `"` escaped, `%` as `%%` and `$` as `$$`, so the container gets exactly the
value. The keys it takes whole (Image, ContainerName, Volume, AddDevice, PublishPort, Network)
cannot be quoted: a value there with a character outside the plain set (and a device glob's
`*?[]`) is refused, naming it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import replace

from sglx.run_spec import RunSpec, Site, docker_run_words
from sglx_core.errors import SglxError

# Where a rootful Quadlet unit lives (podman-systemd.unit(5) "rootful"); its service is the
# unit's name with .service.
UNIT_DIR = "/etc/containers/systemd"
# The options of the run line Quadlet has a key for; the rest go through PodmanArgs.
KEYS = {
    "--name": "ContainerName",
    "--network": "Network",
    "-p": "PublishPort",
    "--device": "AddDevice",
    "-v": "Volume",
    "-e": "Environment",
}
# A word that needs no quoting anywhere in a unit file.
PLAIN = re.compile(r"[A-Za-z0-9_+=:,./@-]+")
# A value Quadlet takes whole: plain, or a device glob (`/dev/xpu[0-9]*`, as `--device` gets it).
WHOLE = re.compile(r"[A-Za-z0-9_+=:,./@*?\[\]-]+")
# `docker run` options of the run line that take no value.
SWITCHES = {"-d"}
START_TIMEOUT_S = 900


def quadlet_unit(spec: RunSpec, site: Site) -> str:
    """The `.container` unit that runs what `docker_run_words(spec, site)` runs, as a systemd
    service (the site's `detached` is ignored: systemd keeps the container in the foreground)."""
    words = docker_run_words(spec, _attached(site))
    container: list[tuple[str, str]] = []
    passed: list[str] = []
    options, image, exec_args = _split(words)
    for flag, value in options:
        key = KEYS.get(flag)
        if key is None:
            passed += [flag, value]
        elif key == "Environment":
            container.append((key, _word(value)))
        else:
            container.append((key, _whole(key, value)))
    lines = [
        "# Written by sglx from the bundle's run spec (sglx.run_spec): podman's Quadlet turns it",
        f"# into {site.name}.service at `systemctl daemon-reload`.",
        "[Unit]",
        f"Description=SGLang server (sglx {spec.arch}, image {_text(site.image)})",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Container]",
        f"Image={_whole('Image', image)}",
        *(f"{key}={value}" for key, value in container),
    ]
    if passed:
        lines.append("PodmanArgs=" + " ".join(_word(w) for w in passed))
    if exec_args:
        lines.append("Exec=" + " ".join(_word(w) for w in exec_args))
    lines += [
        "",
        "[Service]",
        f"Restart={spec.restart}",
        # the image's first start loads weights and compiles (the role waits for /health)
        f"TimeoutStartSec={START_TIMEOUT_S}",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def _attached(site: Site) -> Site:
    return replace(site, detached=False)


def _split(words: Sequence[str]) -> tuple[list[tuple[str, str]], str, list[str]]:
    """(option, value) pairs, the image and the server's arguments of a `docker run` line."""
    assert words[:2] == ["docker", "run"], words[:2]
    options: list[tuple[str, str]] = []
    rest: Iterator[str] = iter(words[2:])
    for word in rest:
        if not word.startswith("-"):
            return options, word, list(rest)
        if word in SWITCHES:
            continue
        options.append((word, next(rest)))
    raise AssertionError("a docker run line without an image")


def _word(value: str) -> str:
    """One word of a line Quadlet splits, as systemd reads it back: exactly `value`."""
    _no_control(value)
    if PLAIN.fullmatch(value):
        return value
    escaped = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("%", "%%").replace("$", "$$") + '"'


def _whole(key: str, value: str) -> str:
    """A value Quadlet takes whole (no quoting): plain characters only."""
    _no_control(value)
    if not WHOLE.fullmatch(value):
        raise SglxError(
            f"the podman unit's {key}= would be {value!r}: a value there cannot be quoted, and it "
            "holds a character outside letters, digits, _+=:,./@- and a glob's *?[]",
            hint="use a path or name of those characters (or run the server with docker)",
            code="usage",
        )
    return value


def _text(value: str) -> str:
    """A setting's free text (Description=): only specifiers are expanded there."""
    _no_control(value)
    return value.replace("%", "%%")


def _no_control(value: str) -> None:
    if re.search(r"[\x00-\x1f\x7f]", value):
        raise SglxError(
            f"the podman unit would hold {value!r}: a control character has no spelling in a "
            "unit file",
            hint="remove it from the value",
            code="usage",
        )

"""The final launch_server argv tail and environment, and the layer that set each value.

The chosen serving profile's args come first and the user's after them: argparse keeps the
last occurrence of a flag, so a user flag always wins, and each one that overrides a profile
value is recorded as such (the log line and `--dry-run` show it). A profile variable that
`docker run -e` already set is left as the operator set it. What the arch profile applies on
top (profile.server: defaults and disabled features the plugin writes when a field is unset)
is listed as "arch default"; what nobody sets is sglang's default and is not listed.

User arguments are read as sglang's own parser reads them, without importing sglang
(sglx_core.serving.flags: its option table, prefixes resolved, arities and types checked), then
named as serving profiles name them: sglang's aliases of the TP flag (`--tp-size`,
`--tensor-parallel-size`) are read as `--tp`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sglx_core.profile.schema import FLAG_FIELDS, Profile, flag_field
from sglx_core.serving.select import Candidate, capacity_for

if TYPE_CHECKING:
    from sglx_core.serving.capacity import Capacity
    from sglx_core.serving.hardware import Accelerators
    from sglx_core.serving.model import ModelShape

LAYERS = ("user argument", "docker run -e", "serving profile", "arch default", "sglang default")
# Flags sglang 0.5.23 accepts for one field, read as the first (srt/arg_groups/fields/parallel.py
# aliases; argparse's prefix matching makes --tp the same flag as --tp-size).
FLAG_ALIASES: Mapping[str, str] = {
    "--tp-size": "--tp",
    "--tensor-parallel-size": "--tp",
    "--dp-size": "--dp",
    "--data-parallel-size": "--dp",
    "--pp-size": "--pp",
    "--pipeline-parallel-size": "--pp",
    "--ep-size": "--ep",
    "--expert-parallel-size": "--ep",
}
_FIELD_FLAGS = {field: f"--{flag}" for flag, field in FLAG_FIELDS.items()}


@dataclass(frozen=True)
class Setting:
    """One final value and the layer that set it."""

    name: str  # flag ("--tp") or env var
    value: str
    layer: str  # one of LAYERS
    overrides: str | None  # the serving-profile value the user overrode, for the log line


@dataclass(frozen=True)
class Resolution:
    """What the server is started with, and why."""

    chosen: Candidate
    argv: list[str]  # profile args first, user args after: later flags win
    env: dict[str, str]  # variables the serving profile adds (not set by docker run -e)
    settings: list[Setting]
    capacity: Capacity | None


def canonical(flag: str) -> str:
    """`flag` under the name serving profiles use (`--tp-size` -> `--tp`)."""
    return FLAG_ALIASES.get(flag, flag)


def parse_flags(args: Sequence[str]) -> dict[str, str | None]:
    """The flags of a launch_server argv, canonical name -> value (None for a bare flag), read
    as sglang's parser reads them (an abbreviation is its flag; the last occurrence wins, as in
    argparse). Raises SglxError where sglang's parser would refuse the argv."""
    from sglx_core.serving.flags import read_args

    return {canonical(flag): value for flag, value in read_args(args).values.items()}


def arg_flag(name: str) -> str:
    """The flag of a serving-profile arg (`tp` -> `--tp`)."""
    return f"--{name}"


def field_flag(field: str) -> str:
    """The flag of a ServerArgs field (`tp_size` -> `--tp`, `page_size` -> `--page-size`)."""
    return _FIELD_FLAGS.get(field, "--" + field.replace("_", "-"))


def text(value: Any) -> str:
    """A value as the command line and the log show it (true -> 'true')."""
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def profile_argv(args: Mapping[str, Any]) -> list[str]:
    """A serving profile's args as flags: `--tp 8`; true is the bare flag, false is left out."""
    argv: list[str] = []
    for name, value in args.items():
        if value is True:
            argv.append(arg_flag(name))
        elif value is not False:
            argv += [arg_flag(name), text(value)]
    return argv


def _typed(value: str | None) -> Any:
    """A user flag's value as the capacity check reads it (numbers as numbers)."""
    if value is None:
        return True
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def resolve(
    profile: Profile,
    chosen: Candidate,
    user_args: Sequence[str],
    environ: Mapping[str, str],
    shape: ModelShape | None,
    hw: Accelerators,
) -> Resolution:
    """The argv tail, the added environment and the provenance of every value sglx sets."""
    serving = chosen.profile
    user = parse_flags(user_args)
    settings: list[Setting] = []
    set_flags: set[str] = set()
    for name, value in serving.args.items():
        flag = arg_flag(name)
        set_flags.add(flag)
        if flag in user:
            shown = text(user[flag]) if user[flag] is not None else "true"
            settings.append(Setting(flag, shown, "user argument", text(value)))
        elif value is not False:
            settings.append(Setting(flag, text(value), "serving profile", None))
    for flag, user_value in user.items():
        if flag not in set_flags:
            shown = text(user_value) if user_value is not None else "true"
            settings.append(Setting(flag, shown, "user argument", None))
            set_flags.add(flag)
    for field, arch_value in _arch_writes(profile).items():
        flag = field_flag(field)
        if flag not in set_flags and arch_value is not None:
            settings.append(Setting(flag, text(arch_value), "arch default", None))
            set_flags.add(flag)
    env: dict[str, str] = {}
    for name, value in serving.env.items():
        if name in environ:
            settings.append(Setting(name, environ[name], "docker run -e", value))
        else:
            env[name] = value
            settings.append(Setting(name, value, "serving profile", None))
    capacity = None
    if shape is not None:
        overrides = {
            flag_field(flag.removeprefix("--")): _typed(value) for flag, value in user.items()
        }
        capacity = capacity_for(profile, serving, hw, shape, overrides, environ)
    argv = profile_argv(serving.args) + list(user_args)
    return Resolution(chosen, argv, env, settings, capacity)


def _arch_writes(profile: Profile) -> dict[str, Any]:
    """The ServerArgs fields the plugin writes from the arch profile when the user leaves them
    unset (plugin/sglx_platform/server_args.py `plan`): server.defaults and the args of
    disabled features."""
    writes: dict[str, Any] = dict(profile.server.defaults)
    for spec in profile.server.disabled_features.values():
        writes.update(spec.args)
    return writes

"""The profile's env_floors rule, in one place: when a feature is switched on, a variable it
needs is at least its minimum.

Two readers apply it: the run spec (sglx.run_spec) raises the variable in the environment every
way of running the server gets (the systemd unit, install.sh, `sglx bundle install`), and the
plugin's preflight (sglx_runtime.preflight.env_floors) checks the environment the server
actually got, which a site may have changed since (extra variables, a host env file).
"""

from __future__ import annotations

from collections.abc import Mapping

from sglx_core.env_bool import as_bool
from sglx_core.profile.schema import EnvFloor


def switched_on(floor: EnvFloor, env: Mapping[str, str]) -> bool:
    """Whether every `when` variable has its value in `env`: a boolean word as sglang reads it
    (`true`, `Yes`, `1` alike), any other value as the same string. An unset variable never
    switches a feature on."""
    return all(_means(env.get(name), value) for name, value in floor.when.items())


def _means(got: str | None, wanted: str) -> bool:
    if got is None:
        return False
    flag = as_bool(wanted)
    return got == wanted if flag is None else as_bool(got) == flag


def current(floor: EnvFloor, env: Mapping[str, str]) -> int | None:
    """The value the runtime uses for `floor.name`: `env`'s (None when not a number), else the
    runtime's default for an unset variable (`floor.unset`, None when the profile names none)."""
    text = env.get(floor.name)
    if text is None:
        return floor.unset
    try:
        return int(text)
    except ValueError:
        return None


def below(floor: EnvFloor, env: Mapping[str, str]) -> bool:
    """Whether the feature is on and the variable is under its minimum (or not a number)."""
    if not switched_on(floor, env):
        return False
    value = current(floor, env)
    return value is None or value < floor.minimum


def raised(floors: Mapping[str, EnvFloor], env: Mapping[str, str]) -> dict[str, str]:
    """The variables to set so that `env` meets every floor: {name: minimum}, for each floor
    that is on and below (the highest minimum where two floors name one variable)."""
    out: dict[str, str] = {}
    for _, floor in sorted(floors.items()):
        if below(floor, env) and int(out.get(floor.name, floor.minimum)) <= floor.minimum:
            out[floor.name] = str(floor.minimum)
    return out

"""Apply an arch profile's SGLang defaults and refusals to server arguments.

Pure logic over field values: it works on sglang's ServerArgs (through the platform hook) and
on a parsed argv (preflight) alike. A field the user set explicitly keeps the user's value; a
refusal stops the server with the reason and what to use instead.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from sglx_core import observability
from sglx_core.profile import Profile
from sglx_core.profile.schema import Rule
from sglx_platform.failures import FailureClass, PlatformError


def flag(name: str) -> str:
    """The command-line flag of a ServerArgs field."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Refusal:
    """A server argument this arch does not accept (or only warns about)."""

    field: str
    value: Any
    reason: str
    instead: str | None = None

    def __str__(self) -> str:
        text = f"{flag(self.field)} {self.value}: {self.reason}"
        return text + (f"; use {self.instead}" if self.instead else "")


@dataclass(frozen=True)
class Plan:
    """What the profile does to a set of server arguments."""

    writes: dict[str, Any] = field(default_factory=dict)
    refusals: tuple[Refusal, ...] = ()
    warnings: tuple[Refusal, ...] = ()


def explicit_fields(asked: Mapping[str, Any], defaults: Mapping[str, Any]) -> set[str]:
    """Fields the user set: their asked-for value differs from sglang's default."""
    return {name for name, value in asked.items() if value != defaults.get(name)}


def plan(
    profile: Profile,
    current: Mapping[str, Any],
    explicit_set: Collection[str],
    model: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Plan:
    """Decide writes, refusals and warnings for `current` field values.

    Fields in `explicit_set` were set by the user and are never overwritten; every other field
    the profile has a default for gets it, even if sglang resolved another value before (the
    profile knows the arch, sglang's generic heuristics do not). `model` holds the facts read
    from the model's config.json (`sglx_platform.model_config`), which conditional rules may
    look at; empty or None when there are none. `environ` is the server's environment, which
    rules with `unless_env` read; None: this process's, which the server shares.
    """
    model = model or {}
    environ = os.environ if environ is None else environ
    server = profile.server

    def explicit(name: str) -> bool:
        return name in explicit_set

    writes: dict[str, Any] = {}
    refusals: list[Refusal] = []
    for name, value in server.defaults.items():
        if not explicit(name):
            writes[name] = value
    if not explicit(observability.FIELD) and observability.metrics_on(profile, environ):
        writes[observability.FIELD] = True
    for feature, spec in server.disabled_features.items():
        for name, value in spec.args.items():
            if not explicit(name):
                writes[name] = value
            elif spec.forced and current[name] != value:
                refusals.append(
                    Refusal(
                        name,
                        current[name],
                        f"{feature} is off on {profile.arch}: {spec.reason}",
                        f"{flag(name)} {value}",
                    )
                )
    effective = {**current, **writes}
    # A rule's default stands in for a refusal when the user left the field unset (e.g. a
    # model too wide for one attention backend gets another); a value the user set is checked.
    for name, rule in server.field_rules():
        if (
            rule.default is not None
            and not explicit(name)
            and rule.applies(effective, model, environ)
        ):
            writes[name] = rule.default
    effective = {**current, **writes}
    warnings: list[Refusal] = []
    for name, rule in server.field_rules():
        value = effective.get(name)
        if rule.applies(effective, model, environ) and not rule.permits(value):
            target = warnings if rule.action == "warn" else refusals
            reason = rule.reason + _model_detail(rule, model)
            target.append(Refusal(name, value, reason, rule.instead))
    limit = server.memory.mem_fraction_static_max
    fraction = effective.get("mem_fraction_static")
    if limit is not None and fraction is not None and fraction > limit:
        refusals.append(
            Refusal(
                "mem_fraction_static",
                fraction,
                f"above {limit} on {profile.arch} (device memory is host RAM)",
                f"{flag('mem_fraction_static')} {limit} or less",
            )
        )
    if server.memory.require_max_total_tokens and effective.get("max_total_tokens") is None:
        refusals.append(
            Refusal(
                "max_total_tokens",
                None,
                "an unbounded KV cache would claim most of host RAM",
                f"{flag('max_total_tokens')} N",
            )
        )
    algorithm = effective.get("speculative_algorithm")
    if server.speculative_decoding == "never" and algorithm is not None:
        refusals.append(
            Refusal(
                "speculative_algorithm",
                algorithm,
                f"speculative decoding is not supported on {profile.arch}",
                "no speculative decoding flags",
            )
        )
    return Plan(writes, tuple(refusals), tuple(warnings))


def refusal_error(profile: Profile, refusals: tuple[Refusal, ...]) -> PlatformError:
    lines = "\n    ".join(str(r) for r in refusals)
    return PlatformError(
        FailureClass.CONFIG_REFUSED,
        f"sglx refuses these server arguments on {profile.arch}:\n    {lines}",
        "change the flags as suggested (the rules are in the image's /etc/sglx/arch.yaml; "
        "`sglx arch show " + profile.arch + "` prints them)",
    )


def _model_detail(rule: Rule, model: Mapping[str, Any]) -> str:
    """What the model showed that made a model-conditioned rule apply, for the message."""
    if rule.model is None or rule.model.head_dim_above is None:
        return ""
    return f" (this model: head_dim {model.get('head_dim')})"


# Fields `plan` reads beyond the ones the profile names.
PLANNED_FIELDS = (
    "mem_fraction_static",
    "max_total_tokens",
    "speculative_algorithm",
    observability.FIELD,
)


def fields_read(profile: Profile) -> set[str]:
    """Every ServerArgs field `plan` reads for this profile (defaults, rules and what their
    conditions look at, disabled features)."""
    server = profile.server
    names = set(server.defaults) | set(PLANNED_FIELDS)
    for name, rule in server.field_rules():
        names |= {name, *rule.when, *rule.unless}
    for spec in server.disabled_features.values():
        names |= set(spec.args)
    return names


def reads_model(profile: Profile) -> bool:
    """Whether a rule looks at the model (then the callers read its config.json)."""
    return any(rule.model is not None for rule in profile.server.rules.values())


def unknown_fields(profile: Profile, known: set[str]) -> list[str]:
    """Profile keys that name no ServerArgs field of the installed sglang."""
    return sorted(fields_read(profile) - known)

"""The server's defaults and rules (refusals), memory, and the environment floors."""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Any, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    field_validator,
    model_validator,
)

from sglx_core.env_bool import as_bool
from sglx_core.profile.schema.types import EnvName, Name, Scalar, Text, _Strict


class ModelCondition(_Strict):
    """Facts about the served model, read from `config.json` in its folder (model_path).

    A model_path that is not a local folder (a hub id), or a config.json that is missing,
    unreadable or not a sane JSON object, gives no facts: a rule with a model condition then
    does not apply."""

    head_dim_above: StrictInt | None = Field(
        default=None,
        ge=0,
        description="Applies when the model's attention head width is above this: config.json "
        "`head_dim`, else `hidden_size / num_attention_heads` (a multimodal model's "
        "`text_config` counts too; the widest wins).",
    )

    hybrid_swa: StrictBool | None = Field(
        default=None,
        description="Applies only when the model is (true) or is not (false) one sglang serves "
        "with a sliding-window KV pool beside the full one (sglang's is_hybrid_swa_model on "
        "config.json's architectures and text config). null: either.",
    )

    def holds(self, model: Mapping[str, Any]) -> bool:
        """Whether `model` (facts read from config.json; empty when none) matches."""
        if self.head_dim_above is not None:
            head_dim = model.get("head_dim")
            if not isinstance(head_dim, int) or head_dim <= self.head_dim_above:
                return False
        return self.hybrid_swa is None or model.get("hybrid_swa") is self.hybrid_swa


# ServerArgs field -> the values a condition looks for (a single value is read as a list of one).
Condition = dict[Name, tuple[Scalar, ...]]


class Rule(_Strict):
    """What a ServerArgs field may hold on this arch; anything else is refused (or warned).

    A rule may be conditional: it applies only when `when`, `unless` and `model` say so, read
    after the profile's defaults are applied. An unset field (null) is never refused."""

    field: Name | None = Field(
        default=None,
        description="The ServerArgs field the rule checks; null = the rule's key. Name it when "
        "one field has several rules (one shared by a family of arches and one of the arch's "
        "own, or one per condition), each under its own key.",
    )
    allow: tuple[Scalar, ...] | None = Field(default=None, description="Only these values.")
    deny: tuple[Scalar, ...] | None = Field(default=None, description="Any value but these.")
    match: Literal["exact", "glob"] = Field(
        default="exact",
        description="exact: allow/deny list values; glob: their strings are shell-style "
        "patterns (`*`, `?`, `[...]`) matched without regard to case, e.g. `EAGLE*`.",
    )
    when: Condition = Field(
        default_factory=dict,
        description="The rule applies only when every named ServerArgs field holds one of the "
        "listed values (after the profile's defaults), e.g. `{attention_backend: [wave]}`.",
    )
    unless: Condition = Field(
        default_factory=dict,
        description="The rule does not apply when any named ServerArgs field holds one of the "
        "listed values, e.g. `{disable_cuda_graph: [true]}`.",
    )
    model: ModelCondition | None = Field(
        default=None,
        description="The rule applies only to a model that matches this, read from config.json "
        "in the model's folder; a hub id or an unreadable config.json matches nothing.",
    )
    unless_env: tuple[EnvName, ...] = Field(
        default=(),
        description="The rule does not apply when one of these variables of the server's "
        "environment is switched on, read as sglang reads a boolean (`1`, `true`, `yes`, `y` in "
        "any case; sglx_core.env_bool), e.g. `[SGLANG_USE_AITER_UNIFIED_ATTN]`.",
    )
    default: Scalar = Field(
        default=None,
        description="When the rule applies and the user did not set the field, the plugin "
        "writes this value (one the rule permits) instead of refusing; a value the user set "
        "is still refused. null = no default.",
    )
    action: Literal["refuse", "warn"] = Field(
        default="refuse",
        description="refuse: the server does not start; warn: it starts and "
        "preflight reports the reason.",
    )
    reason: Text = Field(description="Why, in one sentence with its source.")
    instead: Text | None = Field(default=None, description="What to use instead.")

    @field_validator("when", "unless", mode="before")
    @classmethod
    def _values_as_lists(cls, value: Any) -> Any:
        if isinstance(value, Mapping):
            return {k: v if isinstance(v, list | tuple) else [v] for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _one_of_allow_deny(self) -> Rule:
        if (self.allow is None) == (self.deny is None):
            raise ValueError("give exactly one of 'allow' or 'deny'")
        if self.default is not None and not self.permits(self.default):
            raise ValueError(f"default {self.default!r} is one the rule itself refuses")
        return self

    @property
    def conditional(self) -> bool:
        """Whether the rule depends on other fields, the model or the environment."""
        return bool(self.when or self.unless or self.model is not None or self.unless_env)

    def applies(
        self,
        values: Mapping[str, Any],
        model: Mapping[str, Any],
        environ: Mapping[str, str] | None = None,
    ) -> bool:
        """Whether the conditions hold for these ServerArgs values, model facts and server
        environment (none given: no variable is switched on)."""
        if any(values.get(k) not in wanted for k, wanted in self.when.items()):
            return False
        if any(values.get(k) in wanted for k, wanted in self.unless.items()):
            return False
        environ = environ or {}
        if any(as_bool(environ.get(name, "")) for name in self.unless_env):
            return False
        return self.model is None or self.model.holds(model)

    def permits(self, value: Any) -> bool:
        if value is None:
            return True  # an unset field is never refused
        if self.allow is not None:
            return self._listed(value, self.allow)
        return not self._listed(value, self.deny or ())

    def _listed(self, value: Any, entries: tuple[Scalar, ...]) -> bool:
        if self.match == "glob" and isinstance(value, str):
            return any(
                isinstance(entry, str) and fnmatchcase(value.lower(), entry.lower())
                for entry in entries
            )
        return value in entries


class DisabledFeature(_Strict):
    """An sglang feature turned off on this arch."""

    args: dict[Name, Scalar] = Field(
        default_factory=dict,
        description="ServerArgs fields set to turn it off (may be empty "
        "when the platform itself turns it off, e.g. pynccl).",
    )
    forced: StrictBool = Field(
        default=False,
        description="true: a user flag turning it back on is refused; false: a "
        "default the user may override.",
    )
    reason: Text = Field(description="Why it is off, with its source.")


class Memory(_Strict):
    """Memory rules the server arguments must obey."""

    mem_fraction_static_max: StrictFloat | None = Field(
        default=None, gt=0, le=1, description="Refuse a --mem-fraction-static above this."
    )
    require_max_total_tokens: StrictBool = Field(
        default=False, description="Refuse to start without a bound on the KV cache in tokens."
    )


class Server(_Strict):
    """SGLang server defaults and refusals, applied by the plugin to ServerArgs."""

    defaults: dict[Name, Scalar] = Field(
        default_factory=dict, description="ServerArgs field -> value, applied when unset."
    )
    rules: dict[Name, Rule] = Field(
        default_factory=dict,
        description="Rule name -> rule. The name is the ServerArgs field the rule checks unless "
        "the rule names its `field`. Fragments and arches merge rules by name: an arch replaces "
        "a shared rule by reusing its name (`null` removes it) and adds one under a new name.",
    )
    disabled_features: dict[Name, DisabledFeature] = Field(default_factory=dict)
    speculative_decoding: Literal["never", "opt_in", "auto"] = Field(
        description="never: refused; opt_in: only when asked for with --speculative-algorithm; "
        "auto: sglang decides."
    )
    memory: Memory = Field(default_factory=Memory)

    @model_validator(mode="after")
    def _defaults_obey_rules(self) -> Server:
        for name, value in self.defaults.items():
            for key, rule in self.rules.items():
                if (rule.field or key) == name and not rule.conditional and not rule.permits(value):
                    raise ValueError(f"default {name}={value!r} is refused by rules.{key}")
        return self

    def field_rules(self) -> list[tuple[str, Rule]]:
        """Every rule with the ServerArgs field it checks."""
        return [(rule.field or name, rule) for name, rule in self.rules.items()]

    def rules_on(self, field: str) -> list[Rule]:
        """The rules that check `field`."""
        return [rule for name, rule in self.field_rules() if name == field]


class EnvFloor(_Strict):
    """A variable that must reach a minimum whenever other variables select a feature."""

    when: dict[EnvName, StrictStr] = Field(
        min_length=1, description="Variables (name -> value) that turn the feature on."
    )
    name: EnvName = Field(description="The variable the feature needs at a minimum.")
    minimum: StrictInt = Field(description="Lowest value the feature works with.")
    unset: StrictInt | None = Field(
        default=None, description="The value the runtime uses when `name` is unset."
    )
    action: Literal["refuse", "warn"] = Field(
        default="refuse",
        description="refuse (the default: a switched-on feature's floor is enforced): preflight "
        "fails; warn: it reports the reason and serving goes on.",
    )
    reason: Text = Field(description="What goes wrong below the minimum, with its source.")

"""The profile itself: every section above, and the checks across them."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    StrictStr,
    model_validator,
)

from sglx_core.profile.schema.container import Container, Devices, KfdProbe
from sglx_core.profile.schema.gate import Gate, Observability
from sglx_core.profile.schema.host import Host, Ranks
from sglx_core.profile.schema.image import BaseImage, Platform, Python, SGLang, Support
from sglx_core.profile.schema.kernels import Kernels, Scan
from sglx_core.profile.schema.server import EnvFloor, Server
from sglx_core.profile.schema.serving import Serving, flag_field
from sglx_core.profile.schema.tuning import CommDebugVar, Tuning
from sglx_core.profile.schema.types import EnvName, Name, Text, _Strict
from sglx_core.profile.schema.weights import Weights


class Profile(_Strict):
    """One architecture, fully resolved."""

    schema_version: Literal[1] = Field(description="Profile format version.")
    arch: Name = Field(description="Arch name; must equal the profile's folder name.")
    description: Text = Field(description="One line naming the hardware.")
    machine: Literal["x86_64", "aarch64"] = Field(description="CPU architecture of the hosts.")
    support: Support
    platform: Platform
    base: BaseImage
    python: Python
    sglang: SGLang
    devices: Devices
    container: Container
    env: dict[EnvName, StrictStr] = Field(
        default_factory=dict, description="Environment baked into the image as ENV (strings)."
    )
    env_forbidden: dict[EnvName, Text] = Field(
        default_factory=dict, description="Variables that must not be set, with the reason."
    )
    comm_debug: dict[EnvName, CommDebugVar] = Field(
        default_factory=dict,
        description="Variables that make the arch's collective library and torch.distributed "
        "log and trace each communication, for one restart of a server (ansible "
        "comm-debug.yml: the first step for a multi-card hang); empty = no such switch.",
    )
    env_floors: dict[Name, EnvFloor] = Field(
        default_factory=dict,
        description="Couplings between variables: a feature switched on by some variables "
        "needs another at a minimum (preflight and the host checks read the served "
        "environment).",
    )
    server: Server
    ranks: Ranks
    weights: Weights
    kernels: Kernels
    scan: Scan
    host: Host
    serving: Serving = Field(
        default_factory=Serving,
        description="Serving profiles chosen at start from the detected devices and the model "
        "(docs/reference/serving.md).",
    )
    gate: Gate = Field(
        default_factory=Gate,
        description="The serving gate's settings: tolerances of the golden-numerics replay, the "
        "collective smoke before a serving group starts (docs/reference/gate.md).",
    )
    tuning: Tuning = Field(
        default_factory=Tuning,
        description="Tuned GEMM configurations a tuned set may carry (docs/reference/tuned.md).",
    )
    observability: Observability = Field(
        default_factory=Observability,
        description="Metrics for the site's Prometheus (docs/reference/observability.md).",
    )

    @model_validator(mode="after")
    def _cross_checks(self) -> Profile:
        clash = set(self.env) & set(self.env_forbidden)
        if clash:
            raise ValueError(f"{sorted(clash)} both set in 'env' and listed in 'env_forbidden'")
        clash = set(self.comm_debug) & set(self.env_forbidden)
        if clash:
            raise ValueError(
                f"{sorted(clash)} both set in 'comm_debug' and listed in 'env_forbidden'"
            )
        if self.sglang.wheel == "base" and "sglang" not in self.base.provides:
            raise ValueError("sglang.wheel is 'base' but base.provides does not list sglang")
        expected_probe = {"cpu": "none", "rocm": "kfd", "kunlun": "kunlun"}[self.platform.family]
        if self.devices.probe.kind != expected_probe:
            raise ValueError(
                f"platform.family '{self.platform.family}' needs devices.probe.kind "
                f"'{expected_probe}', found '{self.devices.probe.kind}'"
            )
        if self.kernels.prebuilt_cache is not None and (
            not self.kernels.triton
            or self.kernels.warp_size is None
            or not isinstance(self.devices.probe, KfdProbe)
        ):
            raise ValueError(
                "kernels.prebuilt_cache needs kernels.triton true, kernels.warp_size and a kfd "
                "devices.probe (its gfx_target_versions name the targets)"
            )
        return self

    @model_validator(mode="after")
    def _serving_args_obey_rules(self) -> Profile:
        """A serving profile may not set what the arch refuses: it would refuse itself."""
        for name, serving in self.serving.profiles.items():
            for flag, value in serving.args.items():
                field = flag_field(flag)
                for rule in self.server.rules_on(field):
                    if not rule.conditional and not rule.permits(value):
                        raise ValueError(
                            f"serving.profiles.{name}.args.{flag}={value!r} is refused by the "
                            f"arch's rule on {field}: {rule.reason}"
                        )
                for feature, spec in self.server.disabled_features.items():
                    if spec.forced and field in spec.args and spec.args[field] != value:
                        raise ValueError(
                            f"serving.profiles.{name}.args.{flag}={value!r} turns {feature} "
                            f"back on, which is off on {self.arch}: {spec.reason}"
                        )
                limit = self.server.memory.mem_fraction_static_max
                if (
                    field == "mem_fraction_static"
                    and limit is not None
                    and isinstance(value, int | float)
                    and not isinstance(value, bool)
                    and value > limit
                ):
                    raise ValueError(
                        f"serving.profiles.{name}.args.{flag}={value!r} is above the arch's "
                        f"memory.mem_fraction_static_max {limit}"
                    )
        return self

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

"""Serving profiles: chosen at start from the detected devices and the model."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from sglx_core.profile.schema.types import EnvName, Name, Text, _Strict

# --- Serving profiles (issue 24): chosen at start from the detected devices and the model ---

AcceleratorName = Annotated[
    str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
]
# A launch_server flag without its dashes: `tp`, `mem-fraction-static`.
FlagName = Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")]
PciId = Annotated[str, StringConstraints(strict=True, pattern=r"^0x[0-9a-f]{4}$")]
ArgValue = StrictBool | StrictInt | StrictFloat | StrictStr
# sglang flags whose ServerArgs field is not the flag with '_' for '-' (sglang 0.5.23,
# srt/arg_groups/fields/parallel.py: tp_size answers to --tp-size and --tensor-parallel-size, and
# argparse's prefix matching makes --tp the same flag; likewise --dp for --dp-size).
FLAG_FIELDS: dict[str, str] = {"tp": "tp_size", "dp": "dp_size", "ep": "ep_size", "pp": "pp_size"}


def flag_field(flag: str) -> str:
    """The ServerArgs field a serving-profile arg (a flag without dashes) sets."""
    return FLAG_FIELDS.get(flag, flag.replace("-", "_"))


class AcceleratorModel(_Strict):
    """One accelerator model of the arch, and how the start-up probe tells it from the others."""

    gfx_target_version: StrictInt | None = Field(
        default=None,
        description="KFD topology `gfx_target_version` of the device (rocm; 90402 = gfx942); "
        "null = not identified by it.",
    )
    pci_device_ids: tuple[PciId, ...] = Field(
        default=(),
        description="PCI device ids (sysfs `device`, e.g. 0x74a1) of this model: models that "
        "share a gfx target (MI300X and MI325X) are told apart by them.",
    )
    memory_gib: StrictFloat | StrictInt | None = Field(
        default=None,
        gt=0,
        description="Nominal memory per device in GiB, shown to the operator and used to tell "
        "models apart when ids are shared; null = read from the device only (an APU's carve-out).",
    )
    source: Text = Field(description="Where the ids and the memory come from (doc URL, issue).")


class ServingMatch(_Strict):
    """What a host and a model must be for a serving profile to apply. Empty = any."""

    accelerators: tuple[AcceleratorName, ...] = Field(
        default=(),
        description="Keys of serving.accelerators the profile is for; empty = any device of "
        "the arch.",
    )
    devices: tuple[Annotated[int, Field(strict=True, ge=1)], ...] = Field(
        default=(),
        description="Device counts the profile uses (its tensor parallelism); the host needs at "
        "least that many, and a host with exactly that many prefers it. Empty = any count.",
    )
    min_memory_gib_per_device: StrictFloat | StrictInt | None = Field(
        default=None, gt=0, description="Least memory each device must report, in GiB."
    )
    precision: tuple[Name, ...] = Field(
        default=(),
        description="Model precisions it serves: the checkpoint's quantization method (fp8, "
        "awq, ...) or, unquantized, its dtype (bf16, fp16, fp32). Empty = any.",
    )
    metric: Literal["latency", "throughput"] | None = Field(
        default=None,
        description="What it is tuned for (SGLX_SERVING_METRIC asks for one); null = either.",
    )
    min_cores: StrictInt | None = Field(
        default=None, ge=1, description="cpu: least CPU cores the process may use."
    )
    numa_nodes: tuple[Annotated[int, Field(strict=True, ge=1)], ...] = Field(
        default=(), description="cpu: NUMA node counts it applies to; empty = any."
    )


class ServingProfile(_Strict):
    """Server arguments and environment for one kind of host, chosen at start when it matches."""

    description: Text = Field(description="One line: the hardware and what it is tuned for.")
    match: ServingMatch = Field(default_factory=ServingMatch)
    args: dict[FlagName, ArgValue] = Field(
        default_factory=dict,
        description="launch_server flags without dashes -> value (`tp: 8`; true = the bare flag, "
        "false = left out). Written before the user's arguments, so a user flag wins.",
    )
    env: dict[EnvName, StrictStr] = Field(
        default_factory=dict,
        description="Variables it sets, unless `docker run -e` set them already.",
    )
    rank: Literal["optimized", "general"] = Field(
        description="optimized: tuned for the matched hardware, chosen first; general: a "
        "fallback that still matches only the hardware it names (never a silent generic pick)."
    )
    select: Literal["auto", "by_name"] = Field(
        default="auto",
        description="auto: chosen when it matches; by_name: only where SGLX_SERVING_PROFILE "
        "names it (a prefill or decode role of a disaggregated deployment, which a host must "
        "never take on its own).",
    )
    concurrency: StrictInt = Field(
        default=1,
        ge=1,
        description="Requests the capacity check must hold at the full context length at once.",
    )
    sources: dict[Text, Text] = Field(
        default_factory=dict,
        description="Arg or env name -> where its value comes from (doc URL, issue, release "
        "note): every key of args and env needs one.",
    )

    @model_validator(mode="after")
    def _every_value_sourced(self) -> ServingProfile:
        missing = sorted((set(self.args) | set(self.env)) - set(self.sources))
        if missing:
            raise ValueError(f"no source for {missing}: add a sources entry for each")
        stray = sorted(set(self.sources) - set(self.args) - set(self.env))
        if stray:
            raise ValueError(
                f"sources names {stray}, which the profile neither sets in args nor env"
            )
        return self


class LongContextFraction(_Strict):
    """A cut sglang applies to --mem-fraction-static itself for long contexts, which the
    capacity check must budget for."""

    above_context: StrictInt = Field(ge=1, description="Applies when the context is above this.")
    factor: StrictFloat = Field(gt=0, le=1, description="The fraction is multiplied by this.")
    attention_backends: tuple[Name, ...] = Field(
        min_length=1,
        description="Attention backends it applies to (an unset backend counts as the first).",
    )
    unless_env: EnvName | None = Field(
        default=None, description="A variable that, set to 1, turns the cut off."
    )
    source: Text = Field(description="Where sglang does this (PR, file).")


class DecodeContextParallel(_Strict):
    """sglang's decode context parallelism (`--dcp-size`) on this arch, which the capacity
    check offers as a fix for a context that does not fit."""

    attention_backends: tuple[Name, ...] = Field(
        min_length=1,
        description="Attention backends that serve it here (an unset backend counts as the first).",
    )
    source: Text = Field(description="Where sglang supports it on this platform (file, PR).")


class Serving(_Strict):
    """Accelerator models of the arch and the serving profiles `sglx-serve` chooses from."""

    accelerators: dict[AcceleratorName, AcceleratorModel] = Field(
        default_factory=dict,
        description="Accelerator model name (as the vendor writes it, e.g. MI300X) -> how to "
        "identify it. A map so fragments can add to it.",
    )
    profiles: dict[Name, ServingProfile] = Field(
        default_factory=dict, description="Profile name -> serving profile."
    )
    capacity_fraction: StrictFloat | None = Field(
        default=None,
        gt=0,
        le=1,
        description="Fraction of device memory the capacity check budgets for weights and KV "
        "cache when it is not the served --mem-fraction-static (the cpu platform, whose KV "
        "cache max_total_tokens bounds); null = the served fraction.",
    )
    long_context_fraction: LongContextFraction | None = Field(
        default=None, description="sglang's own cut of the memory fraction at long contexts."
    )
    decode_context_parallel: DecodeContextParallel | None = Field(
        default=None,
        description="Where sglang splits the KV cache's tokens across the ranks of a TP group "
        "(`--dcp-size`); null = the capacity check never offers it.",
    )

    @model_validator(mode="after")
    def _accelerators_known(self) -> Serving:
        for name, profile in self.profiles.items():
            unknown = sorted(set(profile.match.accelerators) - set(self.accelerators))
            if unknown:
                raise ValueError(
                    f"profiles.{name}.match.accelerators names {unknown}, not in "
                    f"serving.accelerators ({sorted(self.accelerators)})"
                )
        return self

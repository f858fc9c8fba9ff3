"""sglx's kernels and their prebuilt cache, and the scan's rules."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import (
    Field,
    StrictBool,
    StringConstraints,
    model_validator,
)

from sglx_core.profile.schema.types import AbsPath, Text, _Strict

SglangOp = Literal["rms_norm", "layer_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding"]


class PrebuiltCache(_Strict):
    """Triton cache entries compiled at image build for the arch's devices (sglx_kernels.warm).

    The targets are the gfx names of `devices.probe.gfx_target_versions` with `kernels.warp_size`;
    the shapes come from the baked model at each tensor-parallel size of `serving.profiles`.
    """

    backend: Literal["hip"] = Field(description="Triton backend of the devices (hip on ROCm).")
    tokens: tuple[Annotated[int, Field(strict=True, ge=1, le=1 << 20)], ...] = Field(
        min_length=1,
        max_length=64,
        description="Tokens per launch to compile for: Triton specializes on a count of 1 and "
        "on divisibility by 16, and the launch plan on the count's remainder per block.",
    )


class Kernels(_Strict):
    """sglx kernels on this arch."""

    triton: StrictBool = Field(description="sglx Triton kernels run on the device.")
    serve: tuple[SglangOp, ...] = Field(
        default=(),
        description="sglang ops whose forward sglx kernels take over on this arch (ops not "
        "listed keep sglang's own, e.g. AITER, forwards). rms_norm covers the fused "
        "residual-add variant.",
    )
    warp_size: Literal[32, 64] | None = Field(
        default=None, description="Threads per warp/wavefront (64 on CDNA, 32 on RDNA)."
    )
    prebuilt_cache: PrebuiltCache | None = Field(
        default=None,
        description="Compile sglx's Triton kernels into the image for its devices; null = none.",
    )


Pattern = Annotated[str, StringConstraints(strict=True, min_length=1)]


class Scan(_Strict):
    """Rules for `sglx scan`: sonames (fnmatch globs on full sonames) and paths."""

    require: dict[Pattern, Text] = Field(
        default_factory=dict, description="Sonames that must resolve inside the image."
    )
    host_provided: dict[Pattern, Text] = Field(
        default_factory=dict, description="Sonames the host injects at run time (reported)."
    )
    forbidden: dict[Pattern, Text] = Field(
        default_factory=dict, description="Sonames that must never appear in the image."
    )
    dlopen: dict[Pattern, Text] = Field(
        default_factory=dict,
        description="Libraries loaded with dlopen (invisible in ELF "
        "links); must be present in the library search path.",
    )
    data_files: dict[Pattern, Text] = Field(
        default_factory=dict,
        description="Path globs (from the image root) of files read at run time that must exist.",
    )
    optional_files: dict[AbsPath, Text] = Field(
        default_factory=dict,
        description="Path globs (from the image root) of plugins loaded only when their "
        "optional dependency is configured: their unresolved dependencies are reported as "
        "accepted, not as findings.",
    )
    loaded_first: dict[Pattern, Text] = Field(
        default_factory=dict,
        description="Sonames accepted when unresolved if a scanned file of that name exists "
        "elsewhere in the root: the process loads it before the library that needs it (torch "
        "before torchvision). Still a finding when no such file exists.",
    )

    @model_validator(mode="after")
    def _no_overlap(self) -> Scan:
        pairs = (
            ("require", "forbidden"),
            ("host_provided", "forbidden"),
            ("loaded_first", "forbidden"),
            ("loaded_first", "host_provided"),
        )
        for a, b in pairs:
            both = set(getattr(self, a)) & set(getattr(self, b))
            if both:
                raise ValueError(f"{sorted(both)} listed in both '{a}' and '{b}'")
        return self

"""How the image is made: its platform, its base, Python and sglang."""

from __future__ import annotations

from typing import Annotated, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import (
    Field,
    StrictBool,
    StrictStr,
    StringConstraints,
    field_validator,
    model_validator,
)

from sglx_core.digests import StrictDigest
from sglx_core.profile.schema.types import AbsPath, Name, Text, _Strict


class Support(_Strict):
    """How far sglx stands behind this arch."""

    level: Literal["reference", "supported", "experimental"] = Field(
        description="reference: proven end to end in CI; supported: built and checked on fixtures, "
        "validated on hardware by the site; experimental: known upstream gaps (see notes)."
    )
    notes: tuple[Text, ...] = Field(
        default=(), description="Known gaps and their upstream references, shown by preflight."
    )


class Capabilities(_Strict):
    """sglang's `PlatformCapabilities` for this arch (every field defaults to off)."""

    supports_triton: StrictBool = Field(default=False, description="Triton kernels can launch.")
    graph_capture: StrictBool = Field(default=False, description="Decode graph capture runs.")
    piecewise_graph: StrictBool = Field(
        default=False, description="Prefill piecewise compilation runs."
    )
    hicache_device_kernels: StrictBool = Field(
        default=False, description="sgl_kernel HiCache transfer kernels exist."
    )
    supports_pynccl: StrictBool = Field(
        default=False, description="Model-parallel groups may create a PyNccl communicator."
    )


class VendorPlatform(_Strict):
    """The vendor's own sglang platform package that the sglx platform stands on."""

    distribution: Name = Field(
        description="The vendor's Python distribution (e.g. sglang-kunlun), carried by the base."
    )
    entry_point: Name = Field(
        description="Its own name under sglang's `sglang.srt.platforms` group. SGLANG_PLATFORM "
        "selects sglx, so sglang skips this distribution's general plugins "
        "(`sglang.srt.plugins`); sglx's own general plugin runs them instead."
    )
    source: Text = Field(description="Where the vendor package and its entry points are defined.")
    sglang_validated: dict[Text, Text] = Field(
        default_factory=dict,
        description="Vendor release -> the sglang release its vendor validates it with (its own "
        "CI). `image build` and preflight compare the base's release with the profile's sglang "
        "and warn where the vendor never ran the pair.",
    )


class Platform(_Strict):
    """How the sglx SGLang plugin presents this arch to sglang."""

    family: Literal["cpu", "rocm", "kunlun"] = Field(
        description="Which sglx platform class serves the arch: cpu (out-of-tree CPU platform), "
        "rocm (subclass of sglang's in-tree ROCm platform), kunlun (subclass of sglang-kunlun's "
        "out-of-tree platform, `vendor`)."
    )
    vendor: VendorPlatform | None = Field(
        default=None,
        description="The vendor platform package the family's class subclasses, when it is not "
        "in sglang itself: activation and preflight require it, and its general plugins run.",
    )
    entry_point: Name = Field(
        description="Name under sglang's `sglang.srt.platforms` entry-point group; images set "
        "SGLANG_PLATFORM to it so a broken plugin stops the server instead of falling back."
    )
    device_type: Literal["cpu", "cuda"] = Field(
        description="torch device type sglang allocates on (HIP and xpytorch both present as "
        "'cuda')."
    )
    dispatch_key: Name = Field(
        description="Key under which fused-op forwards are registered and dispatched."
    )
    distributed_backend: Literal["gloo", "nccl"] = Field(
        description="torch.distributed backend name (RCCL and BKCL both answer to 'nccl')."
    )
    capabilities: Capabilities
    profiler_activity: Literal["CPU", "CUDA"] = Field(
        default="CPU",
        description="The torch profiler activity sglang's /start_profile records for this "
        "platform's device (asked of out-of-tree platforms only; sglang 0.5.23's DeviceMixin "
        "raises, which stopped the server): CPU where no device activity is known.",
    )


class Debootstrap(_Strict):
    """How `sglx base build` makes a base from Debian packages, with no registry."""

    suite: Name = Field(description="Debian suite, e.g. bookworm.")
    mirror: Annotated[str, StringConstraints(strict=True, pattern=r"^(https?|file)://\S+$")] = (
        Field(description="Debian mirror URL (a local mirror in an air-gapped site).")
    )
    variant: Literal["minbase", "buildd"] = Field(
        default="minbase", description="debootstrap --variant."
    )
    packages: tuple[Name, ...] = Field(
        default=(), description="Extra Debian packages baked into the base."
    )


Digest = StrictDigest


class BaseImage(_Strict):
    """The image everything else is layered on, and how a site without a registry gets it."""

    ref: Annotated[
        str, StringConstraints(strict=True, pattern=r"^[a-z0-9][a-z0-9._/-]*(:[A-Za-z0-9._-]+)?$")
    ] = Field(description="Image reference the Dockerfile builds FROM.")
    source: Literal["build", "load"] = Field(
        description="build: `sglx base build` makes it locally; load: carried in as a tar and "
        "loaded with `sglx base load FILE`."
    )
    digest: Digest | None = Field(
        default=None, description="Expected image id (sha256:...) when pinned; null = not pinned."
    )
    obtain: Text = Field(description="How to obtain the base offline, shown when it is missing.")
    tag_pattern: Text | None = Field(
        default=None,
        description="Where upstream publishes no tag for this release, only dated builds: the "
        "tag pattern to look for (e.g. rocm/sgl-dev:v0.5.23-rocm724-gfx1151-YYYYMMDD). The "
        "build names it when the base is missing or ships another sglang; null = the ref is a "
        "published tag.",
    )
    build: Debootstrap | None = Field(default=None, description="Required when source is build.")
    provides: tuple[Name, ...] = Field(
        default=(),
        description="Python distributions the base owns (torch, triton, vendor packages; sglang "
        "itself when sglang.wheel is 'base'); a wheel lock that would replace one of them is "
        "refused, and preflight reports any the base turns out to lack.",
    )
    rocm: Text | None = Field(
        default=None,
        description="PEP 440 specifier the base's ROCm release must satisfy, read from "
        "/opt/rocm/.info/version, /opt/rocm/core/.info/version or the rocm-sdk-core "
        "distribution's version (the ROCm pip SDK), the first that declares one; null = no "
        "ROCm in the base. The build refuses a base outside it, preflight checks it.",
    )

    @field_validator("rocm")
    @classmethod
    def _rocm_pep440(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                SpecifierSet(value)
            except InvalidSpecifier as exc:
                raise ValueError(f"not a PEP 440 version specifier ({exc})") from None
        return value

    @model_validator(mode="after")
    def _build_matches_source(self) -> BaseImage:
        if self.source == "build" and self.build is None:
            raise ValueError("source is 'build' but no 'build' section says how to build it")
        if self.source == "load" and self.build is not None:
            raise ValueError("source is 'load' but a 'build' section is present; remove one")
        return self


class Python(_Strict):
    """The Python that serves inside the image."""

    version: Annotated[str, StringConstraints(strict=True, pattern=r"^3\.\d{1,2}$")] = Field(
        description='Major.minor of the serving Python, quoted ("3.11").'
    )
    executable: AbsPath = Field(description="The base's interpreter, which creates the venv.")
    venv: AbsPath = Field(
        description="Virtual environment sglx installs into. It sees the base's site-packages "
        "when the base provides packages (base.provides), so the base's torch stays in charge."
    )
    glibc: Annotated[str, StringConstraints(strict=True, pattern=r"^2\.\d+$")] = Field(
        description='glibc of the base, quoted ("2.36"); the lock takes manylinux wheels up to it.'
    )
    torch: Text = Field(description="PEP 440 specifier the image's torch must satisfy.")
    requirements: dict[Name, StrictStr] = Field(
        description="What sglx installs on top of the base: distribution -> PEP 440 version "
        "specifier ('' = any). `sglx wheels lock` resolves them and their dependencies into "
        "bundles/locks/<arch>.txt with hashes. A map so fragments can add to it."
    )
    no_deps: tuple[Name, ...] = Field(
        default=(),
        description="Requirements whose declared dependencies are not followed (sglang pins "
        "CUDA-only kernels it does not need to serve here); what they need is listed instead.",
    )

    @field_validator("torch")
    @classmethod
    def _pep440(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier as exc:
            raise ValueError(f"not a PEP 440 version specifier ({exc})") from None
        return value

    @field_validator("requirements")
    @classmethod
    def _specifiers(cls, values: dict[str, str]) -> dict[str, str]:
        for name, spec in values.items():
            try:
                SpecifierSet(spec)
            except InvalidSpecifier as exc:
                raise ValueError(f"{name}: {spec!r} is not a PEP 440 specifier ({exc})") from None
        return values

    @model_validator(mode="after")
    def _no_deps_are_required(self) -> Python:
        stray = sorted(set(self.no_deps) - set(self.requirements))
        if stray:
            raise ValueError(f"no_deps names {stray}, which are not in requirements")
        return self


class SGLang(_Strict):
    """Which sglang the image serves with and where its wheel comes from."""

    version: Annotated[str, StringConstraints(strict=True, pattern=r"^\d+\.\d+\.\d+\S*$")] = Field(
        description="sglang release the image serves with."
    )
    wheel: Literal["pypi", "source", "base"] = Field(
        description="Where sglang comes from, which selects the image's build route. pypi: the "
        "PyPI wheel (cp311 and cp312; its declared dependencies pin CUDA packages, so it goes in "
        "with --no-deps); source: a wheel the site built from the release tag for the base's "
        "Python, put in the wheelhouse; base: the base image ships sglang (upstream's SGLang "
        "ROCm images, with sgl-kernel and AITER built for the target), so the build installs "
        "only what sglx adds and only the locked wheels the base lacks, and refuses a base "
        "whose sglang is not `version`."
    )

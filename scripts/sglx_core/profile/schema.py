"""The profile schema: every key of `images/<arch>/arch.yaml`, its type and meaning.

Each model forbids unknown keys and is frozen once loaded. Field descriptions are the reference
documentation: `sglx arch schema` renders them into docs/reference/profile.md.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    field_validator,
    model_validator,
)

from sglx_core.digests import StrictDigest, StrictSha256
from sglx_core.env_bool import as_bool
from sglx_core.sizes import SIZE_PATTERN

SCHEMA_VERSION = 1

Name = Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z][a-z0-9_.-]*$")]
EnvName = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Z_][A-Z0-9_]*$")]
AbsPath = Annotated[str, StringConstraints(strict=True, pattern=r"^/\S*$")]
Text = Annotated[str, StringConstraints(strict=True, min_length=1)]
# Values a ServerArgs field can take in a default or a rule.
Scalar = StrictBool | StrictInt | StrictFloat | StrictStr | None


class _Strict(BaseModel):
    """Every schema object: unknown keys are errors, values are immutable after loading."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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


class DeviceNode(_Strict):
    """A device path the container needs, passed with --device."""

    path: Annotated[str, StringConstraints(strict=True, pattern=r"^/dev/\S+$")] = Field(
        description="Device path; a glob (e.g. /dev/xpu[0-9]*) matches numbered cards."
    )
    kind: Literal["char", "dir"] = Field(description="char device, or a directory of devices.")
    required: StrictBool = Field(default=True, description="Serving fails without it.")
    purpose: Text = Field(description="What needs it; shown when it is missing.")


class NoProbe(_Strict):
    """No device to find (the cpu reference)."""

    kind: Literal["none"]


class KfdProbe(_Strict):
    """AMD: read the KFD topology (sysfs) for GPU nodes of the right gfx target."""

    kind: Literal["kfd"]
    gfx_target_versions: tuple[StrictInt, ...] = Field(
        min_length=1,
        description="`gfx_target_version` values in /sys/class/kfd/kfd/topology/nodes/*/"
        "properties that belong to this arch (gfx942 = 90402).",
    )


class KunlunProbe(_Strict):
    """Kunlun: device nodes plus the PCI ids in sysfs; never imports the vendor stack."""

    kind: Literal["kunlun"]
    pci_vendors: tuple[
        Annotated[str, StringConstraints(strict=True, pattern=r"^0x[0-9a-f]{4}$")], ...
    ] = Field(
        min_length=1,
        description="PCI vendor ids the cards report (sysfs `vendor`), e.g. 0x1d22 and 0x2057: "
        "Kunlunxin's cards carry either.",
    )
    pci_devices: tuple[Annotated[str, StringConstraints(pattern=r"^0x[0-9a-f]{4}$")], ...] = Field(
        min_length=1, description="PCI device ids of supported cards."
    )
    version_file: AbsPath = Field(description="Driver version file (KLRM version).")


class Devices(_Strict):
    """Device nodes, the groups that may open them, and how to find the hardware."""

    nodes: tuple[DeviceNode, ...] = ()
    groups: tuple[Name, ...] = Field(
        default=(), description="Groups the runtime user joins to open the device nodes."
    )
    numeric_gids: StrictBool = Field(
        default=False,
        description="Pass groups to the container by the host's numeric GID (the image may not "
        "know the host's render GID).",
    )
    probe: NoProbe | KfdProbe | KunlunProbe = Field(discriminator="kind")


class Mount(_Strict):
    """A host path bind-mounted into the server container."""

    source: AbsPath = Field(description="Path on the host.")
    target: AbsPath = Field(description="Path in the container.")
    read_only: StrictBool = Field(default=True, description="Mount read-only.")
    required: StrictBool = Field(
        default=False, description="Serving fails without it (else skipped when absent)."
    )
    purpose: Text = Field(description="Why the container needs it.")


class LockDir(_Strict):
    """The host folder of the device-init lock, mounted into every server container.

    The plugin serialises device bring-up with an flock on the folder $SGLX_LOCK_DIR names
    (plugin/sglx_platform/device_init.py). Every `docker run` sglx writes (the systemd unit,
    install.sh, `sglx bundle install`) mounts `source` at `target` and sets SGLX_LOCK_DIR to
    `target`, so all server containers of a host take one lock. Neither is baked into the image:
    a container run by hand without the mount keeps a lock of its own."""

    source: AbsPath = Field(
        description="Folder on the host; the role creates it (root, 0755) and `docker run -v` "
        "creates it when absent: the lock needs only read access."
    )
    target: AbsPath = Field(description="Where the container sees it; SGLX_LOCK_DIR is set to it.")


class JitCache(_Strict):
    """The node-local JIT cache: one host folder per image id, mounted where the profile's
    JIT caches live (TRITON_CACHE_DIR, AITER_JIT_DIR and the like point under `target`).

    The host folder of an image is `<host_root>/<image id hex, without "sha256:">`: never shared
    between images, so never reused across arch or image; owned by container.uid, mode 0700.
    Every `docker run` sglx writes (the systemd unit, install.sh, `sglx bundle install`)
    creates it and mounts it at `target`, naming it in SGLX_JIT_CACHE_HOST. The server loads
    code from it, so sglx-serve refuses to start when the folder is not its own, mode 0700
    (plugin/sglx_platform/jit_cache.py)."""

    target: AbsPath = Field(
        description="The folder in the container (the image makes it, owned by the runtime "
        "user, mode 0700)."
    )
    host_root: AbsPath = Field(
        description="Folder on the host that holds one cache folder per image id; a site may "
        "override it (sglang_service_jit_cache_root, install.sh and `sglx bundle install` "
        "--jit-root).",
    )


class Container(_Strict):
    """How the server container runs (docker run flags, Docker SDK arguments)."""

    user: Name = Field(description="Runtime user; 'root' only where the vendor stack needs it.")
    uid: StrictInt = Field(ge=0, description="UID of the runtime user inside the image.")
    ipc: Literal["host", "private", "shareable"] = Field(
        default="private", description="--ipc mode (host when ranks share memory)."
    )
    shm_size: Annotated[str, StringConstraints(strict=True, pattern=r"^\d+[kmg]$")] = Field(
        description="--shm-size (e.g. 16g)."
    )
    cap_add: tuple[Annotated[str, StringConstraints(pattern=r"^[A-Z_]+$")], ...] = Field(
        default=(), description="--cap-add capabilities (never --privileged)."
    )
    security_opt: tuple[Text, ...] = Field(default=(), description="--security-opt values.")
    ulimits: dict[Name, StrictInt] = Field(default_factory=dict, description="-1 = unlimited.")
    mounts: tuple[Mount, ...] = Field(default=(), description="Host paths bind-mounted in.")
    lock_dir: LockDir = Field(
        description="Host folder of the device-init lock (one per host, shared by its servers)."
    )
    jit_cache: JitCache = Field(
        description="Node-local JIT cache folder, one per image id on each host."
    )
    network: Literal["bridge", "host"] = Field(
        default="bridge", description="Container network (host only for multi-node/RDMA)."
    )
    port: StrictInt = Field(ge=1, le=65535, description="Port the server listens on.")


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


class CheckpointRoute(_Strict):
    """How sglang serves a checkpoint of one `quant_method` (config.json) on this arch when no
    `--quantization` is given: the method it resolves it to, which the profile's quantization
    rules then judge at `sglx weights convert` as they judge the flag."""

    served_as: Annotated[str, StringConstraints(strict=True, pattern=r"^[a-z0-9][a-z0-9_-]*$")] = (
        Field(description="The quantization method sglang serves such a checkpoint as.")
    )
    quant_algo: list[Annotated[str, StringConstraints(strict=True, min_length=1)]] = Field(
        default_factory=list,
        description="The checkpoint's `quant_algo` values that route takes (config.json "
        "quantization_config); another is refused naming them. Empty: any.",
    )
    reason: Annotated[str, StringConstraints(strict=True, min_length=1)] = Field(
        description="Why, with its source (the sglang wheel's file, a vendor's doc)."
    )


class ModelAssets(_Strict):
    """Files a model of one architecture reads from outside its weights when it starts, which
    nothing may download in an air-gapped site: they must lie beside config.json."""

    files: dict[
        Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")],
        StrictSha256,
    ] = Field(description="File name -> its sha256 (hex), each from its publisher's source.")
    env: dict[EnvName, Annotated[str, StringConstraints(strict=True, min_length=1)]] = Field(
        default_factory=dict,
        description="Variables that point the model's loaders at the files; `{model}` stands "
        "for the model's folder. A variable the server already has (docker run -e) is kept.",
    )
    source: Annotated[str, StringConstraints(strict=True, min_length=1)] = Field(
        description="Where each file is published, for the operator who fetches it."
    )
    reason: Annotated[str, StringConstraints(strict=True, min_length=1)] = Field(
        description="Why the model needs them, with its source."
    )


class Weights(_Strict):
    """How `sglx weights convert` stores weights for this arch, and where large ones live."""

    dtype: Literal["float32", "float16", "bfloat16"] = Field(
        description="Floating-point dtype converted weights are stored in."
    )
    outside_above: Annotated[str, StringConstraints(strict=True, pattern=SIZE_PATTERN)] = Field(
        description="Converted weights larger than this (a size: 4GiB, 700MB, bytes) are not "
        "baked into the image: `sglx image build` keeps them in the weights store, and a bundle "
        "carries them beside the image, or, for a delta over a bundle with the same weights, "
        "names them by digest only. A site overrides it with `sglx image build "
        "--weights-outside-above SIZE` or SGLX_WEIGHTS_OUTSIDE_ABOVE."
    )
    store: Annotated[str, StringConstraints(strict=True, pattern=r"^(/[A-Za-z0-9_.-]+)+$")] = Field(
        description="Root of the node-local weights store: one folder per weights manifest "
        "digest (`<store>/<64 hex>`), placed once and verified by `sglx bundle install`, "
        "install.sh and the bundle_install role, shared by image versions and mounted "
        "read-only at the image's model folder. A site moves it with --models-root, "
        "SGLX_MODELS_ROOT, bundle_install_models_root and sglang_service_models_root."
    )
    checkpoint_routes: dict[str, CheckpointRoute] = Field(
        default_factory=dict,
        description="By a checkpoint's config.json `quant_method`: the method sglang serves "
        "it as on this arch (e.g. ModelOpt NVFP4 through Petit on HIP). `sglx weights convert` "
        "holds that method, not the checkpoint's name for it, against the quantization rules.",
    )
    model_assets: dict[
        Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z][A-Za-z0-9_]*$")],
        ModelAssets,
    ] = Field(
        default_factory=dict,
        description="By a config.json architecture: files the model loads at start from outside "
        "its weights. `sglx weights convert` refuses a checkpoint without them (naming each "
        "file, its sha256 and its source) and carries them; sglx-serve refuses to start such a "
        "model without them and sets the variables that point at them.",
    )


ServedDtype = Literal["float32", "float16", "bfloat16"]


class NumericsTolerance(_Strict):
    """How far served log-probabilities may stray from the float32 reference, for one served
    dtype (sglx_core.gate.golden.Tolerance; docs/reference/gate.md derives each)."""

    max_abs: StrictFloat = Field(
        gt=0, description="Largest |served - reference| log-probability at any token of a prompt."
    )
    mean_abs: StrictFloat = Field(
        gt=0, description="Largest mean |served - reference| over one prompt's tokens."
    )
    min_top1_agreement: StrictFloat = Field(
        ge=0,
        le=1,
        description="Least fraction of one prompt's positions whose served argmax equals the "
        "reference's.",
    )
    source: Text = Field(
        description="How the numbers were derived: a measurement (bench/gate) or the reasoning."
    )


class GateNumerics(_Strict):
    """The golden-numerics replay of the serving gate (docs/reference/gate.md)."""

    tolerances: dict[ServedDtype, NumericsTolerance] = Field(
        default_factory=dict,
        description="Served weights dtype -> tolerance. The replay takes the dtype the server "
        "runs (`--dtype`, or sglang's auto rule over the checkpoint's dtype: float32 serves as "
        "float16); a dtype with no entry fails the gate.",
    )


class SpeedFloors(_Strict):
    """Absolute limits a host must meet alone, CVS-style (sglx_core.gate.speed.Floors); every
    one optional. AMD's CVS holds Llama-3.1-70B TP8 on MI300X to 900 output tok/s at
    concurrency 64, mean TPOT <= 150 ms and goodput >= 0.99: numbers of one model, so a site
    sets its own (the rollout's sglang_service_gate_speed_floors) rather than the arch."""

    min_output_tok_s: StrictFloat | None = Field(default=None, gt=0, description="Output tok/s.")
    max_tpot_mean_ms: StrictFloat | None = Field(
        default=None, gt=0, description="Mean time per output token, ms."
    )
    max_ttft_p99_ms: StrictFloat | None = Field(
        default=None, gt=0, description="p99 time to first token, ms."
    )
    min_goodput: StrictFloat | None = Field(
        default=None, gt=0, le=1, description="SLO attainment: good requests / requests sent."
    )


class SpeedSlos(_Strict):
    """The goodput SLOs bench_serving judges each request by (`--goodput ttft:MS tpot:MS`): the
    run records goodput, the share of requests that met every one. None: that SLO unset; none
    set: no goodput is recorded."""

    ttft_ms: StrictFloat | None = Field(default=None, gt=0, description="Time to first token.")
    tpot_ms: StrictFloat | None = Field(default=None, gt=0, description="Time per output token.")


class GateSpeed(_Strict):
    """The short benchmark of the serving gate: sglang's own bench_serving on random token ids,
    the same work on every host, judged against the fleet's median (docs/reference/gate.md)."""

    concurrency: StrictInt = Field(default=4, ge=1, description="Requests in flight at once.")
    num_prompts: StrictInt = Field(
        default=16, ge=1, description="Requests sent: at least `concurrency`."
    )
    input_len: StrictInt = Field(default=128, ge=1, description="Prompt tokens per request.")
    output_len: StrictInt = Field(default=64, ge=2, description="Output tokens per request.")
    slos: SpeedSlos = Field(default_factory=SpeedSlos)
    floors: SpeedFloors = Field(default_factory=SpeedFloors)
    source: Text = Field(
        default="", description="Why these sizes: what they measure and what they cost."
    )

    @model_validator(mode="after")
    def _enough_prompts(self) -> GateSpeed:
        if self.num_prompts < self.concurrency:
            raise ValueError(
                f"num_prompts {self.num_prompts} is below concurrency {self.concurrency}: the "
                "run would never hold that many requests at once"
            )
        return self


class GateCollective(_Strict):
    """The serving gate's collective smoke, an all-reduce before a multi-device server starts.

    Over every device the server will use, one process each, with the profile's
    distributed_backend (`python -m sglx_platform.collective_smoke`; docs/reference/gate.md)."""

    enabled: StrictBool = Field(
        default=True,
        description="Run the smoke before a serving group's server starts (the rollout's "
        "sglang_service_gate_collective switches it off for a site).",
    )
    size_bytes: StrictInt = Field(
        default=64 << 20,
        ge=4,
        le=16 << 30,
        description="Bytes all-reduced per operation (float32), on each rank.",
    )
    iters: StrictInt = Field(default=20, ge=1, description="Timed all-reduce operations.")
    warmup: StrictInt = Field(default=5, ge=0, description="Untimed operations before them.")
    timeout_s: StrictInt = Field(
        default=120,
        ge=1,
        description="Seconds each phase may take (the rendezvous, joining the group, the "
        "results): a rank missing after it is named with its host.",
    )
    # Lax keys: a mapping key read back from YAML or JSON (the baked profile) is a string.
    floor_gbps: dict[Annotated[int, Field(strict=False, ge=2)], StrictFloat] = Field(
        default_factory=dict,
        description="World size (ranks: nodes x devices per node) -> the least bus bandwidth, "
        "GB/s, that passes. A floor is measured on one number of devices, so it holds only "
        "there; a world size with no entry is measured, not judged. {} = never judged.",
    )
    source: Text | None = Field(
        default=None, description="Where the floors come from (a vendor's acceptance document)."
    )

    @field_validator("floor_gbps")
    @classmethod
    def _positive_floors(cls, values: dict[int, float]) -> dict[int, float]:
        bad = sorted(world for world, floor in values.items() if not floor > 0)
        if bad:
            raise ValueError(f"the floors of world sizes {bad} are not above 0 GB/s")
        return values

    @model_validator(mode="after")
    def _floors_have_a_source(self) -> GateCollective:
        if self.floor_gbps and self.source is None:
            raise ValueError("floor_gbps is set without a source: name the document it comes from")
        return self


VendorTool = Literal["amd-smi", "rvs", "rccl-tests", "xpu-smi"]
# One word of a vendor tool's command line: flags and values, nothing a shell reads specially.
ToolArg = Annotated[str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.,:=/+-]+$")]


class VendorIdle(_Strict):
    """What the idle checks accept as idle (vendor_amd_smi_idle, vendor_xpu_smi_idle)."""

    max_utilization_pct: StrictFloat = Field(
        default=0.0,
        ge=0,
        le=100,
        description="Highest utilization (GFX activity), %, of an idle device.",
    )
    max_temperature_c: StrictFloat | None = Field(
        default=None,
        gt=0,
        le=150,
        description="Every temperature the tool reports must be strictly under this, °C; null: "
        "temperatures are reported, not judged.",
    )
    source: Text | None = Field(default=None, description="Where the limits come from.")

    @model_validator(mode="after")
    def _limit_has_a_source(self) -> VendorIdle:
        if self.max_temperature_c is not None and self.source is None:
            raise ValueError("max_temperature_c is set without a source: name the document")
        return self


class VendorPartitions(_Strict):
    """The partition modes every GPU must be in (vendor_amd_smi_partitions); null: unchecked."""

    compute: Literal["SPX", "DPX", "TPX", "QPX", "CPX"] | None = Field(
        default=None, description="Accelerator partition mode (`amd-smi partition --current`)."
    )
    memory: Literal["NPS1", "NPS2", "NPS4", "NPS8"] | None = Field(
        default=None, description="Memory partition mode."
    )
    source: Text | None = Field(default=None, description="Why these modes.")

    @model_validator(mode="after")
    def _both_or_neither(self) -> VendorPartitions:
        if (self.compute is None) != (self.memory is None):
            raise ValueError("set both compute and memory, or neither")
        if self.compute is not None and self.source is None:
            raise ValueError("the partition modes are set without a source")
        return self


class VendorRvsTest(_Strict):
    """One RVS run: `rvs -c <conf_dir>/<conf>`, judged as its module's actions."""

    module: Literal["gst", "iet", "mem", "pebb", "pbqt", "peqt"] = Field(
        description="The RVS module the conf file runs (sglx.gate.vendor.rvs judges these)."
    )
    conf: Annotated[
        str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*\.conf$")
    ] = Field(description="The conf file, relative to conf_dir (MI300X/gst_single.conf).")


class VendorRvs(_Strict):
    """The ROCm Validation Suite runs of vendor_rvs."""

    conf_dir: AbsPath = Field(
        default="/opt/rocm/share/rocm-validation-suite/conf",
        description="Where RVS's conf files are installed.",
    )
    tests: tuple[VendorRvsTest, ...] = Field(default=(), description="The runs, in order.")
    timeout_s: StrictInt = Field(default=1800, ge=1, description="Seconds each run may take.")
    source: Text | None = Field(default=None, description="Where the selection comes from.")


class VendorRcclTests(_Strict):
    """The rccl-tests all_reduce_perf run of vendor_rccl_all_reduce."""

    args: tuple[ToolArg, ...] = Field(
        default=("-b", "8", "-e", "8G", "-f", "2", "-g", "8"),
        description="all_reduce_perf's arguments.",
    )
    min_busbw_gbps: StrictFloat | None = Field(
        default=None,
        gt=0,
        description="Least in-place bus bandwidth, GB/s, at the largest message; null: reported, "
        "not judged.",
    )
    min_size_bytes: StrictInt | None = Field(
        default=None, ge=1, description="The largest message must reach this size (the floor's)."
    )
    timeout_s: StrictInt = Field(default=900, ge=1, description="Seconds the run may take.")
    source: Text | None = Field(default=None, description="Where the floor comes from.")

    @model_validator(mode="after")
    def _floor_has_a_source(self) -> VendorRcclTests:
        if self.min_busbw_gbps is not None and self.source is None:
            raise ValueError("min_busbw_gbps is set without a source: name the document")
        return self


class GateVendor(_Strict):
    """Vendor health tools the host checks run where installed (docs/reference/preflight.md).

    A tool that is absent is reported as not run (the check is skipped), never as passed."""

    tools: tuple[VendorTool, ...] = Field(
        default=(),
        description="The tools that apply to this arch; the checks of the others do not run.",
    )
    search_path: tuple[AbsPath, ...] = Field(
        default=(),
        description="Folders searched for a tool after PATH (xpu-smi: the role's "
        "accel_host_xpu_smi instead).",
    )
    timeout_s: StrictInt = Field(
        default=120, ge=1, description="Seconds an amd-smi or xpu-smi read may take."
    )
    idle: VendorIdle = Field(default_factory=VendorIdle)
    partitions: VendorPartitions = Field(default_factory=VendorPartitions)
    rvs: VendorRvs = Field(default_factory=VendorRvs)
    rccl_tests: VendorRcclTests = Field(default_factory=VendorRcclTests)

    @model_validator(mode="after")
    def _rvs_has_tests(self) -> GateVendor:
        if "rvs" in self.tools and not self.rvs.tests:
            raise ValueError("tools lists rvs but rvs.tests is empty: name the runs")
        return self


class CommShare(_Strict):
    """How much of a served step's time goes to communication, read from a torch-profiler trace
    of the server (`sglx trace comm-share`, sglx_core/comm_share.py): seed S0-36's check of
    a multi-card server (all-reduce above 30% of step time: change the parallel strategy)."""

    max_share: float = Field(
        default=0.30,
        gt=0,
        le=1,
        description="Share of the busy time above which the trace is a finding.",
    )
    patterns: tuple[Text, ...] = Field(
        default=(),
        description="Regular expressions (case-insensitive) matching the names of the "
        "collective library's kernels and ops in a trace.",
    )
    fixes: tuple[Text, ...] = Field(
        default=(),
        description="What to try when the share is above max_share (the finding's hint).",
    )
    source: Text = Field(default="derived", description="Where the threshold and names come from.")

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(
                    f"pattern {pattern!r} is not a regular expression ({exc})"
                ) from None
        return patterns


class Gate(_Strict):
    """What a host must serve before it joins the fleet, beyond /health."""

    numerics: GateNumerics = Field(default_factory=GateNumerics)
    vendor: GateVendor = Field(default_factory=GateVendor)
    collective: GateCollective = Field(default_factory=GateCollective)
    speed: GateSpeed = Field(default_factory=GateSpeed)
    comm_share: CommShare = Field(default_factory=CommShare)


class Observability(_Strict):
    """What the server exposes for the site's Prometheus (docs/reference/observability.md)."""

    metrics: StrictBool = Field(
        default=True,
        description="Start the server with sglang's metrics (--enable-metrics), sglx's own "
        "series beside them; SGLX_METRICS=0 in the server's environment (the sglang_service "
        "role's sglang_service_metrics: false) turns them off on a host.",
    )
    metrics_path: Annotated[str, StringConstraints(strict=True, pattern=r"^/[a-z_/]*$")] = Field(
        default="/metrics",
        description="Where the server serves them, on its port (sglang's route).",
    )


SglangOp = Literal["rms_norm", "silu_and_mul", "gelu_and_mul", "rotary_embedding"]


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


class VersionFloor(_Strict):
    """A minimum version on the host, and where to read the installed one."""

    min_version: Text | None = Field(
        default=None, description="Lowest known-good version; null = unpinned."
    )
    version_file: AbsPath | None = Field(
        default=None,
        description="File the host reports it in; its first dotted number with the most "
        "parts is the version.",
    )
    tool: Literal["xpu-smi"] | None = Field(
        default=None,
        description="Vendor tool that reports it instead of a file: xpu-smi (`xpu-smi -q`, "
        "each card's firmware; the path is the role's accel_host_xpu_smi). Hosts without "
        "the tool are reported as not checked. Firmware floors only.",
    )
    module: Name | None = Field(
        default=None,
        description="Kernel module whose `modinfo -F version MODULE` is read when version_file "
        "is absent: the driver is installed but not loaded (yet), e.g. blacklisted at boot "
        "(host.after_boot). Driver floors only.",
    )
    note: Text = Field(description="Source of the floor, or why it is not pinned.")

    @model_validator(mode="after")
    def _one_source(self) -> VersionFloor:
        """A pinned floor the host cannot be read against fails on every host: refused here."""
        if self.version_file is not None and self.tool is not None:
            raise ValueError("set one of 'version_file' and 'tool', not both")
        if self.min_version is not None and self.version_file is None and self.tool is None:
            raise ValueError(
                f"min_version {self.min_version!r} is pinned but nothing says where the host "
                "reports its version: set 'version_file' (a file) or 'tool' (e.g. xpu-smi)"
            )
        return self

    @model_validator(mode="after")
    def _module_backs_a_file(self) -> VersionFloor:
        if self.module is not None and self.version_file is None:
            raise ValueError(
                f"module {self.module!r} is read only when version_file is absent: set "
                "version_file too (e.g. /sys/module/MODULE/version)"
            )
        return self


class KernelArg(_Strict):
    """One kernel command-line argument and who asks for it."""

    arg: Annotated[str, StringConstraints(strict=True, pattern=r"^[^\s\"'\\$`]+$")] = Field(
        description="The argument as /proc/cmdline shows it (one word, no quotes), e.g. iommu=pt."
    )
    source: Text = Field(description="The vendor document (URL) or guide that asks for it.")


class AfterBoot(_Strict):
    """Modules the vendor allows loading after boot rather than by the kernel at boot."""

    modules: tuple[Name, ...] = Field(
        min_length=1,
        description="Blacklisted on the kernel command line (modprobe.blacklist=) and loaded by "
        "a systemd unit once the host is up, when the site sets accel_host_load_after_boot; "
        "each must be in host.modules.",
    )
    source: Text = Field(description="The vendor document (URL) that describes it, and why.")


class Host(_Strict):
    """Host settings the Ansible role applies and the host checks verify."""

    kernel_cmdline: tuple[KernelArg, ...] = Field(
        default=(),
        description="Arguments the kernel command line must carry (reboot to apply), each with "
        "its source.",
    )
    sysctl: dict[Annotated[str, StringConstraints(pattern=r"^[a-z0-9_.]+$")], StrictStr] = Field(
        default_factory=dict, description="sysctl name -> value, persisted in /etc/sysctl.d."
    )
    gpu_max_hw_queues: StrictInt | None = Field(
        default=None, ge=1, description="GPU_MAX_HW_QUEUES for the server; null = leave unset."
    )
    modules: tuple[Name, ...] = Field(default=(), description="Kernel modules that must load.")
    udev_rules: tuple[Text, ...] = Field(
        default=(), description="udev rules giving the device nodes their group and mode."
    )
    driver: VersionFloor | None = Field(default=None, description="Kernel driver floor.")
    firmware: VersionFloor | None = Field(default=None, description="Device firmware floor.")
    after_boot: AfterBoot | None = Field(
        default=None,
        description="Modules a site may load after boot instead (opt-in: the accel_host role's "
        "accel_host_load_after_boot); null = none.",
    )

    @model_validator(mode="after")
    def _host_consistent(self) -> Host:
        args = [a.arg for a in self.kernel_cmdline]
        repeated = sorted({a for a in args if args.count(a) > 1})
        if repeated:
            raise ValueError(f"kernel_cmdline lists {repeated} more than once")
        if self.after_boot is not None:
            stray = [m for m in self.after_boot.modules if m not in self.modules]
            if stray:
                raise ValueError(
                    f"after_boot.modules {stray} are not in host.modules {list(self.modules)}: "
                    "only a module the host loads can be loaded after boot"
                )
            if any(a.startswith("modprobe.blacklist=") for a in args):
                raise ValueError(
                    "kernel_cmdline carries modprobe.blacklist= while after_boot is set: the role "
                    "adds the blacklist itself when the site opts in; remove it from kernel_cmdline"
                )
        return self

    @model_validator(mode="after")
    def _driver_read_from_a_file(self) -> Host:
        """xpu-smi's `Driver Version` can be an NVIDIA-compatibility string (515.58 beside a
        5.0.21.47 driver, baidu/vLLM-Kunlun PR #148), and no reader of the role or the checks
        takes a driver from a tool: a driver floor reads its version_file."""
        if self.driver is not None and self.driver.tool is not None:
            raise ValueError(
                f"driver.tool {self.driver.tool!r}: a driver floor is read from its "
                "version_file (or module); 'tool' is for firmware floors"
            )
        return self


class Ranks(_Strict):
    """What the ranks of one server (on one host or several) compare before serving, and what
    differs between them by design. Ranks that differ in anything else wait on collectives the
    others never issue; every rank refuses to start instead, naming the keys and who holds which
    value."""

    env_prefixes: tuple[EnvName, ...] = Field(
        description="Variables with these prefixes change code paths across ranks: compared."
    )
    per_node_env: tuple[EnvName, ...] = Field(
        default=(),
        description="Variables that differ per launch or per node by design (run ids, device "
        "and core bindings, per-process folders): never compared.",
    )
    per_node_args: tuple[Name, ...] = Field(
        default=(),
        description="ServerArgs fields that name the node or process itself (rank, address, "
        "port, local device): never compared. Every other server argument is.",
    )
    timeout_s: Annotated[int, Field(strict=True, ge=5, le=3600)] = Field(
        default=60,
        description="Bound on the exchange of fingerprints: a rank that does not answer "
        "within it fails the start (never a hang).",
    )
    bind_cpu_cores: bool = Field(
        default=False,
        description="cpu: when SGLANG_CPU_OMP_THREADS_BIND is unset, split the cores this "
        "process may use among the node's local ranks, so `--tp N` needs no binding by hand.",
    )


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


TunedFormat = Literal["aiter_csv", "tunableop_csv", "hipblaslt_override"]
TunedPattern = Annotated[
    str, StringConstraints(strict=True, pattern=r"^[A-Za-z0-9_.*\[\]-]+$", max_length=128)
]


class TunedFileRule(_Strict):
    """One kind of file a tuned set may hold (sglx_core/tuned.py), and what makes the server
    read it from the mounted set."""

    pattern: TunedPattern = Field(description="fnmatch pattern of the file's name.")
    format: TunedFormat = Field(
        description="How the file is read and checked: aiter_csv (AITER's tuned tables, one row "
        "per shape keyed by cu_num and, in newer tables, gfx), tunableop_csv (PyTorch "
        "TunableOp results: Validator lines, then one tuned op per line), hipblaslt_override "
        "(hipBLASLt's offline-tuning result: a 'Git Version:' line, then one problem per line)."
    )
    env: dict[EnvName, StrictStr] = Field(
        description="Variables sglx-serve sets when the set holds such a file: {path} is the "
        "file's path in the container, {target} the set's folder."
    )
    source: Text = Field(description="Where the library documents the file and its variable.")


class Tuning(_Strict):
    """Tuned GEMM configurations carried from the host that tuned them to the hosts that serve
    (seed 004: tune AITER and hipBLASLt per M, N, K once, reuse the results).

    A tuned set is a folder with a manifest (`sglx tuned capture`): checked against this arch
    (the gfx and compute-unit counts its rows name), carried in a bundle (`sglx bundle create
    --tuned`), placed on each host under host_root/<digest> and mounted read-only at target.
    sglx-serve reads the mounted manifest, checks it again against the host's devices, and sets
    each file's variables before the server starts. An arch with no rules takes no set."""

    target: AbsPath = Field(
        default="/etc/sglx/tuned", description="Where the container sees the host's tuned set."
    )
    host_root: AbsPath = Field(
        default="/var/lib/sglx/tuned",
        description="Folder on the host holding one folder per tuned set, named by its digest.",
    )
    capture_from: AbsPath | None = Field(
        default=None,
        description="Folder in a server container where tuning runs write their results "
        "(`sglx tuned capture --container` copies it out); None = capture from a folder only.",
    )
    gfx: Name | None = Field(
        default=None, description="The gfx name AITER's rows carry for this arch (column gfx)."
    )
    compute_units: tuple[Annotated[int, Field(strict=True, ge=1)], ...] = Field(
        default=(),
        description="Compute-unit counts of this arch's cards (AITER keys its rows by cu_num, "
        "torch's multi_processor_count): a set with no row for any of them is another arch's.",
    )
    files: dict[Name, TunedFileRule] = Field(
        default_factory=dict, description="The kinds of file a tuned set may hold, by name."
    )
    max_file_bytes: StrictInt = Field(
        default=64 << 20, ge=1, description="Largest tuned file read (bytes)."
    )
    max_files: StrictInt = Field(default=64, ge=1, description="Most files in one tuned set.")


class CommDebugVar(_Strict):
    """One variable of the communication-debugging restart (comm-debug.yml)."""

    value: Annotated[str, StringConstraints(strict=True)] = Field(description="Its value.")
    source: Text = Field(description="What it turns on, and where that is documented.")


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

"""Which serving profile applies to this host and this model, and why each other one does not.

Like NIM's and AIM's profile listings (shared/research/anchors-2026-12.md sections 1-2), every
serving profile of the arch lands in one of three groups, each with a one-line reason:
runnable, low_memory (it matches the hardware but the model does not fit at its TP and memory,
with the memory per device it would need) and incompatible (another accelerator, too few
devices, too little memory, another precision or metric, too few cores). The first runnable
one, best first, is chosen; none runnable is an error that lists them all. A general profile
is chosen only when it matches the hardware it names: never a silent generic fallback.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from sglx_core.errors import SglxError
from sglx_core.profile.schema import Profile, ServingProfile, flag_field

if TYPE_CHECKING:
    from sglx_core.serving.capacity import Capacity
    from sglx_core.serving.hardware import Accelerators
    from sglx_core.serving.model import ModelShape

GIB = 1024**3
STATUSES = ("runnable", "low_memory", "incompatible")
RANKS = ("optimized", "general")
# sglang's own defaults for what the capacity check reads, when neither the profile, the user
# nor the arch sets them (sglang 0.5.23 ServerArgs: page_size 1, kv_cache_dtype auto; the
# documented default --mem-fraction-static is 0.9, in
# sglang docs/advanced_features/server_arguments.md).
SGLANG_DEFAULTS: Mapping[str, Any] = {
    "page_size": 1,
    "kv_cache_dtype": "auto",
    "mem_fraction_static": 0.9,
    "tp_size": 1,
    "pp_size": 1,
}
# How sglang splits the layers over pipeline stages, when set (srt/distributed/utils.py).
PP_PARTITION_ENV = "SGLANG_PP_LAYER_PARTITION"
# The FP8 KV cache the capacity check proposes as a fix, when the arch's rules allow it.
FP8_KV = "fp8_e4m3"
SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True)
class Candidate:
    """One serving profile, sorted against this host and model."""

    name: str
    status: str  # "runnable" | "low_memory" | "incompatible"
    reason: str
    memory_needed_bytes: int | None  # per device, for low_memory
    profile: ServingProfile


def precision_of(shape: ModelShape) -> str:
    """The model's precision as serving profiles name it: its quantization method, else the
    short name of its dtype (bf16, fp16, fp32)."""
    if shape.quantization:
        return shape.quantization
    return SHORT_DTYPES.get(shape.dtype, shape.dtype)


def setting(
    profile: Profile, serving: ServingProfile, field: str, user: Mapping[str, Any] | None = None
) -> Any:
    """The value a ServerArgs field will have: the user's, else the serving profile's, else the
    arch default, else sglang's default (None when sglx does not know it)."""
    if user and field in user:
        return user[field]
    for flag, value in serving.args.items():
        if flag_field(flag) == field:
            return value
    if field in profile.server.defaults and profile.server.defaults[field] is not None:
        return profile.server.defaults[field]
    return SGLANG_DEFAULTS.get(field)


def fp8_kv_allowed(profile: Profile) -> bool:
    """Whether the arch's unconditional kv_cache_dtype rules let an FP8 KV cache through."""
    return all(
        rule.permits(FP8_KV)
        for rule in profile.server.rules_on("kv_cache_dtype")
        if not rule.conditional
    )


def capacity_for(
    profile: Profile,
    serving: ServingProfile,
    hw: Accelerators,
    shape: ModelShape,
    user: Mapping[str, Any] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Capacity:
    """The capacity check for this profile on this host, with the user's settings (ServerArgs
    field -> value) where given: TP, context length, memory fraction, KV dtype and page size."""
    from sglx_core.serving.capacity import check
    from sglx_core.serving.model import served_dtype

    # `--dtype float32` serves every weight in four bytes, twice what the shape counts (a
    # float32 checkpoint is counted as sglang's auto rule serves it: float16).
    dtype = served_dtype(shape.dtype, str(setting(profile, serving, "dtype", user) or "auto"))
    if dtype == "float32" and shape.quantization is None:
        shape = replace(shape, weight_bytes=shape.weight_bytes * 2)
    tp_value = setting(profile, serving, "tp_size", user)
    tp = 1 if tp_value is None else int(tp_value)  # --tp 0 is refused by check(), not TP 1
    pp_value = setting(profile, serving, "pp_size", user)
    pp = 1 if pp_value is None else int(pp_value)
    context = shape.max_position_embeddings
    if user and "context_length" in user:
        context = int(user["context_length"])
    else:
        capped = setting(profile, serving, "context_length")
        if capped is not None:
            context = int(capped) if context is None else min(context, int(capped))
    fraction = float(setting(profile, serving, "mem_fraction_static", user))
    if profile.serving.capacity_fraction is not None and not (
        user and "mem_fraction_static" in user
    ):
        fraction = profile.serving.capacity_fraction
    backend = setting(profile, serving, "attention_backend", user)
    cut = profile.serving.long_context_fraction
    if cut is not None and context is not None and context > cut.above_context:
        honoured = cut.unless_env is not None and (environ or {}).get(cut.unless_env) == "1"
        if (backend is None or backend in cut.attention_backends) and not honoured:
            fraction *= cut.factor
    return check(
        shape,
        memory_bytes=hw.memory_bytes,
        tp=tp,
        mem_fraction=fraction,
        kv_dtype=str(setting(profile, serving, "kv_cache_dtype", user)),
        page_size=_int_or(setting(profile, serving, "page_size", user), 1),
        context_length=int(context or 0),
        concurrency=serving.concurrency,
        devices_available=hw.count,
        fp8_kv_allowed=fp8_kv_allowed(profile),
        dcp_allowed=_dcp_serves(profile, backend),
        pp=pp,
        pp_partition=(environ or {}).get(PP_PARTITION_ENV),
    )


def _int_or(value: Any, default: int) -> int:
    return default if value is None else int(value)


def _fact_int(hw: Accelerators, key: str) -> int | None:
    """An integer fact of the probe ("numa_nodes": "1 (no NUMA nodes in sysfs)" reads as 1)."""
    head = hw.facts.get(key, "").split(" ", 1)[0]
    return int(head) if head.isdigit() else None


def mismatch(
    profile: Profile,
    serving: ServingProfile,
    hw: Accelerators,
    shape: ModelShape | None,
    precision: str | None,
    metric: str | None,
) -> str | None:
    """Why the profile does not match this hardware, model or request; None when it does."""
    match = serving.match
    if match.accelerators and hw.model not in match.accelerators:
        found = hw.model or f"a {profile.arch} device not in serving.accelerators"
        return f"for {', '.join(match.accelerators)}; this host has {found}"
    if match.devices and hw.count < min(match.devices):
        return f"needs {min(match.devices)} devices; this host has {hw.count}"
    floor = match.min_memory_gib_per_device
    if floor is not None and hw.memory_bytes < floor * GIB:
        return f"needs {floor:g} GiB per device; this host has {hw.memory_bytes / GIB:.1f} GiB"
    wanted = precision or (precision_of(shape) if shape is not None else None)
    if match.precision and wanted is not None and wanted not in match.precision:
        return f"serves {', '.join(match.precision)}; the model is {wanted}"
    if metric is not None and match.metric is not None and match.metric != metric:
        return f"tuned for {match.metric}; {metric} was asked for"
    cores = _fact_int(hw, "cores")
    if match.min_cores is not None and cores is not None and cores < match.min_cores:
        return f"needs {match.min_cores} cores; this process may use {cores}"
    numa = _fact_int(hw, "numa_nodes")
    if match.numa_nodes and numa is not None and numa not in match.numa_nodes:
        nodes = ", ".join(str(n) for n in match.numa_nodes)
        return f"for {nodes} NUMA node(s); this host has {numa}"
    return None


def _specificity(serving: ServingProfile, hw: Accelerators) -> tuple[int, int, int]:
    """Sort key: an exact device count first, then fewer accelerators named (none = any, last),
    then more devices used."""
    devices = serving.match.devices
    exact = 0 if hw.count in devices else 1
    named = len(serving.match.accelerators) or 1_000
    used = max((d for d in devices if d <= hw.count), default=0)
    return exact, named, -used


def candidates(
    profile: Profile,
    hw: Accelerators,
    shape: ModelShape | None,
    *,
    precision: str | None = None,
    metric: str | None = None,
    named: str | None = None,
) -> list[Candidate]:
    """Every serving profile of the arch, best first: runnable, then low memory, then
    incompatible; within each, optimized before general, then the more specific match. A
    by_name profile is incompatible unless it is the one `named`."""
    found: list[Candidate] = []
    for name, serving in profile.serving.profiles.items():
        why = mismatch(profile, serving, hw, shape, precision, metric)
        if serving.select == "by_name" and name != named:
            why = f"chosen by name only (SGLX_SERVING_PROFILE={name}): {serving.description}"
        if why is not None:
            found.append(Candidate(name, "incompatible", why, None, serving))
            continue
        if shape is None:
            found.append(Candidate(name, "runnable", _matches(serving, hw), None, serving))
            continue
        capacity = capacity_for(profile, serving, hw, shape)
        if capacity.fits:
            reason = f"{_matches(serving, hw)}; {_fit_line(capacity)}"
            found.append(Candidate(name, "runnable", reason, None, serving))
        else:
            needed = _memory_needed(capacity)
            reason = (
                f"the model does not fit at {capacity.flags}: needs {needed / GIB:.1f} GiB per "
                f"device, this host has {capacity.memory_bytes / GIB:.1f} GiB"
            )
            found.append(Candidate(name, "low_memory", reason, needed, serving))
    found.sort(
        key=lambda c: (
            STATUSES.index(c.status),
            RANKS.index(c.profile.rank),
            *_specificity(c.profile, hw),
            c.name,
        )
    )
    return found


def _matches(serving: ServingProfile, hw: Accelerators) -> str:
    what = hw.model or hw.family
    return f"matches {hw.count}x {what} ({serving.rank})"


def _fit_line(capacity: Capacity) -> str:
    return (
        f"weights {capacity.weights_bytes_per_device / GIB:.1f} GiB per device, KV room for "
        f"{capacity.tokens_fit} tokens, needs {capacity.tokens_needed}"
    )


def _memory_needed(capacity: Capacity) -> int:
    """Memory per device at which the model would fit at this profile's TP and fraction: the
    weights, the KV cache for the tokens needed and the check's reserve, over the fraction."""
    kv = capacity.kv_bytes_per_token * capacity.tokens_needed
    used = capacity.weights_bytes_per_device + kv + capacity.reserve_bytes
    return int(used / (capacity.mem_fraction or 1.0))


def choose(
    profile: Profile,
    hw: Accelerators,
    shape: ModelShape | None,
    *,
    precision: str | None = None,
    metric: str | None = None,
) -> Candidate:
    """The best runnable serving profile; an error listing every profile and why otherwise."""
    listed = candidates(profile, hw, shape, precision=precision, metric=metric)
    for candidate in listed:
        if candidate.status == "runnable":
            return candidate
    what = f"{hw.count}x {hw.model or profile.arch}"
    if not listed:
        raise SglxError(
            f"no serving profile in the {profile.arch} profile (serving.profiles is empty)",
            hint="add one to images/<arch>/arch.yaml, or pass the server flags yourself",
            code="no_serving_profile",
        )
    lines = "\n  ".join(f"{c.name}: {c.status}: {c.reason}" for c in listed)
    low = [c for c in listed if c.status == "low_memory"]
    hint = (
        "a larger TP, a shorter --context-length, an FP8 KV cache where the arch allows it, or "
        "a quantized checkpoint; `sglx-serve --list-profiles` shows the numbers"
        if low
        else "run on hardware a profile names, or add a serving profile for this host to the "
        "arch profile (docs/reference/serving.md)"
    )
    raise SglxError(
        f"no serving profile of {profile.arch} can run this model on {what}:\n  {lines}",
        hint=hint,
        code="no_serving_profile",
    )


def _dcp_serves(profile: Profile, backend: Any) -> bool:
    """Whether sglang's decode context parallelism serves this arch with this attention
    backend (an unset backend counts as the profile's first)."""
    dcp = profile.serving.decode_context_parallel
    return dcp is not None and (backend is None or backend in dcp.attention_backends)

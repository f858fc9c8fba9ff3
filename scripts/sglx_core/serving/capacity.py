"""Whether the model's weights and the KV cache for the requested context fit one device, checked
in milliseconds before any weight is loaded, with the fixes when they do not.

The budget follows sglang's own sizing (`KVCacheConfigurator._profile_available_bytes`,
sglang/srt/mem_cache/kv_cache_configurator.py, sglang 0.5.23): the KV pool gets what is left of
`memory x --mem-fraction-static` once the weights are resident; the other `1 - fraction` is the
slack for activations and graphs. On top of that this check keeps a reserve (`reserve_bytes`)
for what is resident besides the weights when the pool is sized: the runtime context, the
communication buffers of TP > 1 and allocator fragmentation. sglang measures these; sglx,
before loading, can only bound them, so it keeps max(1 GiB, 2% of the device memory): the HIP
or CUDA context alone is about 0.5 GiB, RCCL/NCCL buffers a few hundred MiB more.

The numbers are per device:
- weights: the checkpoint's bytes / TP. Embeddings, norms and (for MLA) parts of attention are
  replicated on every rank, so this is a lower bound; the reserve absorbs the difference.
  With pipeline parallelism (`--pp-size`), a device holds its stage's share: the bytes times
  the largest stage's layers over all layers. sglang splits the layers evenly, the last stages
  taking one more each where they do not divide (`get_pp_indices`,
  sglang/srt/distributed/utils.py), or as `SGLANG_PP_LAYER_PARTITION` lists them; the first
  stage's embedding and the last one's head are left to the reserve, as TP's replicas are.
- KV bytes per token, as sglang's `_compute_cell_size` (model_executor/pool_configurator.py):
  standard attention stores K and V for `max(1, kv_heads // tp)` heads per rank
  (`ModelConfig.get_num_kv_heads`: heads split across TP ranks, replicated when TP exceeds
  them) x head_dim x layers x dtype bytes, the layers being the stage's under PP (the pool
  holds its own stage's layers: `layer_info.num_effective_layers`,
  model_executor/pool_configurator.py). MLA (DeepSeek-V2/V3) stores one latent of
  `kv_lora_rank + qk_rope_head_dim` per token per layer (`MLATokenToKVPool.kv_cache_dim`,
  sglang/srt/mem_cache/memory_pool.py) on every TP rank: the latent is not split by TP.
- tokens needed: the context rounded up to whole pages, times the requests that must each hold
  a full context at once (the serving profile's concurrency).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from sglx_core.errors import SglxError
from sglx_core.serving.model import SERVED_BYTES, ModelShape

GIB = 1 << 30
RESERVE_MIN_BYTES = 1 * GIB
RESERVE_FRACTION = 0.02
"""The reserve kept beside the weights: max(RESERVE_MIN_BYTES, RESERVE_FRACTION x memory)."""

KV_DTYPE_BYTES = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "mxfp8": 1,
}
"""Bytes per KV element for each `--kv-cache-dtype` sglx sizes ("auto" is the model's served
dtype). sglang 0.5.23's choices (arg_groups/fields/model.py) add nvfp4 and fp4_mx_block16,
CUDA 12.8 only, which no sglx arch serves. mxfp8's per-32 scales (1/32 more) are left out."""
FP8_KV = ("fp8_e4m3", "fp8_e5m2", "mxfp8")

MAX_TP_SUGGESTED = 64
"""Largest TP a fix names when this host has too few devices (a bigger host of the fleet)."""
MAX_PP_SUGGESTED = 16
"""Most pipeline stages a fix names (hosts of a serving group, one stage each)."""


def stage_layers(layers: int, pp: int, partition: str | None = None) -> int:
    """The layers of the largest of `pp` pipeline stages, as sglang splits `layers`: evenly,
    the last `layers % pp` stages one more (`get_pp_indices`), or as `partition`
    (`SGLANG_PP_LAYER_PARTITION`, comma-separated counts, one per stage) says. Raises SglxError
    where sglang would refuse the split."""
    _require(pp >= 1, "--pp-size", pp, "at least 1")
    _require(pp <= layers, "--pp-size", pp, f"at most the model's {layers} layers")
    if pp == 1:
        return layers  # sglang ignores the partition for one stage
    if partition is None:
        return -(-layers // pp)
    try:
        counts = [int(count) for count in partition.split(",")]
    except ValueError:
        counts = []
    if len(counts) != pp or sum(counts) != layers or min(counts) < 1:
        raise SglxError(
            f"SGLANG_PP_LAYER_PARTITION={partition[:200]!r} does not split the model's {layers} "
            f"layers into {pp} stages",
            hint=f"give {pp} positive counts that add up to {layers}, such as "
            f"{','.join(str(layers // pp + (i >= pp - layers % pp)) for i in range(pp))}, or "
            "unset it for sglang's even split",
            code="usage",
        )
    return max(counts)


@dataclass(frozen=True)
class Capacity:
    """The outcome of `check`: the numbers behind it, and the fixes when it does not fit."""

    fits: bool
    tp: int
    memory_bytes: int  # per device
    mem_fraction: float
    weights_bytes_per_device: int
    kv_bytes_per_token: int  # per device, after TP split, page rounding ignored
    kv_dtype: str  # resolved: "auto" is reported as the dtype it stands for ("bfloat16")
    tokens_fit: int  # KV tokens that fit per device in (memory*fraction - weights - reserve)
    tokens_needed: int  # context_length (rounded up to whole pages) * concurrency
    context_length: int
    concurrency: int
    fixes: tuple[str, ...]  # ordered: larger TP, pipeline stages, shorter context, FP8 KV
    # cache, quantization
    reserve_bytes: int  # kept beside the weights (see the module docstring)
    pp: int  # pipeline stages (--pp-size)
    stage_layers: int  # the largest stage's layers (all of them at --pp-size 1)
    layers: int  # the model's

    @property
    def memory_needed_bytes(self) -> int:
        """The device memory at which this setup would fit (what a "low memory" profile
        reports), with the same fraction, TP and reserve rule."""
        return memory_needed(
            self.weights_bytes_per_device + self.kv_bytes_per_token * self.tokens_needed,
            self.mem_fraction,
        )

    @property
    def flags(self) -> str:
        """'--tp 8', or '--tp 4 --pp-size 2'."""
        return f"--tp {self.tp}" + (f" --pp-size {self.pp}" if self.pp > 1 else "")

    @property
    def parallelism(self) -> str:
        """'--tp 8', or with pipeline stages '--tp 4 --pp-size 2 (the largest stage holds 40
        of 80 layers)'."""
        if self.pp == 1:
            return self.flags
        return f"{self.flags} (the largest stage holds {self.stage_layers} of {self.layers} layers)"

    def summary(self) -> str:
        """One paragraph with the numbers, for refusals and logs."""
        budget = int(self.memory_bytes * self.mem_fraction)
        kv_gib = self.kv_bytes_per_token * self.tokens_needed
        verdict = "fits" if self.fits else "does not fit"
        return (
            f"At {self.parallelism}, each device has {_gib(self.memory_bytes)} GiB x "
            f"mem-fraction {self.mem_fraction:g} = {_gib(budget)} GiB: "
            f"{_gib(self.weights_bytes_per_device)} GiB of weights and "
            f"{_gib(self.reserve_bytes)} GiB of reserve leave room for {self.tokens_fit:,} "
            f"tokens of KV cache at {_kib(self.kv_bytes_per_token)} KiB per token "
            f"({self.kv_dtype}). {self.context_length:,} tokens of context x "
            f"{_requests(self.concurrency)} need "
            f"{self.tokens_needed:,} tokens ({_gib(kv_gib)} GiB): {verdict}."
        )


def check(
    shape: ModelShape,
    *,
    memory_bytes: int,
    tp: int,
    mem_fraction: float,
    kv_dtype: str,
    page_size: int,
    context_length: int,
    concurrency: int,
    devices_available: int,
    fp8_kv_allowed: bool,
    dcp_allowed: bool = False,
    pp: int = 1,
    pp_partition: str | None = None,
) -> Capacity:
    """Whether `shape` at `tp` (and `pp` pipeline stages, split as sglang splits them; see
    `stage_layers`) holds `concurrency` full contexts on devices of `memory_bytes`; when not,
    `fixes` says what would, each a sentence with its numbers."""
    _require(memory_bytes >= 1, "the device memory", memory_bytes, "a positive number of bytes")
    _require(tp >= 1, "--tp", tp, "at least 1")
    _require(0 < mem_fraction <= 1, "--mem-fraction-static", mem_fraction, "in (0, 1]")
    _require(page_size >= 1, "--page-size", page_size, "at least 1")
    _require(context_length >= 1, "--context-length", context_length, "at least 1")
    _require(concurrency >= 1, "the concurrency", concurrency, "at least 1")
    kv_name = resolve_kv_dtype(shape, kv_dtype)
    stage = stage_layers(shape.layers, pp, pp_partition)
    base = _evaluate(
        shape, memory_bytes, tp, mem_fraction, kv_name, page_size, context_length, concurrency,
        stage=(pp, stage),
    )  # fmt: skip
    if base.fits:
        return base
    larger_tp, tp_here = _larger_tp(base, shape, devices_available, page_size)
    fixes = [larger_tp]
    if not tp_here:  # no TP on this host holds it: stages over hosts may
        fixes.append(_pipeline_stages(base, shape, devices_available, page_size))
    fixes.append(_shorter_context(base, page_size))
    if dcp_allowed:
        fixes.append(_decode_context_parallel(base, shape, page_size))
    if fp8_kv_allowed and kv_name not in FP8_KV and base.tokens_fit > 0:
        fixes.append(_fp8_kv(base, shape, page_size))
    if shape.quantization is None and SERVED_BYTES[shape.dtype] == 2:
        fixes.append(_quantize(base, shape, page_size))
    return replace(base, fixes=tuple(fix for fix in fixes if fix))


def resolve_kv_dtype(shape: ModelShape, kv_dtype: str) -> str:
    """The KV dtype `--kv-cache-dtype` stands for: "auto" is the model's served dtype."""
    if kv_dtype == "auto":
        return "float16" if shape.dtype == "float32" else shape.dtype
    if kv_dtype not in KV_DTYPE_BYTES:
        raise SglxError(
            f"--kv-cache-dtype {kv_dtype!r} is not one sglx can size",
            hint=f"use auto or one of {', '.join(KV_DTYPE_BYTES)}",
            code="usage",
        )
    return "bfloat16" if kv_dtype == "bf16" else kv_dtype


def kv_bytes_per_token(shape: ModelShape, tp: int, kv_dtype: str, layers: int | None = None) -> int:
    """KV cache bytes one token takes on one device (`kv_dtype` already resolved) holding
    `layers` of the model's layers (all of them unless given: one pipeline stage)."""
    element = KV_DTYPE_BYTES[kv_dtype]
    held = shape.layers if layers is None else layers
    if shape.kv_lora_rank:
        return held * (shape.kv_lora_rank + shape.qk_rope_head_dim) * element
    heads = max(1, shape.kv_heads // tp)
    return 2 * held * heads * shape.head_dim * element


def reserve(memory_bytes: int) -> int:
    """Bytes kept beside the weights on a device of `memory_bytes` (module docstring)."""
    return max(RESERVE_MIN_BYTES, int(memory_bytes * RESERVE_FRACTION))


def memory_needed(resident_bytes: int, mem_fraction: float) -> int:
    """The smallest device memory M with M x fraction - reserve(M) >= resident_bytes."""
    small = math.ceil((resident_bytes + RESERVE_MIN_BYTES) / mem_fraction)
    if reserve(small) == RESERVE_MIN_BYTES or mem_fraction <= RESERVE_FRACTION:
        return small  # (a fraction this small never fits a large model; `small` says how far)
    return math.ceil(resident_bytes / (mem_fraction - RESERVE_FRACTION))


# ---------------------------------------------------------------------------------------------


def _evaluate(
    shape: ModelShape,
    memory_bytes: int,
    tp: int,
    mem_fraction: float,
    kv_dtype: str,
    page_size: int,
    context_length: int,
    concurrency: int,
    weight_bytes: int | None = None,
    dcp: int = 1,
    stage: tuple[int, int] | None = None,
) -> Capacity:
    # (stages, the largest one's layers); one stage of every layer unless given
    pp, layers = (1, shape.layers) if stage is None else stage
    total = shape.weight_bytes if weight_bytes is None else weight_bytes
    weights = -(-total * layers // (shape.layers * tp))
    # Decode context parallelism: the `dcp` ranks of a group hold the heads of TP tp/dcp and
    # split the tokens (sglang's ModelConfig.get_num_kv_heads(tp, dcp)).
    per_token = -(-kv_bytes_per_token(shape, tp // dcp, kv_dtype, layers) // dcp)
    kept = reserve(memory_bytes)
    usable = int(memory_bytes * mem_fraction) - weights - kept
    tokens_fit = max(0, usable // per_token)
    needed = _round_up(context_length, page_size) * concurrency
    return Capacity(
        fits=tokens_fit >= needed,
        tp=tp,
        memory_bytes=memory_bytes,
        mem_fraction=mem_fraction,
        weights_bytes_per_device=weights,
        kv_bytes_per_token=per_token,
        kv_dtype=kv_dtype,
        tokens_fit=tokens_fit,
        tokens_needed=needed,
        context_length=context_length,
        concurrency=concurrency,
        fixes=(),
        reserve_bytes=kept,
        pp=pp,
        stage_layers=layers,
        layers=shape.layers,
    )


def _again(
    base: Capacity,
    shape: ModelShape,
    page_size: int,
    *,
    tp: int | None = None,
    kv_dtype: str | None = None,
    weight_bytes: int | None = None,
    dcp: int = 1,
    stage: tuple[int, int] | None = None,
) -> Capacity:
    """`base` evaluated again with one thing changed (no fixes)."""
    return _evaluate(
        shape,
        base.memory_bytes,
        base.tp if tp is None else tp,
        base.mem_fraction,
        base.kv_dtype if kv_dtype is None else kv_dtype,
        page_size,
        base.context_length,
        base.concurrency,
        weight_bytes,
        dcp,
        (base.pp, base.stage_layers) if stage is None else stage,
    )


def _larger_tp(base: Capacity, shape: ModelShape, devices: int, page_size: int) -> tuple[str, bool]:
    """The smallest power-of-two TP above the current one that fits: on this host when it has
    the devices, else on a larger host (up to MAX_TP_SUGGESTED), and whether it is this host.
    TP must divide the attention heads (sglang shards them evenly)."""
    tp = base.tp * 2
    while tp <= MAX_TP_SUGGESTED:
        if shape.attention_heads % tp == 0:
            at = _again(base, shape, page_size, tp=tp)
            if at.fits:
                where = (
                    f"this host has {devices} devices"
                    if tp <= devices
                    else f"this needs a host with {tp} devices; this one has {devices}"
                )
                return (
                    f"Use --tp {tp} ({where}): each device then holds "
                    f"{_gib(at.weights_bytes_per_device)} GiB of weights and room for "
                    f"{at.tokens_fit:,} tokens, enough for the {at.tokens_needed:,} needed.",
                    tp <= devices,
                )
        tp *= 2
    return "", False


def _pipeline_stages(base: Capacity, shape: ModelShape, devices: int, page_size: int) -> str:
    """The fewest pipeline stages (a power of two, at most the layers) that fit at this TP:
    where no TP on this host holds the model, its layers split over the hosts of a serving
    group, one stage each (seed S0-25's PP where devices share no fast link; an APU host)."""
    pp = base.pp * 2
    while pp <= min(MAX_PP_SUGGESTED, shape.layers):
        at = _again(base, shape, page_size, stage=(pp, stage_layers(shape.layers, pp)))
        if at.fits:
            ranks = base.tp * pp
            where = (
                f"{ranks} of this host's {devices} devices"
                if ranks <= devices
                else f"over {-(-ranks // devices)} hosts of {_devices(devices)}, --nnodes "
                f"{-(-ranks // devices)}"
            )
            return (
                f"Use --pp-size {pp} with --tp {base.tp} ({where}): the largest stage holds "
                f"{at.stage_layers} of {shape.layers} layers, each device "
                f"{_gib(at.weights_bytes_per_device)} GiB of weights and room for "
                f"{at.tokens_fit:,} tokens, enough for the {at.tokens_needed:,} needed."
            )
        pp *= 2
    return ""


def _shorter_context(base: Capacity, page_size: int) -> str:
    """The longest context that fits at this concurrency, in whole pages and, from 1024 tokens
    on, a round number of them."""
    per_request = base.tokens_fit // base.concurrency
    step = page_size * max(1, 1024 // page_size)
    context = per_request // step * step if per_request >= step else per_request
    context = context // page_size * page_size
    if context < page_size:
        return ""  # no context fits at this TP: not a fix (the summary has the numbers)
    return (
        f"Use --context-length {context}: {_requests(base.concurrency)} of that length "
        f"{'needs' if base.concurrency == 1 else 'need'} {context * base.concurrency:,} of "
        f"the {base.tokens_fit:,} tokens of KV cache left at {base.flags}."
    )


def _decode_context_parallel(base: Capacity, shape: ModelShape, page_size: int) -> str:
    """`--dcp-size D` (D divides --tp): the D ranks of a group split the KV cache's tokens. It
    pays where TP replicates the KV heads (fewer KV heads than --tp, or MLA's one latent); the
    smallest D that fits, else the one that holds the most."""
    best: tuple[int, Capacity] | None = None
    dcp = 2
    while dcp <= base.tp:
        if base.tp % dcp == 0:
            at = _again(base, shape, page_size, dcp=dcp)
            if at.tokens_fit > (best[1] if best else base).tokens_fit:
                best = (dcp, at)
                if at.fits:
                    break
        dcp *= 2
    if best is None:
        return ""
    dcp, at = best
    outcome = "enough for" if at.fits else "still short of"
    return (
        f"Use --dcp-size {dcp} with --tp {base.tp} (decode context parallelism: the {dcp} ranks "
        f"of each group hold the same KV heads and split the tokens): "
        f"{_kib(at.kv_bytes_per_token)} KiB per token per device instead of "
        f"{_kib(base.kv_bytes_per_token)} KiB, room for {at.tokens_fit:,} tokens, {outcome} the "
        f"{at.tokens_needed:,} needed."
    )


def _fp8_kv(base: Capacity, shape: ModelShape, page_size: int) -> str:
    at = _again(base, shape, page_size, kv_dtype="fp8_e4m3")
    outcome = "enough for" if at.fits else "still short of"
    return (
        f"Use --kv-cache-dtype fp8_e4m3: the KV cache takes {_kib(at.kv_bytes_per_token)} KiB "
        f"per token instead of {_kib(base.kv_bytes_per_token)} KiB, room for "
        f"{at.tokens_fit:,} tokens, {outcome} the {at.tokens_needed:,} needed."
    )


def _quantize(base: Capacity, shape: ModelShape, page_size: int) -> str:
    """FP8 weights: about half the bytes of 16-bit ones (embeddings stay 16-bit; ignored)."""
    at = _again(base, shape, page_size, weight_bytes=shape.weight_bytes // 2)
    outcome = "enough for" if at.fits else "still short of"
    return (
        "Serve an FP8-quantized checkpoint of the model (or --quantization fp8 where the arch "
        f"supports it): about {_gib(at.weights_bytes_per_device)} GiB of weights per device "
        f"instead of {_gib(base.weights_bytes_per_device)} GiB, room for {at.tokens_fit:,} "
        f"tokens, {outcome} the {at.tokens_needed:,} needed."
    )


def _devices(count: int) -> str:
    return f"{count} device" + ("" if count == 1 else "s")


def _require(ok: bool, name: str, value: object, expected: str) -> None:
    if not ok:
        raise SglxError(
            f"{name} is {value}; it must be {expected}",
            hint=f"set {name} to a value {expected}",
            code="usage",
        )


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _gib(n: int) -> str:
    return f"{n / GIB:.1f}"


def _kib(n: int) -> str:
    return f"{n / 1024:g}"


def _requests(n: int) -> str:
    return f"{n} request" if n == 1 else f"{n} requests"

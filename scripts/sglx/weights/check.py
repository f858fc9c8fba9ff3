"""`sglx weights check SRC DST`: did the conversion change the numbers only by rounding?

Three layers, cheapest first; each problem is a finding (exit 1):

1. Structure: DST's headers are read and checked (a cut-short shard is a finding, not a crash),
   and every SRC tensor must be in DST with the same shape: transformers would silently
   initialise a missing tensor at random.
2. Tensors: each DST tensor is compared with its SRC tensor, block by block. A kept dtype must be
   bit-identical; a converted one may differ by at most the rounding of the stored dtype (half
   an ulp: 2**-8 relative for bfloat16, 2**-11 for float16, 2**-24 for float32; half the
   smallest subnormal near zero). NaN/Inf in DST is a finding.
3. Logits: both checkpoints are loaded with transformers on CPU in float32 (so the comparison
   sees the weights' rounding, not the compute dtype's noise), run on fixed prompts tokenised
   with SRC's tokenizer, and compared: max absolute error and max error relative to the largest
   SRC logit, against a tolerance chosen by the narrowest dtype the conversion rounded to.
   Quantized checkpoints skip this layer (their kernels do not run on CPU).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sglx.weights.checkpoint import Checkpoint, read_checkpoint
from sglx.weights.dtypes import Dtype
from sglx.weights.policy import quant_method_of
from sglx.weights.safetensors_io import TensorEntry
from sglx.weights.transform import BLOCK_BYTES
from sglx_core.errors import SglxError
from sglx_core.report import Finding, Result, Table

ProgressFn = Callable[[str], None]
DEFAULT_PROMPTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! How are you today?",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000.",
)
# Logit tolerance, relative to the largest |logit| of SRC, by the narrowest dtype the conversion
# rounded any tensor to ("exact": every value was kept, so float32 compute must agree). Measured
# on random Llama/Qwen2 models: the tiny test models stay below 1/10 of these, a 2 GB random
# Llama (hidden 2048, 9 layers) below 1/2 (bf16 0.045, fp16 0.005). A wrong conversion (swapped
# bytes, truncation, a scale error) is off by about the size of the logits themselves (~1).
# `--tolerance` overrides it for models that need another bound.
LOGIT_TOLERANCE = {"exact": 1e-5, "F32": 1e-5, "BF16": 0.1, "F16": 0.02}


@dataclass
class TensorStats:
    """Worst differences over the tensors compared so far."""

    compared: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    worst: str = ""
    narrowest: Dtype | None = None
    findings: list[Finding] = field(default_factory=list)


def _rounding_ok(src: np.ndarray, dst: np.ndarray, stored: Dtype) -> tuple[bool, float, float]:
    """(within half an ulp of `stored`, max abs error, max relative error)."""
    error = np.abs(dst - src)
    magnitude = np.abs(src)
    bound = np.maximum(magnitude * 2.0**-stored.precision, 2.0 ** (stored.min_exponent - 1))
    within = bool((error <= bound * (1 + 1e-9)).all())
    max_abs = float(error.max(initial=0.0))
    # Relative error only means something in the normal range of the stored dtype.
    normal = magnitude >= 2.0 ** (stored.min_exponent + stored.precision - 1)
    max_rel = float((error[normal] / magnitude[normal]).max(initial=0.0))
    return within, max_abs, max_rel


def _compare_tensor(
    src: TensorEntry, dst: TensorEntry, fds: Mapping[tuple[str, str], int], stats: TensorStats
) -> None:
    src_fd, dst_fd = fds[("src", src.file)], fds[("dst", dst.file)]
    name = src.name
    if not (src.dtype.is_float and dst.dtype.is_float):
        same = src.dtype == dst.dtype and all(
            os.pread(src_fd, n, src.offset + i) == os.pread(dst_fd, n, dst.offset + i)
            for i, n in _spans(src.nbytes)
        )
        if not same:
            stats.findings.append(
                Finding(
                    "tensor_changed",
                    f"tensor '{name}' ({src.dtype.code}) was not "
                    f"carried byte for byte ({dst.dtype.code} in DST)",
                    path=dst.file,
                )
            )
        return
    exact = src.dtype == dst.dtype
    # Lossy unless DST holds every SRC value (more significand bits and a wider range).
    lossy = dst.dtype.precision < src.dtype.precision or (
        dst.dtype.min_exponent > src.dtype.min_exponent
    )
    if lossy and (stats.narrowest is None or dst.dtype.precision < stats.narrowest.precision):
        stats.narrowest = dst.dtype
    within_all, worst_abs, worst_rel, nonfinite = True, 0.0, 0.0, 0
    step = BLOCK_BYTES // (src.dtype.bits // 8)
    for start in range(0, src.numel, step):
        count = min(step, src.numel - start)
        s = _values(src, src_fd, start, count)
        d = _values(dst, dst_fd, start, count)
        finite = np.isfinite(d)
        if not finite.all():
            nonfinite += int((~finite).sum())
            continue
        if exact:
            within = bool((s == d).all())
            error = np.abs(d - s)
            block_abs, block_rel = float(error.max(initial=0.0)), 0.0
        else:
            within, block_abs, block_rel = _rounding_ok(s, d, dst.dtype)
        within_all &= within
        worst_abs, worst_rel = max(worst_abs, block_abs), max(worst_rel, block_rel)
    stats.compared += 1
    if worst_rel > stats.max_rel or (worst_rel == stats.max_rel and worst_abs > stats.max_abs):
        stats.worst = name
    stats.max_abs, stats.max_rel = max(stats.max_abs, worst_abs), max(stats.max_rel, worst_rel)
    if nonfinite:
        stats.findings.append(
            Finding(
                "non_finite",
                f"tensor '{name}' holds {nonfinite} NaN/Inf value(s) in DST",
                path=dst.file,
                hint="convert again from a sound source",
            )
        )
    elif not within_all:
        what = "bit-identical" if exact else f"within {dst.dtype.code} rounding"
        stats.findings.append(
            Finding(
                "tensor_mismatch",
                f"tensor '{name}' is not {what} of SRC ({src.dtype.code} -> {dst.dtype.code}): "
                f"max abs error {worst_abs:.3g}, max rel error {worst_rel:.3g}",
                path=dst.file,
                hint="the conversion damaged it; convert again",
            )
        )


def _spans(nbytes: int) -> list[tuple[int, int]]:
    return [(i, min(BLOCK_BYTES, nbytes - i)) for i in range(0, nbytes, BLOCK_BYTES)]


def _values(entry: TensorEntry, fd: int, start: int, count: int) -> np.ndarray:
    width = entry.dtype.bits // 8
    data = os.pread(fd, count * width, entry.offset + start * width)
    if len(data) != count * width:
        raise SglxError(f"{entry.file}: tensor '{entry.name}' ends early", code="truncated")
    return np.frombuffer(data, dtype=entry.dtype.numpy_view()).astype(np.float64)


def _compare_structure(source: Checkpoint, converted: Checkpoint) -> list[Finding]:
    src = {t.name: t for t in source.tensors}
    dst = {t.name: t for t in converted.tensors}
    findings = [
        Finding(
            "missing_tensor",
            f"tensor '{n}' of SRC is missing in DST (transformers would initialise it at random)",
            hint="convert again",
        )
        for n in sorted(set(src) - set(dst))
    ]
    findings += [
        Finding("extra_tensor", f"tensor '{n}' in DST is not in SRC")
        for n in sorted(set(dst) - set(src))
    ]
    findings += [
        Finding(
            "shape_mismatch",
            f"tensor '{n}' has shape {list(dst[n].shape)} in DST, "
            f"{list(src[n].shape)} in SRC (truncated or reshaped)",
            path=dst[n].file,
        )
        for n in sorted(set(src) & set(dst))
        if src[n].shape != dst[n].shape
    ]
    return findings


def _compare_tensors(
    source: Checkpoint, converted: Checkpoint, progress: ProgressFn
) -> TensorStats:
    stats = TensorStats()
    dst = {t.name: t for t in converted.tensors}
    fds: dict[tuple[str, str], int] = {}
    with ExitStack() as stack:
        for side, ckpt in (("src", source), ("dst", converted)):
            for shard in ckpt.shards:
                name = shard.path.name
                fds[(side, name)] = stack.enter_context(ckpt.open(name)).fileno()
        progress(f"comparing {len(source.tensors)} tensors")
        for tensor in source.tensors:
            other = dst.get(tensor.name)
            if other is not None and other.shape == tensor.shape:
                _compare_tensor(tensor, other, fds, stats)
    return stats


@dataclass(frozen=True)
class LogitComparison:
    prompt: str
    tokens: int
    max_abs: float
    max_rel: float
    top1_agreement: float
    finite: bool


def _load(path: Path, torch: Any) -> tuple[Any, list[Finding]]:
    from transformers import AutoModelForCausalLM

    try:
        loaded: Any = AutoModelForCausalLM.from_pretrained(
            str(path), dtype=torch.float32, output_loading_info=True
        )
    except (OSError, ValueError, RuntimeError) as exc:
        raise SglxError(
            f"{path}: transformers cannot load the model: {exc}",
            hint="is config.json present and the architecture known to this transformers?",
            code="load_failed",
        ) from None
    model, info = loaded
    findings = [
        Finding(
            f"load_{kind}",
            f"{path.name}: transformers reports {kind.replace('_', ' ')}: "
            f"{', '.join(map(str, keys))}",
            path=str(path),
        )
        for kind in ("missing_keys", "unexpected_keys", "mismatched_keys")
        if (keys := info.get(kind))
    ]
    return model.eval(), findings


def _token_ids(src: Path, dst: Path, prompts: Sequence[str], vocab: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    for path in (src, dst):
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(path))
        except (OSError, ValueError):
            continue
        return [list(tokenizer(p)["input_ids"]) for p in prompts]
    # No tokenizer at all: fixed ids still exercise every layer.
    return [[(7 * i + len(p)) % vocab for i in range(16)] for p in prompts]


def compare_logits(
    src: Path, dst: Path, prompts: Sequence[str], progress: ProgressFn
) -> tuple[list[LogitComparison], list[Finding]]:
    """Logits of both models (float32, CPU) on `prompts`; loaded one at a time."""
    try:
        import torch
        from transformers.utils import logging as hf_logging
    except ImportError as exc:
        raise SglxError(
            f"comparing logits needs torch and transformers: {exc}",
            hint="run it from the sglx dev venv (make setup), which has both",
            code="environment",
        ) from None

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # our progress goes through `progress`
    try:
        return _compare_logits(src, dst, prompts, progress, torch)
    finally:
        if bars:
            hf_logging.enable_progress_bar()


def _compare_logits(
    src: Path, dst: Path, prompts: Sequence[str], progress: ProgressFn, torch: Any
) -> tuple[list[LogitComparison], list[Finding]]:
    logits: list[list[Any]] = []
    findings: list[Finding] = []
    ids: list[list[int]] = []
    for path in (src, dst):
        progress(f"running {path} with transformers (float32, CPU)")
        model, problems = _load(path, torch)
        findings += problems
        if not ids:
            ids = _token_ids(src, dst, prompts, int(model.config.vocab_size))
        with torch.inference_mode():
            logits.append([model(torch.tensor([i])).logits[0].float() for i in ids])
        del model
    results = []
    for prompt, tokens, ref, out in zip(prompts, ids, logits[0], logits[1], strict=True):
        finite = bool(torch.isfinite(out).all())
        error = (out - ref).abs()
        scale = float(ref.abs().max())
        max_abs = float(error.max()) if finite else math.inf
        results.append(
            LogitComparison(
                prompt=prompt,
                tokens=len(tokens),
                max_abs=max_abs,
                max_rel=max_abs / scale if scale > 0 else max_abs,
                top1_agreement=float((out.argmax(-1) == ref.argmax(-1)).float().mean()),
                finite=finite,
            )
        )
    return results, findings


def _json_float(value: float) -> float | None:
    return value if math.isfinite(value) else None  # JSON has no Infinity


def check_weights(
    src: Path,
    dst: Path,
    *,
    prompts: Sequence[str] = DEFAULT_PROMPTS,
    tolerance: float | None = None,
    progress: ProgressFn | None = None,
) -> Result:
    """Compare the converted checkpoint `dst` with its source `src` (see the module docstring)."""
    progress = progress or (lambda message: None)
    command = ("weights", "check")
    source = read_checkpoint(src)
    try:
        converted = read_checkpoint(dst)
    except SglxError as exc:  # a damaged DST is what check is for: a finding, not an error
        finding = Finding(exc.code, exc.message, path=exc.path, hint=exc.hint)
        return Result(
            command,
            data={"src": str(src), "dst": str(dst), "ok": False},
            lines=(f"{dst}: unreadable, nothing compared",),
            findings=(finding,),
        )
    findings = _compare_structure(source, converted)
    stats = _compare_tensors(source, converted, progress)
    findings += stats.findings
    tolerance_key = "exact" if stats.narrowest is None else stats.narrowest.code
    if tolerance is None:
        tolerance = LOGIT_TOLERANCE[tolerance_key]
    elif not 0 < tolerance < 1:
        raise SglxError(
            f"--tolerance {tolerance:g}: must be between 0 and 1 (relative to the largest logit)",
            code="usage",
        )
    tables = [
        Table(
            ("tensors compared", "max abs error", "max rel error", "worst tensor"),
            ((str(stats.compared), f"{stats.max_abs:.3g}", f"{stats.max_rel:.3g}", stats.worst),),
            title="tensors (DST against SRC)",
        )
    ]
    data: dict[str, Any] = {
        "src": str(src),
        "dst": str(dst),
        "tensors": {
            "compared": stats.compared,
            "max_abs_error": stats.max_abs,
            "max_rel_error": stats.max_rel,
            "worst": stats.worst,
        },
        "logits": None,
        "tolerance": {"narrowest_dtype": tolerance_key, "max_rel_error": tolerance},
    }
    lines: list[str] = []
    quantized = quant_method_of(source.config)
    if quantized is not None:
        lines.append(f"logits not compared: '{quantized}' kernels do not run on CPU")
    elif source.config is None:
        lines.append("logits not compared: SRC has no config.json")
    elif any(f.code in ("missing_tensor", "shape_mismatch") for f in findings):
        lines.append("logits not compared: DST is missing tensors")
    else:
        comparisons, load_findings = compare_logits(src, dst, prompts, progress)
        findings += load_findings
        rows = []
        for c in comparisons:
            rows.append(
                (
                    c.prompt[:40],
                    str(c.tokens),
                    f"{c.max_abs:.3g}",
                    f"{c.max_rel:.3g}",
                    f"{c.top1_agreement:.0%}",
                )
            )
            if not c.finite:
                findings.append(
                    Finding(
                        "non_finite_logits", f"DST gives NaN/Inf logits for prompt {c.prompt!r}"
                    )
                )
            elif c.max_rel > tolerance:
                findings.append(
                    Finding(
                        "logits_mismatch",
                        f"logits for prompt {c.prompt!r} differ by {c.max_rel:.3g} of the "
                        f"largest logit (max abs {c.max_abs:.3g}); the tolerance for "
                        f"{tolerance_key} is {tolerance:g}",
                        hint="the conversion changed the model; convert again and compare",
                    )
                )
        tables.append(
            Table(
                ("prompt", "tokens", "max abs error", "max rel error", "top-1 agree"),
                tuple(rows),
                title=f"logits (float32, CPU; tolerance {tolerance:g} relative)",
            )
        )
        data["logits"] = [
            {**c.__dict__, "max_abs": _json_float(c.max_abs), "max_rel": _json_float(c.max_rel)}
            for c in comparisons
        ]
    data["ok"] = not findings
    lines.insert(
        0,
        f"{dst} against {src}: "
        + ("numbers match within tolerance" if not findings else f"{len(findings)} problem(s)"),
    )
    return Result(
        command, data=data, tables=tuple(tables), lines=tuple(lines), findings=tuple(findings)
    )

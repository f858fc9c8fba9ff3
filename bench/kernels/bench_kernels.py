#!/usr/bin/env python3
"""Memory bandwidth of sglx_kernels' ops against the device's copy, torch eager and torch.compile.

Every op here is memory-bound, so its speed is the bytes it must move (each input read once,
each output written once) over its time. Per op and size this prints the achieved bandwidth of
the op as the plugin calls it (``sglx_kernels.<op>``: registry dispatch, on a GPU the Triton
kernel), its share of the device's measured copy bandwidth (a large ``tensor.copy_``), and its
speed-up over the torch reference run eagerly and compiled with ``torch.compile``.

Times are device time: CUDA events around each run, each run preceded by a 1 GiB read that
fills the L2 cache with unrelated clean lines (a write would leave dirty lines whose write-back
the next run would pay for) and keeps the GPU busy long enough that the host has always queued
the run before the GPU reaches it (p50, with p20 and p80). That is what an op costs under CUDA
graphs (sglang's decode); the host's own cost per call (Python, dispatch, launch) is reported
separately, measured at one token where the GPU work is negligible.

    .venv/bin/python bench/kernels/bench_kernels.py                 # table on stdout
    .venv/bin/python bench/kernels/bench_kernels.py --json          # JSON on stdout
    .venv/bin/python bench/kernels/bench_kernels.py --out bench/kernels/results --name h200
    .venv/bin/python bench/kernels/bench_kernels.py --render bench/kernels/results/h200.json

``--out`` writes <name>.json, <name>.md and <name>_bandwidth.png (the plot needs matplotlib);
``--render`` rebuilds the markdown and the plot from a saved JSON. ``--sweep`` times a grid of
launch settings per op family and writes <name>_sweep.json (for tuning.json). Targets, not
tests: at least as fast as torch.compile of the reference, and at least 80% of the copy
bandwidth from 16 MiB on; the report lists every miss. Exit codes: 0 ran, 2 no GPU or bad
arguments.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import json
import platform
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "kernels"))  # runs from a checkout without installing

import torch  # noqa: E402

MiB = 1 << 20
SIZES = [8 << 10, 256 << 10, 1 * MiB, 4 * MiB, 16 * MiB, 64 * MiB, 256 * MiB]
TARGET_COPY_RATIO = 0.8
TARGET_SIZE = 16 * MiB
IMPLS = ("sglx", "eager", "composite", "compile")


@dataclass(frozen=True)
class OpBench:
    """One op at one model shape: how to build inputs for n tokens and count its bytes."""

    name: str  # row key in the report
    op: str  # the sglx_kernels op (registry name)
    label: str
    row_bytes: int  # bytes of the op's main input per token (what "size" counts)
    make: Callable[[int], tuple[Any, ...]]
    bytes_moved: Callable[[int], int]
    sglx: Callable[..., Any]
    reference: Callable[..., Any]
    composite: Callable[..., Any]


def _ops(dtype: torch.dtype, dev: torch.device) -> list[OpBench]:
    import sglx_kernels
    from sglx_kernels.ops import (
        fused_add_rms_norm,
        gelu_and_mul,
        layer_norm,
        rms_norm,
        rotary_embedding,
        silu_and_mul,
    )

    e = torch.tensor([], dtype=dtype).element_size()
    hidden, inter = 4096, 14336  # Llama-3-8B
    q_heads, k_heads, head, max_pos = 32, 8, 128, 4096

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=dev, dtype=dtype)

    def norm_inputs(n: int) -> tuple[Any, ...]:
        return randn(n, hidden), 1.0 + 0.1 * randn(hidden), 1e-6

    def add_norm_inputs(n: int) -> tuple[Any, ...]:
        return randn(n, hidden), randn(n, hidden), 1.0 + 0.1 * randn(hidden), 1e-6

    def rope_inputs(n: int) -> tuple[Any, ...]:
        inv = 1.0 / (10000.0 ** (torch.arange(0, head, 2, device=dev).float() / head))
        freqs = torch.outer(torch.arange(max_pos, device=dev).float(), inv)
        cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1)  # fp32, as sglang keeps it on GPUs
        positions = torch.arange(n, device=dev) % max_pos
        return (
            positions,
            randn(n, q_heads * head),
            randn(n, k_heads * head),
            cache,
            head,
            head,
            True,
        )

    rope_row = (q_heads + k_heads) * head * e
    return [
        OpBench(
            "rms_norm", "rms_norm", f"rms_norm, hidden {hidden}", hidden * e, norm_inputs,
            lambda n: 2 * n * hidden * e + hidden * e,
            sglx_kernels.rms_norm, rms_norm.rms_norm_torch, rms_norm.rms_norm_composite,
        ),
        OpBench(
            "rms_norm_head128", "rms_norm", "rms_norm per head (q/k norm), rows of 128",
            head * e, lambda n: (randn(n, head), 1.0 + 0.1 * randn(head), 1e-6),
            lambda n: 2 * n * head * e + head * e,
            sglx_kernels.rms_norm, rms_norm.rms_norm_torch, rms_norm.rms_norm_composite,
        ),
        OpBench(
            "fused_add_rms_norm", "fused_add_rms_norm", f"fused_add_rms_norm, hidden {hidden}",
            hidden * e,
            add_norm_inputs, lambda n: 4 * n * hidden * e + hidden * e,
            sglx_kernels.fused_add_rms_norm, fused_add_rms_norm.fused_add_rms_norm_torch,
            fused_add_rms_norm.fused_add_rms_norm_composite,
        ),
        OpBench(
            "layer_norm", "layer_norm", f"layer_norm with weight and bias, hidden {hidden}",
            hidden * e,
            lambda n: (randn(n, hidden), 1.0 + 0.1 * randn(hidden), 0.1 * randn(hidden), 1e-5),
            lambda n: 2 * n * hidden * e + 2 * hidden * e,
            sglx_kernels.layer_norm, layer_norm.layer_norm_torch, layer_norm.layer_norm_composite,
        ),
        OpBench(
            "silu_and_mul", "silu_and_mul", f"silu_and_mul, d {inter}", 2 * inter * e,
            lambda n: (randn(n, 2 * inter),), lambda n: 3 * n * inter * e,
            sglx_kernels.silu_and_mul, silu_and_mul.silu_and_mul_torch,
            silu_and_mul.silu_and_mul_composite,
        ),
        OpBench(
            "gelu_and_mul", "gelu_and_mul", f"gelu_and_mul (tanh), d {inter}", 2 * inter * e,
            lambda n: (randn(n, 2 * inter), "tanh"), lambda n: 3 * n * inter * e,
            sglx_kernels.gelu_and_mul, gelu_and_mul.gelu_and_mul_torch,
            gelu_and_mul.gelu_and_mul_composite,
        ),
        OpBench(
            "rotary_embedding", "rotary_embedding",
            f"rotary_embedding, neox, q {q_heads} / k {k_heads} heads of {head}",
            rope_row, rope_inputs,
            # q and k read and written, positions read, each distinct cos/sin row read once (fp32)
            lambda n: 2 * n * rope_row + 8 * n + min(n, max_pos) * head * 4,
            sglx_kernels.rotary_embedding, rotary_embedding.rotary_embedding_torch,
            rotary_embedding.rotary_embedding_composite,
        ),
    ]  # fmt: skip


_flush: torch.Tensor | None = None


def _gpu_time(fn: Callable[[], Any], budget_ms: float = 60.0) -> dict[str, float]:
    """Device time of `fn` in ms (p50, p20, p80) over runs that each start with a cold L2."""
    global _flush
    if _flush is None:
        _flush = torch.ones(1 << 28, dtype=torch.float32, device="cuda")  # 1 GiB
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        fn()
    end.record()
    torch.cuda.synchronize()
    estimate = max(start.elapsed_time(end) / 5, 1e-3)
    runs = min(200, max(20, int(budget_ms / estimate)))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(runs)]
    for i in range(runs):
        _flush.sum()  # ~0.3 ms of reads: L2 holds only clean lines, the host gets far ahead
        starts[i].record()
        fn()
        ends[i].record()
    torch.cuda.synchronize()
    times = sorted(s.elapsed_time(e) for s, e in zip(starts, ends, strict=True))

    def quantile(q: float) -> float:
        return times[min(len(times) - 1, round(q * (len(times) - 1)))]

    return {"p50_ms": quantile(0.5), "p20_ms": quantile(0.2), "p80_ms": quantile(0.8)}


def _host_us(fn: Callable[[], Any], calls: int = 300) -> float:
    """Wall time per call of `fn` back to back: at one token that is the host's cost."""
    import time

    fn()
    torch.cuda.synchronize()
    begin = time.perf_counter()
    for _ in range(calls):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - begin) / calls * 1e6


def _compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    import torch._dynamo

    torch._dynamo.reset()
    return torch.compile(fn, dynamic=False)


def _max_abs_diff(a: Any, b: Any) -> float:
    if isinstance(a, tuple):
        return max(_max_abs_diff(x, y) for x, y in zip(a, b, strict=True))
    return float((a.float() - b.float()).abs().max())


def _environment(dev: torch.device) -> dict[str, Any]:
    import triton

    import sglx_kernels
    from sglx_kernels import _triton

    props = torch.cuda.get_device_properties(dev)
    target = _triton.target_for(dev)
    return {
        "device": props.name,
        "multiprocessors": props.multi_processor_count,
        "memory_gib": round(props.total_memory / (1 << 30), 1),
        "triton_target": f"{target.backend}:{target.arch} (warp size {target.warp_size})",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": torch.version.hip,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "sglx_kernels": sglx_kernels.__version__,
        "timestamp": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def measure_copy(dev: torch.device, nbytes: int) -> dict[str, float]:
    """Device-to-device copy of `nbytes`: bandwidth counts bytes read plus bytes written."""
    src = torch.empty(nbytes, dtype=torch.uint8, device=dev).random_()
    dst = torch.empty_like(src)
    timing = _gpu_time(lambda: dst.copy_(src))
    return {"bytes": nbytes, **timing, "gbps": 2 * nbytes / timing["p50_ms"] / 1e6}


def run(
    dev: torch.device,
    dtype: torch.dtype,
    sizes: list[int],
    only: set[str],
    checkpoint: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Measure every op at every size; `checkpoint` receives the partial report after each op."""
    import torch._dynamo

    from sglx_kernels import registry

    # One compiled graph per (op, size): raise the recompile limit so none falls back to eager.
    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)
    peak = measure_copy(dev, 1 << 30)
    copy_by_size = {size: measure_copy(dev, size) for size in sizes}
    results: list[dict[str, Any]] = []
    host_us: dict[str, dict[str, float]] = {}
    report: dict[str, Any] = {
        "sglx_bench": "kernels",
        "schema": 1,
        "environment": _environment(dev),
        "dtype": str(dtype).removeprefix("torch."),
        "copy_peak": peak,
        "copy_by_size": [copy_by_size[s] for s in sizes],
        "targets": {
            "copy_ratio": TARGET_COPY_RATIO,
            "from_input_bytes": TARGET_SIZE,
            "speedup_vs_compile": 1.0,
        },
        "results": results,
        "host_us_per_call": host_us,
    }
    for op in _ops(dtype, dev):
        if only and op.name not in only:
            continue
        host_us[op.name] = {}
        chosen = registry.select(op.op, dev)
        for size in sizes:
            tokens = max(1, size // op.row_bytes)
            args = op.make(tokens)
            ours = op.sglx(*args)
            diff = _max_abs_diff(ours, op.reference(*args))
            compiled = _compiled(op.reference)
            compiled(*args)
            nbytes = op.bytes_moved(tokens)
            impls: dict[str, dict[str, float]] = {}
            for impl, fn in (("sglx", op.sglx), ("eager", op.reference),
                             ("composite", op.composite), ("compile", compiled)):  # fmt: skip
                timing = _gpu_time(lambda fn=fn, args=args: fn(*args))
                impls[impl] = {**timing, "gbps": nbytes / timing["p50_ms"] / 1e6}
            if size == min(sizes):
                for impl, fn in (("sglx", op.sglx), ("eager", op.reference), ("compile", compiled)):
                    host_us[op.name][impl] = _host_us(lambda fn=fn, args=args: fn(*args))
            sglx_ms = impls["sglx"]["p50_ms"]
            results.append({
                "op": op.name,
                "label": op.label,
                "implementation": chosen,
                "tokens": tokens,
                "size_bytes": size,
                "input_bytes": tokens * op.row_bytes,
                "bytes_moved": nbytes,
                "max_abs_diff_vs_reference": diff,
                "impls": impls,
                "copy_ratio": impls["sglx"]["gbps"] / peak["gbps"],
                "copy_ratio_same_size": impls["sglx"]["gbps"] / copy_by_size[size]["gbps"],
                "speedup_vs_eager": impls["eager"]["p50_ms"] / sglx_ms,
                "speedup_vs_composite": impls["composite"]["p50_ms"] / sglx_ms,
                "speedup_vs_compile": impls["compile"]["p50_ms"] / sglx_ms,
            })  # fmt: skip
            print(f"bench: {op.name} {tokens} tokens done", file=sys.stderr, flush=True)
        if checkpoint is not None:
            checkpoint({**report, "misses": misses(report)})
    report["misses"] = misses(report)
    return report


def nominal_bytes(result: dict[str, Any]) -> int:
    """The size class a result belongs to: whole tokens make the real input a little smaller
    (16 MiB of SwiGLU input is 292 tokens, 15.97 MiB), and the target counts it as 16 MiB."""
    return int(result["size_bytes"])


def _fill_size_classes(report: dict[str, Any]) -> None:
    """Reports written before results carried size_bytes ran SIZES in order, op by op."""
    position: dict[str, int] = {}
    for result in report["results"]:
        index = position.get(result["op"], 0)
        position[result["op"]] = index + 1
        result.setdefault("size_bytes", SIZES[index])


def misses(report: dict[str, Any]) -> list[str]:
    """Every target missed, as sentences for the markdown and the report."""
    out = []
    for r in report["results"]:
        where = f"{r['op']} at {r['input_bytes'] / MiB:.3g} MiB ({r['tokens']} tokens)"
        if r["speedup_vs_compile"] < 1.0:
            out.append(f"{where}: {r['speedup_vs_compile']:.2f}x torch.compile (target >= 1)")
        if nominal_bytes(r) >= TARGET_SIZE and r["copy_ratio"] < TARGET_COPY_RATIO:
            out.append(
                f"{where}: {100 * r['copy_ratio']:.0f}% of the copy bandwidth (target >= 80%; "
                f"{100 * r['copy_ratio_same_size']:.0f}% of a same-size copy)"
            )
    return out


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    peak = report["copy_peak"]
    lines = [
        f"# sglx_kernels on {env['device']}",
        "",
        f"{env['timestamp']}; torch {env['torch']} (CUDA {env['cuda']}, HIP {env['hip']}), "
        f"Triton {env['triton']}, target {env['triton_target']}, {report['dtype']}. "
        f"Measured copy bandwidth: **{peak['gbps']:.0f} GB/s** (1 GiB `copy_`, read + write). "
        "Bandwidth = bytes the op must move / p50 device time (CUDA events; before each run a "
        "1 GiB read leaves L2 cold but clean, and keeps the host ahead, so launch overhead is "
        "excluded, as under CUDA graphs). `% of copy`: of the 1 GiB copy; `% same-size copy`: of "
        "a copy of the row's size class (8 KiB ... 256 MiB; one token can be larger). "
        "`vs eager`, `vs compile`: device time of the torch reference, eager or "
        "`torch.compile`d, over the sglx time (above 1 = sglx faster).",
        "",
        "| op | size MiB | tokens | sglx GB/s (p20-p80 µs) | % of copy | % same-size copy "
        "| vs eager | vs compile |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in report["results"]:
        s = r["impls"]["sglx"]
        big = nominal_bytes(r) >= TARGET_SIZE
        pct = f"{100 * r['copy_ratio']:.0f}%"
        if big and r["copy_ratio"] < TARGET_COPY_RATIO:
            pct += " (miss)"
        vs_compile = f"{r['speedup_vs_compile']:.2f}x"
        if r["speedup_vs_compile"] < 1.0:
            vs_compile += " (miss)"
        lines.append(
            f"| {r['op']} | {r['input_bytes'] / MiB:.3g} | {r['tokens']} | {s['gbps']:.0f} "
            f"({1e3 * s['p20_ms']:.0f}-{1e3 * s['p80_ms']:.0f}) | {pct} | "
            f"{100 * r['copy_ratio_same_size']:.0f}% | {r['speedup_vs_eager']:.2f}x | "
            f"{vs_compile} |"
        )
    lines += ["", "Shapes: " + "; ".join(sorted({r["label"] for r in report["results"]})) + "."]
    host = report.get("host_us_per_call") or {}
    if host:
        lines += [
            "",
            "Host cost per call at one token (µs, wall time of back-to-back calls; the GPU work is "
            "negligible there, so this is Python, dispatch and launch):",
            "",
            "| op | sglx | eager | compile |",
            "|---|---:|---:|---:|",
        ]
        for name, per in host.items():
            cells = " | ".join(
                f"{per[k]:.0f}" if k in per else "-" for k in ("sglx", "eager", "compile")
            )
            lines.append(f"| {name} | {cells} |")
    same = {c["bytes"]: c for c in report["copy_by_size"]}.get(TARGET_SIZE)
    if same:
        lines += [
            "",
            f"For scale: a plain 16 MiB copy reaches {same['gbps']:.0f} GB/s, "
            f"{100 * same['gbps'] / peak['gbps']:.0f}% of the 1 GiB copy (one launch of a few "
            "microseconds pays its ramp-up and tail); from 64 MiB on the gap closes.",
        ]
    lines += ["", "## Targets missed", ""]
    lines += [f"- {m}" for m in report["misses"]] or ["- none"]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> bool:
    """Bandwidth against size per op (sglx solid, torch.compile dashed), with the copy line."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("bench: matplotlib is not installed; skipping the plot", file=sys.stderr)
        return False
    fig, ax = plt.subplots(figsize=(8, 5))
    copies = report["copy_by_size"]
    ax.plot([c["bytes"] / MiB for c in copies], [c["gbps"] for c in copies], "k-", lw=2,
            label="tensor.copy_ (same size)")  # fmt: skip
    peak = report["copy_peak"]["gbps"]
    ax.axhline(TARGET_COPY_RATIO * peak, color="grey", ls=":", label="80% of 1 GiB copy")
    ax.axvline(TARGET_SIZE / MiB, color="grey", ls="-.", lw=0.8)
    ops = sorted({r["op"] for r in report["results"]})
    for i, op in enumerate(ops):
        rows = [r for r in report["results"] if r["op"] == op]
        xs = [r["input_bytes"] / MiB for r in rows]
        color = f"C{i}"
        ax.plot(xs, [r["impls"]["sglx"]["gbps"] for r in rows], "-o", color=color, label=op)
        ax.plot(xs, [r["impls"]["compile"]["gbps"] for r in rows], "--", color=color, alpha=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("input size (MiB)")
    ax.set_ylabel("achieved bandwidth (GB/s)")
    env = report["environment"]
    ax.set_title(f"sglx_kernels on {env['device']} ({report['dtype']}); dashed: torch.compile")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


# --- tuning sweep -------------------------------------------------------------------------------

SWEEP = {
    "norm": {"ops": ["rms_norm", "fused_add_rms_norm", "rms_norm_head128"],
             "threads": [128, 256, 512, 1024], "elements_per_program": [4096, 8192]},
    "gated": {"ops": ["silu_and_mul"], "threads": [128, 256, 512],
              "elements_per_program": [2048, 4096, 8192]},
    "rotary": {"ops": ["rotary_embedding"], "threads": [64, 128, 256],
               "elements_per_program": [2048, 4096, 8192]},
}  # fmt: skip


def sweep(dev: torch.device, dtype: torch.dtype, sizes: list[int]) -> dict[str, Any]:
    """Time each op family under a grid of (threads, elements_per_program) for the target key."""
    from sglx_kernels import _triton, tuning

    key = _triton.target_for(dev).tuning_keys[0]
    base = {"schema": 1, "targets": copy.deepcopy(tuning.table())}
    ops = {op.name: op for op in _ops(dtype, dev)}
    rows = []
    try:
        for family, grid in SWEEP.items():
            for threads in grid["threads"]:
                for epp in grid["elements_per_program"]:
                    table = copy.deepcopy(base)
                    table["targets"].setdefault(key, {})[family] = {
                        "elements_per_program": epp, "threads": [[1 << 17, threads]]
                    }  # fmt: skip
                    tuning.set_table(table)
                    for name in grid["ops"]:
                        op = ops[name]
                        for size in sizes:
                            tokens = max(1, size // op.row_bytes)
                            args = op.make(tokens)
                            timing = _gpu_time(lambda op=op, args=args: op.sglx(*args))
                            rows.append({
                                "family": family, "op": name, "threads": threads,
                                "elements_per_program": epp, "tokens": tokens,
                                "input_bytes": tokens * op.row_bytes, **timing,
                                "gbps": op.bytes_moved(tokens) / timing["p50_ms"] / 1e6,
                            })  # fmt: skip
    finally:
        tuning.set_table(None)
    return {"target_key": key, "environment": _environment(dev), "rows": rows}


def _slug(name: str) -> str:
    words = re.findall(r"[a-z0-9]+", name.lower())
    return words[-1] if words else "device"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the report as JSON only")
    parser.add_argument(
        "--out", type=Path, help="write <name>.json, <name>.md, <name>_bandwidth.png here"
    )
    parser.add_argument(
        "--name", help="file name stem for --out (default: from the device name, e.g. h200)"
    )
    parser.add_argument("--ops", default="", help="comma-separated subset of ops")
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--sizes-mib", default="", help="comma-separated input sizes in MiB")
    parser.add_argument("--sweep", action="store_true", help="also time a grid of launch settings")
    parser.add_argument("--render", type=Path, help="rebuild markdown and plot from a saved JSON")
    args = parser.parse_args(argv)

    if args.render:
        report = json.loads(args.render.read_text())
        _fill_size_classes(report)
        report["misses"] = misses(report)
        args.render.with_suffix(".md").write_text(markdown(report))
        plot(report, args.render.with_name(args.render.stem + "_bandwidth.png"))
        return 0
    if not torch.cuda.is_available():
        print("bench_kernels: needs a CUDA or HIP GPU (torch.cuda.is_available() is False); "
              "run it on the GPU machine", file=sys.stderr)  # fmt: skip
        return 2
    try:
        sizes = [int(float(s) * MiB) for s in args.sizes_mib.split(",") if s] or SIZES
    except ValueError:
        print(
            f"bench_kernels: --sizes-mib {args.sizes_mib!r} is not a list of numbers",
            file=sys.stderr,
        )
        return 2
    dev = torch.device("cuda")
    dtype = getattr(torch, args.dtype)
    only = {s.strip() for s in args.ops.split(",") if s.strip()}
    name = args.name or _slug(torch.cuda.get_device_name(dev))

    def save(report: dict[str, Any]) -> None:
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            for suffix, text in (
                (".json", json.dumps(report, indent=2) + "\n"),
                (".md", markdown(report)),
            ):
                tmp = args.out / f".{name}{suffix}.tmp"
                tmp.write_text(text)
                tmp.replace(args.out / f"{name}{suffix}")

    report = run(dev, dtype, sizes, only, checkpoint=save)
    save(report)
    if args.out:
        plot(report, args.out / f"{name}_bandwidth.png")
    if args.sweep:
        result = sweep(dev, dtype, [1 * MiB, 16 * MiB, 256 * MiB])
        if args.out:
            (args.out / f"{name}_sweep.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

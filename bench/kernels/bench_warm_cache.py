#!/usr/bin/env python3
"""First call of sglx_kernels on a GPU with a Triton cache built where no GPU was, against cold.

The cache is built by ``python -m sglx_kernels.warm`` in a child process that sees no GPU
(``CUDA_VISIBLE_DEVICES=""``), for this GPU's own target (``cuda:<cc>:32``) and a Llama-3-8B
layer at TP 1 (hidden 4096, head_dim 128, 32 / 8 heads, intermediate 14336) over a list of
token counts. Then fresh GPU child processes run sglx's public ops (``rms_norm``,
``fused_add_rms_norm``, ``silu_and_mul``, ``rotary_embedding``, with ``SGLX_KERNELS_IMPL=triton``)
for the same shapes and token counts, once per cache:

- ``cold``: an empty ``TRITON_CACHE_DIR``;
- ``warm``: a copy of the cache built without a GPU;
- ``gpu_warm``: a copy of the cache a cold run left (kernels and host modules built on the GPU
  host itself): the floor a warm cache can reach.

Each run counts kernel compiles (Triton's compilation listener: ``cache_hit`` False), host
modules built (Triton's ``runtime.build._build``, which runs only on a cache miss), the new
entries in the cache folder (listed before and after), and times the first call of each op and
the whole first pass (wall time, ``torch.cuda.synchronize`` after each call, CUDA already
initialised). Outputs are hashed: warm and gpu_warm must equal cold bit for bit.

    PYTHONPATH=kernels python3 bench/kernels/bench_warm_cache.py --out DIR --name h200_warm_cache
    python3 bench/kernels/bench_warm_cache.py --render bench/kernels/results/h200_warm_cache.json

Exit codes: 0 ran and warm compiled nothing, 1 warm compiled something or outputs differ,
2 no GPU, bad arguments or a child failed.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
KERNELS = REPO / "kernels"
sys.path.insert(0, str(KERNELS))  # runs from a checkout without installing

# Llama-3-8B at TP 1, as sglx_kernels.warm's spec takes it.
SHAPE: dict[str, Any] = {
    "hidden_size": 4096,
    "head_dim": 128,
    "heads": 32,
    "kv_heads": 8,
    "intermediate_size": 14336,
    "rotary_dim": 128,
    "max_positions": 8192,
}
TOKENS = (1, 2, 3, 4, 8, 16, 32, 64, 128, 512, 2048, 8192)
OPS = ("rms_norm", "fused_add_rms_norm", "silu_and_mul", "rotary_embedding")
RUNS = ("cold", "warm", "gpu_warm")
CHILD_TIMEOUT_S = 300
EPS = 1e-6


# --- the GPU child: one first pass over every op and token count -----------------------------


def _inputs(tokens: int, seed: int) -> dict[str, tuple[Any, ...]]:
    """Each op's arguments at `tokens`, as sglang passes them (q, k: views of a fused qkv;
    the cos/sin cache in fp32, as sglang keeps it on CUDA and HIP)."""
    import torch

    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(seed)

    def randn(*size: int, dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
        return torch.randn(size, generator=gen, device=dev, dtype=dtype)

    hidden, head = SHAPE["hidden_size"], SHAPE["head_dim"]
    q_width, kv_width = SHAPE["heads"] * head, SHAPE["kv_heads"] * head
    weight = 1.0 + 0.1 * randn(hidden)
    qkv = randn(tokens, q_width + 2 * kv_width)
    inv = 1.0 / (10000.0 ** (torch.arange(0, SHAPE["rotary_dim"], 2, device=dev).float() / head))
    freqs = torch.outer(torch.arange(SHAPE["max_positions"], device=dev).float(), inv)
    cos_sin = torch.cat((freqs.cos(), freqs.sin()), dim=-1)
    positions = torch.randint(0, SHAPE["max_positions"], (tokens,), generator=gen, device=dev)
    return {
        "rms_norm": (randn(tokens, hidden), weight, EPS),
        "fused_add_rms_norm": (randn(tokens, hidden), randn(tokens, hidden), weight, EPS),
        "silu_and_mul": (randn(tokens, 2 * SHAPE["intermediate_size"]),),
        "rotary_embedding": (
            positions, qkv[:, :q_width], qkv[:, q_width : q_width + kv_width], cos_sin,
            head, SHAPE["rotary_dim"], True,
        ),
    }  # fmt: skip


def _digest(value: Any) -> str:
    import torch

    parts = value if isinstance(value, tuple) else (value,)
    sha = hashlib.sha256()
    for part in parts:
        if isinstance(part, torch.Tensor):
            sha.update(part.detach().contiguous().view(torch.uint8).cpu().numpy().tobytes())
    return sha.hexdigest()[:16]


def child(tokens: list[int], result_path: Path) -> int:
    """Run the first pass in this process (TRITON_CACHE_DIR set by the parent); write JSON."""
    started = time.perf_counter()
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda").add_(1)
    torch.cuda.synchronize()
    cuda_init_s = time.perf_counter() - started

    import triton
    import triton.runtime.build as triton_build

    compiled: list[str] = []
    loaded: list[str] = []
    specializations: list[str] = []
    host_built: list[str] = []

    def listener(*, src: Any, metadata: Any, cache_hit: bool, **_: Any) -> None:
        name = str(getattr(src, "name", "?"))
        (loaded if cache_hit else compiled).append(name)

    def post_compile(*, fn: Any, **_: Any) -> None:
        specializations.append(str(getattr(fn, "name", fn)))

    real_build: Callable[..., Any] = triton_build._build

    def counting_build(name: str, *args: Any, **kwargs: Any) -> Any:
        host_built.append(name)
        return real_build(name, *args, **kwargs)

    hooks = []
    if hasattr(triton.knobs, "compilation") and hasattr(triton.knobs.compilation, "listener"):
        triton.knobs.compilation.listener = listener
        hooks.append("knobs.compilation.listener")
    if hasattr(triton.knobs.runtime, "jit_post_compile_hook"):
        triton.knobs.runtime.jit_post_compile_hook = post_compile
        hooks.append("knobs.runtime.jit_post_compile_hook")
    triton_build._build = counting_build
    hooks.append("runtime.build._build")

    import sglx_kernels
    from sglx_kernels import registry

    impls: set[tuple[str, str]] = set()
    registry.set_recorder(lambda op, impl, _s: impls.add((op, impl)))
    inputs = {n: _inputs(n, seed=1000 + n) for n in tokens}
    input_digest = hashlib.sha256(
        "".join(_digest(tuple(a)) for n in tokens for a in inputs[n].values()).encode()
    ).hexdigest()[:16]
    torch.cuda.synchronize()

    calls: list[dict[str, Any]] = []
    outputs: dict[str, Any] = {}
    pass_start = time.perf_counter()
    for n in tokens:
        for op in OPS:
            before = (len(compiled), len(host_built))
            t0 = time.perf_counter()
            out = getattr(sglx_kernels, op)(*inputs[n][op])
            torch.cuda.synchronize()
            seconds = time.perf_counter() - t0
            outputs[f"{op}:{n}"] = out
            calls.append({"op": op, "tokens": n, "seconds": seconds,
                          "kernel_compiles": len(compiled) - before[0],
                          "host_builds": len(host_built) - before[1]})  # fmt: skip
    first_pass_s = time.perf_counter() - pass_start

    t0 = time.perf_counter()  # the same pass again: every kernel loaded, nothing left to pay
    for n in tokens:
        for op in OPS:
            getattr(sglx_kernels, op)(*inputs[n][op])
            torch.cuda.synchronize()
    second_pass_s = time.perf_counter() - t0

    first_call = {op: next(c["seconds"] for c in calls if c["op"] == op) for op in OPS}
    result = {
        "cuda_init_s": cuda_init_s,
        "first_pass_s": first_pass_s,
        "second_pass_s": second_pass_s,
        "first_call_s": first_call,
        "calls": calls,
        "hooks": hooks,
        "kernel_compiles": sorted(compiled),
        "kernels_loaded_from_disk": sorted(loaded),
        "jit_specializations": len(specializations),
        "host_modules_built": sorted(host_built),
        "implementations": sorted(f"{op}={impl}" for op, impl in impls),
        "input_digest": input_digest,
        "output_digests": {key: _digest(value) for key, value in outputs.items()},
    }
    result_path.write_text(json.dumps(result, indent=1) + "\n")
    return 0


# --- the parent: build, run each cache in a fresh process, compare ---------------------------


def _listing(cache: Path) -> dict[str, list[str]]:
    """Triton's cache folder: one sub-folder per key, holding a kernel's files or one .so."""
    if not cache.is_dir():
        return {}
    return {d.name: sorted(f.name for f in d.iterdir()) for d in cache.iterdir() if d.is_dir()}


def _classify(listing: dict[str, list[str]]) -> tuple[dict[str, str], dict[str, str]]:
    """(kernel entries, host-module entries): key -> kernel or module name."""
    kernels: dict[str, str] = {}
    hosts: dict[str, str] = {}
    for key, files in listing.items():
        so = [f for f in files if f.endswith(".so")]
        if so:
            hosts[key] = so[0].split(".")[0]
            continue
        meta = [f for f in files if f.endswith(".json") and not f.startswith("__grp__")]
        if meta:
            kernels[key] = meta[0].removesuffix(".json")
    return kernels, hosts


def _new_entries(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, Any]:
    added = {k: v for k, v in after.items() if before.get(k) != v}
    kernels, hosts = _classify(added)
    return {
        "kernel_entries": sorted(kernels.values()),
        "host_module_entries": sorted(hosts.values()),
    }


def _child_env(cache: Path, *, gpu: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = str(cache)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(KERNELS), env.get("PYTHONPATH")]))
    env["SGLX_KERNELS_IMPL"] = "triton"
    env["PYTHONUNBUFFERED"] = "1"
    if not gpu:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _run(cmd: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    seconds = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(cmd[:4])} ... exited {done.returncode}:\n{done.stderr[-3000:]}"
        )
    return done, seconds


# The builder: sees no GPU (asserted), then runs sglx_kernels.warm's CLI.
_BUILD = (
    "import sys, torch\n"
    "assert torch.cuda.device_count() == 0, 'the builder must see no GPU'\n"
    "from sglx_kernels.warm import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def build(cache: Path, target: str, tokens: list[int], work: Path) -> dict[str, Any]:
    spec = work / "spec.json"
    spec.write_text(json.dumps({"dtype": "bfloat16", "tokens": tokens, "shapes": [SHAPE]}))
    done, seconds = _run(
        [sys.executable, "-c", _BUILD, "--target", target, "--spec", str(spec)],
        _child_env(cache, gpu=False),
    )
    kernels, hosts = _classify(_listing(cache))
    return {"report": json.loads(done.stdout), "wall_s": seconds,
            "kernel_entries": sorted(kernels.values()),
            "host_module_entries": sorted(hosts.values()),
            "kernel_keys": sorted(kernels), "host_keys": sorted(hosts)}  # fmt: skip


def gpu_run(cache: Path, tokens: list[int], work: Path) -> dict[str, Any]:
    before = _listing(cache)
    out = work / f"result-{cache.name}.json"
    _, seconds = _run(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(out),
         "--tokens", ",".join(map(str, tokens))],
        _child_env(cache, gpu=True),
    )  # fmt: skip
    result: dict[str, Any] = json.loads(out.read_text())
    result["process_wall_s"] = seconds
    result["cache_listing"] = _new_entries(before, _listing(cache))
    return result


def _versions() -> dict[str, Any]:
    import torch
    import triton

    import sglx_kernels

    def first_line(cmd: list[str]) -> str | None:
        try:
            text = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
        return text.strip().splitlines()[0] if text.strip() else None

    props = torch.cuda.get_device_properties(0)
    return {
        "device": props.name,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "driver": first_line(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]),
        "cc": os.environ.get("CC"),
        "gcc": first_line(["gcc", "--version"]),
        "clang": first_line(["clang", "--version"]),
        "python": platform.python_version(),
        "sglx_kernels": sglx_kernels.__version__,
        "cpus": os.cpu_count(),
        "timestamp": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def measure(tokens: list[int], repeats: int, work: Path) -> dict[str, Any]:
    import torch

    major, minor = torch.cuda.get_device_capability(0)
    target = f"cuda:{10 * major + minor}:32"  # what Triton's CUDA driver reports: warps of 32
    built_cache = work / "built"
    built = build(built_cache, target, tokens, work)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in RUNS}
    for i in range(repeats):
        cold = work / f"cold{i}"
        cold.mkdir()
        runs["cold"].append(gpu_run(cold, tokens, work))
        warm = work / f"warm{i}"
        shutil.copytree(built_cache, warm)
        runs["warm"].append(gpu_run(warm, tokens, work))
        gpu_warm = work / f"gpu_warm{i}"
        shutil.copytree(cold, gpu_warm)
        runs["gpu_warm"].append(gpu_run(gpu_warm, tokens, work))
    cold_kernels, cold_hosts = _classify(_listing(work / "cold0"))
    return {
        "sglx_bench": "warm_cache",
        "schema": 1,
        "environment": _versions(),
        "target": target,
        "shape": SHAPE,
        "tokens": tokens,
        "dtype": "bfloat16",
        "repeats": repeats,
        "build": built,
        "keys_match_cold": {
            "kernels": sorted(cold_kernels) == built["kernel_keys"],
            "host_modules": sorted(cold_hosts) == built["host_keys"],
        },
        "runs": runs,
    }


def summarize(report: dict[str, Any]) -> dict[str, Any]:
    """Medians over repeats, compile counts per run, bitwise checks, the headline."""
    runs = report["runs"]
    summary: dict[str, Any] = {}
    for name, results in runs.items():
        summary[name] = {
            "kernel_compiles": [len(r["kernel_compiles"]) for r in results],
            "kernels_loaded_from_disk": [len(r["kernels_loaded_from_disk"]) for r in results],
            "new_kernel_entries": [len(r["cache_listing"]["kernel_entries"]) for r in results],
            "host_modules_built": [len(r["host_modules_built"]) for r in results],
            "new_host_module_entries": [
                len(r["cache_listing"]["host_module_entries"]) for r in results
            ],
            "first_pass_s": statistics.median(r["first_pass_s"] for r in results),
            "second_pass_s": statistics.median(r["second_pass_s"] for r in results),
            "process_wall_s": statistics.median(r["process_wall_s"] for r in results),
            "first_call_s": {
                op: statistics.median(r["first_call_s"][op] for r in results) for op in OPS
            },
        }
    reference = runs["cold"][0]["output_digests"]
    inputs = runs["cold"][0]["input_digest"]
    summary["bitwise_equal_to_cold"] = {
        name: all(r["output_digests"] == reference and r["input_digest"] == inputs
                  for r in results)
        for name, results in runs.items()
    }  # fmt: skip
    summary["implementations"] = sorted({i for rs in runs.values() for r in rs
                                         for i in r["implementations"]})  # fmt: skip
    warm = summary["warm"]
    summary["headline_zero_compiles"] = (
        not any(warm["kernel_compiles"]) and not any(warm["new_kernel_entries"])
        and not any(warm["host_modules_built"]) and not any(warm["new_host_module_entries"])
    )  # fmt: skip
    return summary


def markdown(report: dict[str, Any]) -> str:
    env, s, b = report["environment"], report["summary"], report["build"]
    cold = s["cold"]

    def counts(values: list[int]) -> str:
        return "/".join(map(str, values))

    def ratio(a: float, c: float) -> str:
        return f"{c / a:.1f}x" if a > 0 else "-"

    lines = [
        f"# Triton cache built without a GPU, first call on {env['device']}",
        "",
        f"{env['timestamp']}; torch {env['torch']} (CUDA {env['cuda']}), Triton {env['triton']}, "
        f"driver {env['driver']}, {env['gcc']}; target `{report['target']}`; "
        f"Llama-3-8B layer at TP 1 ({report['shape']['hidden_size']} hidden, "
        f"{report['shape']['heads']}/{report['shape']['kv_heads']} heads of "
        f"{report['shape']['head_dim']}, intermediate {report['shape']['intermediate_size']}), "
        f"{report['dtype']}, tokens {', '.join(map(str, report['tokens']))}.",
        "",
        f"**Headline: warm cache = {counts(s['warm']['kernel_compiles'])} kernel compiles and "
        f"{counts(s['warm']['host_modules_built'])} host-module builds** (one number per repeat); "
        f"{'zero' if s['headline_zero_compiles'] else 'NOT zero'}.",
        "",
        f'Cache built in a process that saw no GPU (`CUDA_VISIBLE_DEVICES=""`, asserted) by '
        f"`python -m sglx_kernels.warm --target {report['target']}`: "
        f"{len(b['kernel_entries'])} kernel entries and host modules "
        f"{', '.join(b['report']['host_modules']) or 'none'} "
        f"({len(b['host_module_entries'])} .so entries) in {b['wall_s']:.1f} s. Its keys equal "
        f"those a cold GPU run creates: kernels {report['keys_match_cold']['kernels']}, host "
        f"modules {report['keys_match_cold']['host_modules']}.",
        "",
        "Runs are fresh GPU processes (`SGLX_KERNELS_IMPL=triton`), "
        f"{report['repeats']} repeats each; times are medians, counts per repeat. Compiles: "
        "Triton's compilation listener (`cache_hit=False`); host modules: calls of Triton's "
        "`runtime.build._build`; new entries: the cache folder listed before and after. First "
        "pass: every op at every token count once, `torch.cuda.synchronize()` after each call, "
        "CUDA initialised before; the first `rms_norm` call also pays Triton's driver setup "
        "(`cuda_utils`).",
        "",
        "| run | kernel compiles | new kernel entries | host modules built | new .so entries "
        "| first pass s | vs cold | second pass s | "
        + " | ".join(f"first {op} ms" for op in OPS)
        + " | bit-equal to cold |",
        "|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(OPS) + "---|",
    ]
    labels = {"cold": "cold (empty cache)", "warm": "warm (built without GPU)",
              "gpu_warm": "warm (cache a cold GPU run left)"}  # fmt: skip
    for name in RUNS:
        r = s[name]
        first = r["first_call_s"]
        lines.append(
            f"| {labels[name]} | {counts(r['kernel_compiles'])} | "
            f"{counts(r['new_kernel_entries'])} | {counts(r['host_modules_built'])} | "
            f"{counts(r['new_host_module_entries'])} | {r['first_pass_s']:.3f} | "
            f"{ratio(r['first_pass_s'], cold['first_pass_s'])} | {r['second_pass_s']:.3f} | "
            + " | ".join(
                f"{1e3 * first[op]:.1f} ({ratio(first[op], cold['first_call_s'][op])})"
                for op in OPS
            )
            + f" | {s['bitwise_equal_to_cold'][name]} |"
        )
    lines += [
        "",
        "`vs cold`: cold time over this run's (above 1 = faster). What the warm rows' first "
        "call still pays, with no compile counted, is Triton's per-process setup, the same with "
        "the cache the GPU host left itself: on Triton 3.6 mostly `triton_key()` (a SHA-256 of "
        "Triton's own sources and libtriton.so) and imports. Implementations that ran: "
        + ", ".join(s["implementations"])
        + ".",
    ]
    return "\n".join(lines) + "\n"


def write(report: dict[str, Any], out: Path, name: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for suffix, text in ((".json", json.dumps(report, indent=1) + "\n"), (".md", markdown(report))):
        tmp = out / f".{name}{suffix}.tmp"
        tmp.write_text(text)
        tmp.replace(out / f"{name}{suffix}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="write <name>.json and <name>.md here")
    parser.add_argument("--name", default="h200_warm_cache", help="file name stem for --out")
    parser.add_argument("--tokens", default=",".join(map(str, TOKENS)), help="token counts")
    parser.add_argument("--repeats", type=int, default=3, help="GPU runs of each cache")
    parser.add_argument("--render", type=Path, help="rebuild the markdown from a saved JSON")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    try:
        tokens = [int(t) for t in args.tokens.split(",") if t.strip()]
    except ValueError:
        print(f"bench_warm_cache: --tokens {args.tokens!r} is not a list of integers",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.render:
        report = json.loads(args.render.read_text())
        args.render.with_suffix(".md").write_text(markdown(report))
        return 0
    if args.child:
        return child(tokens, args.child)
    import torch

    if not torch.cuda.is_available() or torch.version.cuda is None:
        print("bench_warm_cache: needs an NVIDIA GPU (torch.cuda with CUDA); run it on the GPU "
              "machine", file=sys.stderr)  # fmt: skip
        return 2
    if args.repeats < 1:
        print("bench_warm_cache: --repeats must be at least 1", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="sglx-warm-") as tmp:
        try:
            report = measure(tokens, args.repeats, Path(tmp))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"bench_warm_cache: {exc}", file=sys.stderr)
            return 2
    report["summary"] = summarize(report)
    if args.out:
        write(report, args.out, args.name)
    print(markdown(report))
    s = report["summary"]
    return 0 if s["headline_zero_compiles"] and all(s["bitwise_equal_to_cold"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark `sglx weights convert` against `cp` and a transformers load + save of the same model.

    .venv/bin/python bench/weights/bench_weights.py [--size-gb 2] [--repeat 3] [--json]

A random Llama checkpoint of at least --size-gb (float32, 1 GB shards) is generated in a
scratch folder (removed at the end, whatever happens). Then, each as a fresh process timed
wall-clock with its peak RSS read from wait4():

- `cp -r SRC OUT` (the floor: the same bytes copied by the kernel),
- `sglx weights convert SRC OUT --arch ARCH` (same dtype for the default cpu arch: float32),
- transformers `from_pretrained` + `save_pretrained` of the same model (the usual way to
  re-save a checkpoint).

cp and sglx alternate --repeat times and their medians are compared; the output is removed and
`sync` runs between runs so each starts with no dirty pages. One untimed copy first warms the
page cache and the VM's memory. Targets (issue 5): conversion at least 0.5x the speed of cp, at
least 3x faster than transformers, peak RSS under 3x the largest tensor + 300 MiB.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sglx_core.report import Table

MIB = 2**20
TRANSFORMERS_ROUND_TRIP = """
import sys, torch
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], dtype=torch.float32)
model.save_pretrained(sys.argv[2])
"""


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_rss_bytes: int


# wait4() of a direct child would report the bench's own peak RSS: Linux carries a process's
# high-water mark across fork and exec. A small launcher forks the measured command instead and
# reports its rusage, so the number is the command's own (plus the launcher's ~10 MB).
LAUNCHER = """
import os, subprocess, sys
proc = subprocess.Popen(sys.argv[2:])
_, status, usage = os.wait4(proc.pid, 0)
with open(sys.argv[1], "w") as out:
    out.write(f"{os.waitstatus_to_exitcode(status)} {usage.ru_maxrss * 1024}")
"""


def measure(argv: list[str]) -> Run:
    """Run `argv` to completion: its wall time and its own peak RSS."""
    with tempfile.NamedTemporaryFile("r") as report, tempfile.TemporaryFile() as log:
        started = time.monotonic()
        subprocess.run(
            [sys.executable, "-I", "-c", LAUNCHER, report.name, *argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
        seconds = time.monotonic() - started
        code, peak = (int(v) for v in report.read().split())
        if code != 0:
            log.seek(0)
            tail = log.read()[-3000:].decode(errors="replace")
            raise SystemExit(f"{' '.join(argv)} failed ({code}):\n{tail}")
    return Run(seconds, peak)


def generate(dst: Path, size_gb: float) -> dict[str, Any]:
    """A random float32 Llama of at least `size_gb` GB, in 1 GB shards."""
    from sglx.demo_model import ModelShape

    hidden, intermediate, heads, kv_heads, vocab = 2048, 5632, 16, 4, 32000
    kv = hidden // heads * kv_heads
    per_layer = 2 * hidden * hidden + 2 * hidden * kv + 3 * hidden * intermediate + 2 * hidden
    fixed = 2 * vocab * hidden + hidden
    layers = max(1, math.ceil((size_gb * 1e9 / 4 - fixed) / per_layer))
    shape = ModelShape(
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=2048,
        vocab_size=vocab,
    )
    # In a child process: torch and the model would otherwise stay in this process's memory.
    code = (
        "import sys; from pathlib import Path; from sglx.demo_model import ModelShape, "
        "make_demo_model; make_demo_model(Path(sys.argv[1]), family='llama', dtype='float32', "
        f"shape=ModelShape(**{asdict(shape)!r}), max_shard_size='1GB')"
    )
    subprocess.run([sys.executable, "-c", code, str(dst)], check=True, capture_output=True)
    return asdict(shape)


def checkpoint_facts(path: Path) -> tuple[int, int, int]:
    """(bytes of all files, bytes of the weights, bytes of the largest tensor)."""
    from sglx.weights.checkpoint import read_checkpoint

    checkpoint = read_checkpoint(path)
    total = sum(p.stat().st_size for p in path.iterdir())
    return total, checkpoint.weight_bytes, max(t.nbytes for t in checkpoint.tensors)


def clean(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    os.sync()


def bench(
    size_gb: float, repeat: int, arch: str, extra_arch: str | None, work: Path, log: Any
) -> dict[str, Any]:
    src, out = work / "src", work / "out"
    log(f"generating a {size_gb:g} GB float32 checkpoint in {src}")
    shape = generate(src, size_gb)
    total, weights, largest = checkpoint_facts(src)
    os.sync()
    log("warm-up copy (untimed)")
    measure(["cp", "-r", str(src), str(out)])
    clean(out)
    convert = [sys.executable, "-m", "sglx.cli", "weights", "convert", str(src), str(out)]
    convert += ["--arch", arch, "-q"]
    cp_runs: list[Run] = []
    sglx_runs: list[Run] = []
    for i in range(repeat):
        log(f"run {i + 1}/{repeat}: cp")
        cp_runs.append(measure(["cp", "-r", str(src), str(out)]))
        clean(out)
        log(f"run {i + 1}/{repeat}: sglx weights convert")
        sglx_runs.append(measure(convert))
        clean(out)
    extra: dict[str, Any] | None = None
    if extra_arch:
        log(f"sglx weights convert --arch {extra_arch} (a converting run, for information)")
        run = measure([*convert[:-3], "--arch", extra_arch, "-q"])
        clean(out)
        extra = {"arch": extra_arch, "seconds": run.seconds, "peak_rss_bytes": run.peak_rss_bytes}
    log("transformers load + save_pretrained")
    tf = measure([sys.executable, "-c", TRANSFORMERS_ROUND_TRIP, str(src), str(out)])
    clean(out)
    cp_s = statistics.median(r.seconds for r in cp_runs)
    sglx_s = statistics.median(r.seconds for r in sglx_runs)
    peak = max(r.peak_rss_bytes for r in sglx_runs)
    rss_limit = 3 * largest + 300 * MIB
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "kernel": platform.release(),
            "load_average_at_end": os.getloadavg(),
        },
        "converting_run": extra,
        "arch": arch,
        "model": {
            "shape": shape,
            "bytes": total,
            "weight_bytes": weights,
            "largest_tensor": largest,
        },
        "repeat": repeat,
        "cp": {"seconds": [r.seconds for r in cp_runs], "median_s": cp_s},
        "sglx": {
            "seconds": [r.seconds for r in sglx_runs],
            "median_s": sglx_s,
            "throughput_bytes_per_s": total / sglx_s,
            "peak_rss_bytes": peak,
        },
        "transformers": {"seconds": tf.seconds, "peak_rss_bytes": tf.peak_rss_bytes},
        "ratios": {
            "speed_vs_cp": cp_s / sglx_s,
            "speedup_vs_transformers": tf.seconds / sglx_s,
            "peak_rss_vs_largest_tensor": peak / largest,
        },
        "targets": {
            "speed_vs_cp_at_least_0.5": cp_s / sglx_s >= 0.5,
            "speedup_vs_transformers_at_least_3": tf.seconds / sglx_s >= 3,
            "peak_rss_under_3x_largest_plus_300MiB": peak < rss_limit,
            "peak_rss_limit_bytes": rss_limit,
        },
    }


def render(result: dict[str, Any]) -> str:
    gb = result["model"]["bytes"] / 1e9
    sglx, cp, tf = result["sglx"], result["cp"], result["transformers"]
    ratios, targets = result["ratios"], result["targets"]

    def yes(flag: bool) -> str:
        return "yes" if flag else "NO"

    rows: list[tuple[str, str, str, str]] = [
        ("bytes", f"{result['model']['bytes']:,}", "", ""),
        (
            "largest tensor",
            f"{result['model']['largest_tensor'] / MIB:.0f} MiB",
            "",
            "",
        ),
        (
            "sglx convert",
            f"{sglx['median_s']:.2f} s ({gb / sglx['median_s']:.2f} GB/s)",
            "",
            "",
        ),
        (
            "cp -r",
            f"{cp['median_s']:.2f} s ({gb / cp['median_s']:.2f} GB/s)",
            f"sglx speed = {ratios['speed_vs_cp']:.2f}x cp",
            f">= 0.5x: {yes(targets['speed_vs_cp_at_least_0.5'])}",
        ),
        (
            "transformers load+save",
            f"{tf['seconds']:.2f} s",
            f"sglx {ratios['speedup_vs_transformers']:.1f}x faster",
            f">= 3x: {yes(targets['speedup_vs_transformers_at_least_3'])}",
        ),
        (
            "sglx peak RSS",
            f"{sglx['peak_rss_bytes'] / MIB:.0f} MiB",
            f"{ratios['peak_rss_vs_largest_tensor']:.2f}x largest tensor",
            f"< {targets['peak_rss_limit_bytes'] / MIB:.0f} MiB: "
            f"{yes(targets['peak_rss_under_3x_largest_plus_300MiB'])}",
        ),
        ("transformers peak RSS", f"{tf['peak_rss_bytes'] / MIB:.0f} MiB", "", ""),
    ]
    if result["converting_run"]:
        run = result["converting_run"]
        rows.append(
            (
                f"sglx convert --arch {run['arch']}",
                f"{run['seconds']:.2f} s ({gb / run['seconds']:.2f} GB/s)",
                f"peak RSS {run['peak_rss_bytes'] / MIB:.0f} MiB",
                "(information)",
            )
        )
    title = (
        f"sglx weights convert --arch {result['arch']}: {gb:.2f} GB float32 checkpoint, "
        f"median of {result['repeat']} runs, {result['machine']['cpus']} CPUs, load average "
        f"{result['machine']['load_average_at_end'][0]:.1f}"
    )
    return Table(("measure", "value", "ratio", "target"), tuple(rows), title=title).render()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size-gb", type=float, default=2.0, help="checkpoint size (default 2)")
    parser.add_argument("--repeat", type=int, default=3, help="cp/sglx runs (median; default 3)")
    parser.add_argument("--arch", default="cpu", help="arch to convert for (default cpu)")
    parser.add_argument(
        "--extra-arch",
        default="gfx942",
        help="also time one converting run for this arch ('' to skip; default gfx942)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--save", type=Path, help="also write the JSON results to this file")
    parser.add_argument("--workdir", type=Path, help="where the scratch folder goes (TMPDIR)")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        sys.stderr.write(f"bench-weights: {message}\n")
        sys.stderr.flush()

    work = Path(tempfile.mkdtemp(prefix="sglx-bench-weights-", dir=args.workdir))
    try:
        result = bench(args.size_gb, args.repeat, args.arch, args.extra_arch or None, work, log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text(text + "\n")
    print(text if args.json else render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())

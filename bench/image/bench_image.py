"""Benchmark `sglx image build` and the image it makes, with ratios against their baselines.

    .venv/bin/python bench/image/bench_image.py [--arch cpu] [--json] [--out FILE]

Measures, on the same machine and engine:
- cold build: wheels and weights re-imported, every layer rebuilt (`--no-cache`);
- plugin-only rebuild: one line appended to a plugin file, normal build (ratio to cold; target
  <= 5%);
- image size against base + payload, where payload is the unpacked size of the locked wheels and
  of sglx's own wheels plus the weights (overhead target <= 5%);
- container start to first completion (docker run until /v1/completions answers).

    .venv/bin/python bench/image/bench_image.py --start-only [--image REF] [--runs N]

measures only the start, against the same image started bare (`--entrypoint python -m
sglang.launch_server` with the same model and flags, so the platform plugin still applies its
defaults), alternating the two, N runs each (default 3); the ratio is entrypoint / bare of the
medians (target <= 1.2: preflight must not cost the start its imports twice).

    .venv/bin/python bench/image/bench_idle.py ...

is a separate script: the CPU an idle server burns, with the profile's `sleep_on_idle` and
without it.

It needs the arch's base in the engine and a complete wheelhouse (`make image` provides both).
The images it builds carry a unique tag and are removed at the end; the timing of each step is
its wall time (the machine's other load shows up in it, so run it on a quiet machine).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
import zipfile
from pathlib import Path
from typing import Any

from sglx_core.gate.bench import BenchResult, BenchSettings, bench_serving_argv, read_result

REPO = Path(__file__).resolve().parents[2]
PLUGIN_FILE = REPO / "plugin" / "sglx_platform" / "failures.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="cpu")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON results to this file")
    parser.add_argument("--start-only", action="store_true", help="entrypoint vs bare start")
    parser.add_argument("--image", default=None, help="image for --start-only (sglx/ARCH:latest)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each for --start-only")
    args = parser.parse_args()
    if args.start_only:
        return _start_bench(args)

    from sglx.engine import docker_client
    from sglx.image.build import build_image
    from sglx.progress import Progress
    from sglx.wheels.steps import default_wheelhouse, load_lock
    from sglx_core.profile import load_profile

    profile = load_profile(args.arch)
    client = docker_client()
    run = uuid.uuid4().hex[:8]
    quiet = Progress("bench", quiet=True)
    tags = [f"sglx-bench/{args.arch}-cold:{run}", f"sglx-bench/{args.arch}-rebuilt:{run}"]
    results: dict[str, Any] = {
        "arch": args.arch,
        "host": platform.node(),
        "cpus": _cpus(),
        "engine": client.version()["Version"],
    }
    payloads: list[str] = []
    before = {image.id for image in client.images.list(all=True)}
    try:
        started = time.perf_counter()
        cold = build_image(
            profile, base=None, model=None, tag=tags[0], wheels=None, progress=quiet, no_cache=True
        )
        results["cold_build_s"] = time.perf_counter() - started
        payloads += cold.data["payload_images_imported"]

        original = PLUGIN_FILE.read_text()
        try:
            PLUGIN_FILE.write_text(original + f"\n# bench {run}\n")
            started = time.perf_counter()
            build_image(profile, base=None, model=None, tag=tags[1], wheels=None, progress=quiet)
            results["plugin_rebuild_s"] = time.perf_counter() - started
        finally:
            PLUGIN_FILE.write_text(original)
        results["rebuild_ratio"] = results["plugin_rebuild_s"] / results["cold_build_s"]

        image = client.images.get(tags[0])
        base = client.images.get(profile.base.ref)
        lock = load_lock(profile)
        wheels = default_wheelhouse(args.arch)
        payload = sum(_unpacked(wheels / w.filename) for w in lock.wheels)
        payload += _weights_bytes(client, tags[0])
        results.update(
            image_bytes=image.attrs["Size"],
            base_bytes=base.attrs["Size"],
            payload_bytes=payload,
        )
        results["size_overhead"] = (image.attrs["Size"] - base.attrs["Size"]) / payload - 1

        results["start_to_first_completion_s"] = _start_to_completion(client, tags[0])
    finally:
        leftovers = [
            i.id for i in client.images.list(filters={"dangling": True}) if i.id not in before
        ]  # the builds' intermediate stages
        for ref in [*tags, *payloads, *leftovers]:  # best effort: never mask the result
            with contextlib.suppress(Exception):
                client.images.remove(ref, force=True)
    results["targets"] = {
        "rebuild_at_most_5pct_of_cold": results["rebuild_ratio"] <= 0.05,
        "size_overhead_at_most_5pct": results["size_overhead"] <= 0.05,
    }
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_table(results)
    return 0


def _cpus() -> int:
    import os

    return os.cpu_count() or 0


def _unpacked(wheel: Path) -> int:
    with zipfile.ZipFile(wheel) as archive:
        return sum(info.file_size for info in archive.infolist())


def _weights_bytes(client: Any, tag: str) -> int:
    out = client.containers.run(
        tag,
        ["-c", "du -sb /models | cut -f1"],
        entrypoint="/bin/sh",
        remove=True,
        network_mode="none",
    )
    return int(out.decode().split()[0])


def _start_bench(args: argparse.Namespace) -> int:
    from statistics import median

    from sglx.engine import docker_client

    client = docker_client()
    tag = args.image or f"sglx/{args.arch}:latest"
    name = client.images.get(tag).labels.get("io.sglx.model.name", "demo")
    runs: dict[str, list[float]] = {"entrypoint": [], "bare": []}
    for index in range(args.runs):
        for kind in runs:
            seconds = _start_to_completion(client, tag, bare=kind == "bare", model=name)
            runs[kind].append(seconds)
            print(f"  run {index + 1} {kind:<10} {seconds:6.1f} s", file=sys.stderr, flush=True)
    medians = {kind: median(values) for kind, values in runs.items()}
    results = {
        "image": tag,
        "cpus": _cpus(),
        "engine": client.version()["Version"],
        "runs_s": runs,
        "median_s": medians,
        "ratio": medians["entrypoint"] / medians["bare"],
        "target_ratio": 1.2,
    }
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"sglx start bench: {tag}, {results['cpus']} cpus, engine {results['engine']}")
    print("  start             runs (s)                     median")
    for kind, values in runs.items():
        listed = ", ".join(f"{v:.1f}" for v in values)
        print(f"  {kind:<16}  {listed:<27}  {medians[kind]:.1f} s")
    print(f"  ratio entrypoint/bare: {results['ratio']:.2f} (target <= 1.2)")
    return 0


def _start_to_completion(client: Any, tag: str, bare: bool = False, model: str = "demo") -> float:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    body = json.dumps(
        {"model": model, "prompt": "Hello", "max_tokens": 4, "temperature": 0}
    ).encode()
    flags = ["--port", str(port)]
    kwargs: dict[str, Any] = {}
    if bare:
        flags = ["-m", "sglang.launch_server", "--model-path", "/models/model"]
        flags += ["--host", "0.0.0.0", "--served-model-name", model, "--port", str(port)]
        kwargs["entrypoint"] = "python"
    started = time.perf_counter()
    container = client.containers.run(tag, flags, detach=True, network_mode="host", **kwargs)
    try:
        wait_first_completion(port, body, started)
        return time.perf_counter() - started
    finally:
        container.remove(force=True)


def record(
    results: dict[str, Any], load_before: tuple[float, float, float], out: Path | None,
    as_json: bool,
) -> bool:  # fmt: skip
    """`results` with the machine's load average before and after and its cores, written to
    `out` and, with `as_json`, printed: True when printed (the caller's table is left out).
    bench_contention.py and bench_metrics.py use it too."""
    results.update(
        load_average_before=load_before, load_average_after=os.getloadavg(), cores=os.cpu_count()
    )
    if out:
        out.write_text(json.dumps(results, indent=2) + "\n")
    if as_json:
        print(json.dumps(results, indent=2))
    return as_json


def served_rate(
    settings: BenchSettings, port: int, tokenizer: Path, out: Path, timeout_s: float = 3600
) -> BenchResult:
    """sglang's own bench_serving run with the serving gate's workload `settings` at
    127.0.0.1:`port`, its result file `out` read back: bench_contention.py and bench_metrics.py
    measure the same way."""
    argv = bench_serving_argv(
        settings, host="127.0.0.1", port=port, tokenizer_path=str(tokenizer),
        output_file=str(out), python=sys.executable,
    )  # fmt: skip
    subprocess.run(argv, check=True, capture_output=True, timeout=timeout_s)
    return read_result(out, settings=settings)


def wait_first_completion(port: int, body: bytes, started: float, limit_s: float = 900) -> None:
    """Poll /v1/completions on 127.0.0.1:port until it answers 200 (bench_idle.py uses it too)."""
    while time.perf_counter() - started < limit_s:
        try:
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/completions",
                data=body,
                headers={"content-type": "application/json"},
            )
            with urllib.request.urlopen(request, timeout=10) as reply:
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise TimeoutError(f"no completion within {limit_s:.0f} s")


def _print_table(r: dict[str, Any]) -> None:
    rows = [
        ("cold build (no cache)", f"{r['cold_build_s']:.1f} s", "1.00 (baseline)"),
        (
            "plugin-only rebuild",
            f"{r['plugin_rebuild_s']:.1f} s",
            f"{r['rebuild_ratio']:.3f} of cold (target <= 0.05)",
        ),
        ("image size", f"{r['image_bytes'] / 1e9:.2f} GB", ""),
        (
            "base + payload",
            f"{(r['base_bytes'] + r['payload_bytes']) / 1e9:.2f} GB",
            f"overhead {r['size_overhead']:+.1%} (target <= 5%)",
        ),
        ("start to first completion", f"{r['start_to_first_completion_s']:.1f} s", ""),
    ]
    print(f"sglx image bench: arch {r['arch']}, {r['cpus']} cpus, engine {r['engine']}")
    width = max(len(a) for a, _, _ in rows)
    for name, value, ratio in rows:
        print(f"  {name:<{width}}  {value:>10}  {ratio}")


if __name__ == "__main__":
    sys.exit(main())

"""Served throughput of the cpu image beside another busy process: the profile's
`OMP_WAIT_POLICY=PASSIVE` against libgomp's default spinning (the baseline), on a quiet machine
and with a busy loop taking one core.

    .venv/bin/python bench/image/bench_contention.py [--image sglx/cpu:latest] [--rounds 2]
        [--requests 64] [--json] [--out FILE]

Each run starts the image (`docker run`, host network) and waits for its first completion;
then, for the busy case, a busy loop starts on the host (`python3 -c 'while True: pass'`,
nice 0: another job on the machine), and sglang's own bench_serving runs the serving gate's
workload shape at the server (sglx_core.gate.bench: random token ids, 8 in flight, 128 prompt
and 64 output tokens) with `--requests` requests. The output tokens per second it reports are
kept; the loop stops with the benchmark. The baseline is the same image with OMP_WAIT_POLICY
taken out of the server's environment (`env -u` in front of the entrypoint). Preflight is off
in both (`SGLX_PREFLIGHT=off`): it would report the baseline's environment as not the profile's.

The settings alternate within a round, and the busy case follows the quiet one on the same
server. Ratios: profile / baseline for each load, and busy / quiet for each setting. Run it on
an otherwise quiet machine: the JSON records the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# this folder is on sys.path as a script
from bench_image import record, served_rate, wait_first_completion

from sglx.demo_model import make_demo_model
from sglx_core.gate.bench import BenchSettings

ENTRYPOINT = "/opt/sglx/venv/bin/sglx-serve"
SETTINGS = {
    "profile": [ENTRYPOINT],  # the image's environment: OMP_WAIT_POLICY=PASSIVE
    "baseline": ["env", "-u", "OMP_WAIT_POLICY", ENTRYPOINT],  # libgomp's default
}
LOADS = ("quiet", "busy")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="sglx/cpu:latest")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON results to this file")
    args = parser.parse_args()

    from sglx.engine import docker_client

    client = docker_client()
    baked = client.images.get(args.image).attrs["Config"]["Env"]
    if "OMP_WAIT_POLICY=PASSIVE" not in baked:
        print(f"bench_contention: {args.image} has no OMP_WAIT_POLICY=PASSIVE", file=sys.stderr)
        return 2
    workload = BenchSettings(concurrency=8, num_prompts=args.requests, input_len=128,
                             output_len=64)  # fmt: skip
    runs: dict[str, dict[str, list[float]]] = {s: {load: [] for load in LOADS} for s in SETTINGS}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as name:
        work = Path(name)
        tokenizer = make_demo_model(work / "demo")  # the image's demo model's tokenizer
        for round_ in range(args.rounds):
            order = list(SETTINGS) if round_ % 2 == 0 else list(reversed(SETTINGS))
            for setting in order:
                measured = serve(client, args.image, SETTINGS[setting], work, tokenizer, workload)
                for load, tok_s in measured.items():
                    runs[setting][load].append(tok_s)
                    print(f"  round {round_ + 1} {setting:<8} {load:<5} {tok_s:8.1f} output "
                          "tok/s", file=sys.stderr, flush=True)  # fmt: skip
    medians = {s: {load: statistics.median(runs[s][load]) for load in LOADS} for s in SETTINGS}
    results = {
        "image": args.image,
        "settings": workload.to_json(),
        "runs": runs,
        "median_output_tok_s": medians,
        "ratio_profile_over_baseline": {
            load: medians["profile"][load] / medians["baseline"][load] for load in LOADS
        },
        "ratio_busy_over_quiet": {s: medians[s]["busy"] / medians[s]["quiet"] for s in SETTINGS},
    }
    if record(results, load_before, args.out, args.json):
        return 0
    print("| server | quiet: output tok/s | one core busy | busy / quiet |\n|---|---|---|---|")
    for setting in SETTINGS:
        m = medians[setting]
        print(f"| {setting} | {m['quiet']:.1f} | {m['busy']:.1f} | "
              f"{results['ratio_busy_over_quiet'][setting]:.3f} |")  # fmt: skip
    ratios = results["ratio_profile_over_baseline"]
    print(f"\nprofile / baseline: quiet {ratios['quiet']:.3f}, one core busy {ratios['busy']:.2f}")
    return 0


def serve(
    client: Any, image: str, entrypoint: list[str], work: Path, tokenizer: Path,
    workload: BenchSettings,
) -> dict[str, float]:  # fmt: skip
    """One server started; its output tok/s on a quiet machine, then beside a busy loop."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    container = client.containers.run(
        image, ["--port", str(port)], entrypoint=entrypoint, detach=True, network_mode="host",
        environment={"SGLX_PREFLIGHT": "off"},
    )  # fmt: skip
    try:
        body = json.dumps({"model": "demo", "prompt": "Hello", "max_tokens": 4}).encode()
        wait_first_completion(port, body, time.perf_counter())
        measured = {}
        for load in LOADS:
            loop = None
            if load == "busy":
                loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            try:
                measured[load] = _bench(port, work, tokenizer, workload)
            finally:
                if loop is not None:
                    loop.kill()
                    loop.wait()
        return measured
    finally:
        container.remove(force=True)


def _bench(port: int, work: Path, tokenizer: Path, workload: BenchSettings) -> float:
    out = work / f"bench-{port}-{time.monotonic_ns()}.jsonl"
    return float(served_rate(workload, port, tokenizer, out).output_tok_s)


if __name__ == "__main__":
    sys.exit(main())

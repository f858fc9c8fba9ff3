"""Served throughput with metrics on (the default) against metrics off (the baseline), as a
ratio: what `--enable-metrics` and sglx's series cost (issue 41's bar: at or above 0.98).

    .venv/bin/python bench/image/bench_metrics.py [--rounds 4] [--json] [--out FILE]

Each round starts the server twice, in turn, the way the image does: `sglx-serve` from this
checkout's venv with the cpu profile (resolved, its JIT cache folder a private temporary one)
and the demo model, on a free port, once as is and once with `SGLX_METRICS=0` in its
environment (what `sglang_service_metrics: false` writes). Once /health answers and a warm-up
completion came back, sglang's own bench_serving runs the serving gate's workload at it
(sglx_core.gate.bench: random token ids, 8 in flight, 128 prompt and 64 output tokens) with 256
requests, and the output tokens per second it reports are kept: the gate's own 32 requests
last about two seconds a run on the demo model, too short to tell a few percent from the
machine's drift (the first results, taken with them, said 0.81). The ratio is the median with
metrics over the median without; alternating the two within a round spreads the machine's
drift over both, and an even number of rounds (the default, 4) puts each first as often. Each
round's own ratio is kept too. The JSON records the load average before and after: run it
on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from bench_image import record, served_rate  # this folder is on sys.path when run as a script

from sglx.demo_model import make_demo_model
from sglx_core.gate.bench import BenchSettings
from sglx_core.profile import load_profile

BIN = Path(sys.executable).parent
SETTINGS = BenchSettings(concurrency=8, num_prompts=256, input_len=128, output_len=64)
KINDS: tuple[tuple[str, dict[str, str]], ...] = (
    ("metrics on", {}),
    ("metrics off", {"SGLX_METRICS": "0"}),
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, body: dict[str, Any] | None = None, timeout: float = 5) -> bytes:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"content-type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return bytes(response.read())


def serve_once(work: Path, model: Path, extra: dict[str, str]) -> dict[str, Any]:
    """One server started, benchmarked and stopped: its output tok/s and whether it served
    /metrics."""
    port = free_port()
    profile = load_profile("cpu").to_json()
    cache = Path(tempfile.mkdtemp(dir=work))
    cache.chmod(0o700)
    profile["container"]["jit_cache"]["target"] = str(cache)
    baked = work / f"arch-{port}.yaml"
    baked.write_text(yaml.safe_dump(profile, sort_keys=False))
    env = {
        **os.environ,
        **load_profile("cpu").env,
        "SGLX_PROFILE": str(baked),
        "SGLX_MODEL": str(model),
        "TMPDIR": str(work),
        "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        **extra,
    }
    server = subprocess.Popen(
        [str(BIN / "sglx-serve"), "--port", str(port), "--served-model-name", "demo"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                _get(base + "/health")  # 200 with an empty body; an error status raises
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"bench_metrics: no server answered on {port}") from None
                time.sleep(1)
        warm = {"model": "demo", "prompt": "Hello", "max_tokens": 4, "temperature": 0}
        _get(base + "/v1/completions", warm, timeout=120)
        out = work / f"bench-{port}.jsonl"
        result = served_rate(SETTINGS, port, model, out, timeout_s=1200)
        try:
            has_metrics = b"sglx_info" in _get(base + "/metrics", timeout=30)
        except OSError:
            has_metrics = False
        return {"output_tok_s": result.output_tok_s, "metrics_served": has_metrics}
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON results to this file")
    args = parser.parse_args()
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind, _ in KINDS}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as name:
        work = Path(name)
        model = make_demo_model(work / "demo")
        for round_ in range(args.rounds):
            for kind, extra in KINDS if round_ % 2 == 0 else tuple(reversed(KINDS)):
                run = serve_once(work, model, extra)
                runs[kind].append(run)
                line = f"  round {round_ + 1} {kind:<11} {run['output_tok_s']:8.1f} output tok/s"
                print(f"{line} (metrics served: {run['metrics_served']})", file=sys.stderr)
    medians = {kind: statistics.median(r["output_tok_s"] for r in runs[kind]) for kind in runs}
    results = {
        "settings": SETTINGS.to_json(),
        "runs": runs,
        "median_output_tok_s": medians,
        "ratio_on_over_off": medians["metrics on"] / medians["metrics off"],
        "ratio_per_round": [
            round(on["output_tok_s"] / off["output_tok_s"], 3)
            for on, off in zip(runs["metrics on"], runs["metrics off"], strict=True)
        ],
    }
    if not record(results, load_before, args.out, args.json):
        print("| server | median output tok/s | runs |\n|---|---|---|")
        for kind in runs:
            figures = ", ".join(f"{r['output_tok_s']:.1f}" for r in runs[kind])
            print(f"| {kind} | {medians[kind]:.1f} | {figures} |")
        print(f"\nratio, metrics on / off: {results['ratio_on_over_off']:.3f} (per round: "
              f"{', '.join(map(str, results['ratio_per_round']))})")  # fmt: skip
    served = [r["metrics_served"] for r in runs["metrics on"]]
    off = [r["metrics_served"] for r in runs["metrics off"]]
    return 0 if all(served) and not any(off) else 1


if __name__ == "__main__":
    sys.exit(main())

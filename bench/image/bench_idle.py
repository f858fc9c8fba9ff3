"""CPU an idle server burns, with the profile's `sleep_on_idle` and without it (the baseline).

    .venv/bin/python bench/image/bench_idle.py [--image sglx/cpu:latest] [--seconds 20] [--json]
        [--out FILE]

Each run starts the image (`docker run`, host network), waits for its first completion, lets it
settle for 5 s and then reads the container's CPU time (cgroup, every process in it) over
`--seconds` of idling. The baseline is the same image with its profile's `sleep_on_idle` line
removed (a copy of /etc/sglx/arch.yaml mounted over it), which is sglang's own default: the
scheduler then polls its sockets in a busy loop. The ratio is baseline / profile.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench_image import wait_first_completion  # this folder is on sys.path when run as a script

PROFILE = "/etc/sglx/arch.yaml"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="sglx/cpu:latest")
    parser.add_argument("--seconds", type=float, default=20.0, help="idle time measured")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON results to this file")
    args = parser.parse_args()

    from sglx.engine import docker_client

    client = docker_client()
    profile = client.containers.run(args.image, ["-c", f"cat {PROFILE}"], entrypoint="sh",
                                    remove=True).decode()  # fmt: skip
    if "sleep_on_idle: true" not in profile:
        print(f"bench_idle: {args.image}'s profile sets no sleep_on_idle", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as work:
        baseline_profile = Path(work) / "arch.yaml"
        kept = [line for line in profile.splitlines(keepends=True) if "sleep_on_idle:" not in line]
        baseline_profile.write_text("".join(kept))
        baseline_profile.chmod(0o644)
        Path(work).chmod(0o755)
        results: dict[str, Any] = {"image": args.image, "idle_s": args.seconds}
        for kind, volumes in (
            ("profile", {}),
            ("baseline", {str(baseline_profile): {"bind": PROFILE, "mode": "ro"}}),
        ):
            results[kind] = idle_cpu(client, args.image, volumes, args.seconds)
            print(f"  {kind:<9} {results[kind]['cpu_s']:6.2f} CPU s over {args.seconds:.0f} s "
                  f"idle", file=sys.stderr, flush=True)  # fmt: skip
    results["ratio"] = results["baseline"]["cpu_s"] / max(results["profile"]["cpu_s"], 1e-3)
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print(f"sglx idle bench: {args.image}, {args.seconds:.0f} s idle after the first completion")
    for kind in ("profile", "baseline"):
        r = results[kind]
        print(f"  {kind:<9} sleep_on_idle={r['sleep_on_idle']!s:<5}  {r['cpu_s']:6.2f} CPU s "
              f"({r['cores']:.2f} cores)")  # fmt: skip
    print(f"  ratio baseline/profile: {results['ratio']:.1f}x")
    return 0


def idle_cpu(client: Any, image: str, volumes: dict, seconds: float) -> dict[str, Any]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    container = client.containers.run(image, ["--port", str(port)], detach=True,
                                      network_mode="host", volumes=volumes)  # fmt: skip
    try:
        base = f"http://127.0.0.1:{port}"
        body = json.dumps({"model": "demo", "prompt": "Hello", "max_tokens": 4}).encode()
        wait_first_completion(port, body, time.perf_counter())
        time.sleep(5)
        before = _cpu_ns(container)
        time.sleep(seconds)
        used = (_cpu_ns(container) - before) / 1e9
        with urllib.request.urlopen(f"{base}/get_server_info", timeout=10) as reply:
            sleeping = bool(json.load(reply).get("sleep_on_idle"))
        return {"cpu_s": used, "cores": used / seconds, "sleep_on_idle": sleeping}
    finally:
        container.remove(force=True)


def _cpu_ns(container: Any) -> int:
    return int(container.stats(stream=False)["cpu_stats"]["cpu_usage"]["total_usage"])


if __name__ == "__main__":
    sys.exit(main())

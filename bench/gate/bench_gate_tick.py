"""The cost of one run of the gate timer's cheap checks (issue 41), against a health probe alone
(the baseline): CPU seconds of the checking process and of the server answering it, per run,
and what that is as a share of one core at the timer's default period.

    .venv/bin/python bench/gate/bench_gate_tick.py [--runs 5] [--json] [--out FILE]

One server of the demo model on CPU (`python -m sglang.launch_server` with the cpu profile
baked, bench/gate/calibrate_golden.py's Server) and its golden file, made the way the image
build makes it (transformers on CPU in float32). Then, alternated, `--runs` times each:

a. the baseline: a health probe, `python -c` opening GET /health once (what any liveness check
   pays: a Python start and one request);
b. the timer's run: `python -m sglx_runtime.gate_tick --url URL --golden FILE` (health and the
   golden-numerics replay, and the series rendered), what `docker exec` starts in the server's
   container on each tick (the exec itself, a few tens of milliseconds of dockerd, is not
   counted here).

For each: wall seconds; the checking process's CPU seconds (its rusage, children included);
the server's CPU seconds over the same span (user + system time of every process of its session
from /proc, the idle rate measured before the runs subtracted). GPU seconds: none on the cpu
arch; on a GPU host the replay is prefill-only requests, one per golden prompt (6 on the demo
model), so its device time is that of scoring six short prompts. Exit 0 when every timer run
passed its checks, 1 when one failed, 2 when the bench could not run.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from calibrate_golden import Server, bake_cpu_profile

PERIOD_S = 900  # sglang_service_gate_timer_minutes' default, 15
IDLE_WINDOW_S = 10.0
TICKS = os.sysconf("SC_CLK_TCK")


def session_cpu_s(session: int) -> float:
    """User + system seconds of every live process of `session` (the server's group)."""
    total = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone since the listing
        if int(fields[3]) == session:  # field 6 of stat: the session id
            total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / TICKS


def children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(argv: list[str], env: dict[str, str], session: int, idle_rate: float) -> dict[str, Any]:
    server_before, own_before = session_cpu_s(session), children_cpu_s()
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
    wall = time.monotonic() - started
    own = children_cpu_s() - own_before
    server = max(0.0, session_cpu_s(session) - server_before - idle_rate * wall)
    return {
        "wall_s": round(wall, 3),
        "process_cpu_s": round(own, 3),
        "server_cpu_s": round(server, 3),
        "total_cpu_s": round(own + server, 3),
        "exit": done.returncode,
        "said": (done.stderr or "")[-500:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON results to this file")
    args = parser.parse_args()

    from sglx.demo_model import make_demo_model
    from sglx.gate.golden_build import build_golden_file

    load_before = os.getloadavg()
    runs: dict[str, list[dict[str, Any]]] = {"health probe": [], "timer run": []}
    with tempfile.TemporaryDirectory(prefix="sglx-bench-tick-") as name:
        work = Path(name)
        model = make_demo_model(work / "demo")
        golden = work / "golden.json"
        build_golden_file(model, golden)
        profile = bake_cpu_profile(work / "arch.yaml")
        env = {**os.environ, "SGLX_PROFILE": str(profile)}
        server = Server(model, profile, (), work / "server.log")
        with server as (base, ready_s):
            print(f"  server ready in {ready_s:.0f} s", file=sys.stderr, flush=True)
            session = server.proc.pid  # started in a session of its own
            before = session_cpu_s(session)
            time.sleep(IDLE_WINDOW_S)
            idle_rate = (session_cpu_s(session) - before) / IDLE_WINDOW_S
            kinds = {
                "health probe": [sys.executable, "-c",
                                 "import sys, urllib.request; "
                                 f"sys.exit(urllib.request.urlopen('{base}/health', "
                                 "timeout=10).status != 200)"],
                "timer run": [sys.executable, "-m", "sglx_runtime.gate_tick", "--url", base,
                              "--golden", str(golden), "--interval", str(PERIOD_S)],
            }  # fmt: skip
            for n in range(args.runs):
                order = list(kinds) if n % 2 == 0 else list(reversed(kinds))
                for kind in order:
                    run = measure(kinds[kind], env, session, idle_rate)
                    runs[kind].append(run)
                    print(f"  run {n + 1} {kind:<12} {run['total_cpu_s']:6.2f} CPU s "
                          f"({run['process_cpu_s']:.2f} checking, {run['server_cpu_s']:.2f} "
                          f"server), {run['wall_s']:.2f} s wall, exit {run['exit']}",
                          file=sys.stderr, flush=True)  # fmt: skip
    medians = {
        kind: {key: statistics.median(r[key] for r in rs)
               for key in ("wall_s", "process_cpu_s", "server_cpu_s", "total_cpu_s")}
        for kind, rs in runs.items()
    }  # fmt: skip
    tick, probe = medians["timer run"], medians["health probe"]
    results = {
        "model": "demo (2 layers), served in float16 on CPU",
        "runs": runs,
        "median": medians,
        "ratio_total_cpu_timer_over_probe": round(tick["total_cpu_s"] / probe["total_cpu_s"], 2),
        "core_share_at_default_period": round(tick["total_cpu_s"] / PERIOD_S, 5),
        "period_s": PERIOD_S,
        "server_idle_cpu_per_s": round(idle_rate, 4),
        "gpu_s": None,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "cores": os.cpu_count(),
    }
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        print("| run | wall s | checking CPU s | server CPU s | total CPU s |")
        print("|---|---|---|---|---|")
        for kind, m in medians.items():
            print(f"| {kind} | {m['wall_s']:.2f} | {m['process_cpu_s']:.2f} | "
                  f"{m['server_cpu_s']:.2f} | {m['total_cpu_s']:.2f} |")  # fmt: skip
        ratio, share = results["ratio_total_cpu_timer_over_probe"], tick["total_cpu_s"] / PERIOD_S
        print(f"\ntimer run / health probe, total CPU: {ratio}x; at one run per {PERIOD_S} s: "
              f"{100 * share:.3f} % of one core")  # fmt: skip
    return 0 if all(r["exit"] == 0 for r in runs["timer run"]) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark the time the serving gate adds to a host's rollout step, against the health check
alone (issue 25; target: at most 60 s per host on the cpu e2e).

    .venv/bin/python bench/gate/bench_gate.py [--image sglx/cpu:latest] [--runs 3]
        [--overlay-source] [--json] [--out FILE]

Each run starts a fresh container of the image the way bench/image/bench_image.py does
(`docker run --network host IMAGE --port P`, the image's own entrypoint, model and profile) and
times, one after the other in that container, what the `sglang_service` role's health gate runs
(ansible/roles/sglang_service/tasks/health.yml):

a. the health check alone, the baseline: container start -> GET /health answers 200 (polled
   each second, as the `sglx_health` module does) -> a one-token completion;
b. the golden replay: `docker exec C python -m sglx_runtime.golden_replay --url ... --json`;
c. the speed gate measuring: `docker exec -i C python -m sglx_runtime.speed_gate ... --peers -`
   with no records on stdin, so sglang's bench_serving runs;
d. the speed gate judging again: the same command given (c)'s record as this host's own
   (`{HOST: RECORD_TEXT}`) and `--started-at` the container's State.StartedAt, so the record
   measured this very server and is judged again without a benchmark.

The gate adds b + c to a restarted server's step and b + d to a kept one's; each is shown as a
ratio to (a), and against the 60 s target. The health check of the already running server is
shown too (what a kept server's step pays before the gate). The speed settings used are read
back from the gate's own report (`data.report.hosts[0].settings`): they are the image's baked
profile's `gate.speed`, or the schema's defaults for an image baked before that section.

`--overlay-source` is a development aid for measuring uncommitted code against an older image:
once the server is healthy (outside every timing), it copies the gate's modules from this
checkout (OVERLAY below) into the container's site-packages as root (the engine's archive
upload, as `docker cp` does). The server process itself keeps the image's code; only the gate's
`docker exec` processes run the copied files. Off by default.

Every part's wall time includes the machine's other load: run it on a quiet machine, or say the
load (the JSON records the load average before and after). Exit codes: 0 every part passed and
the added time is within the target, 1 a gate part failed or the target was missed, 2 the
benchmark could not run (no engine, no image, a server that never became healthy).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from statistics import median
from typing import Any

from sglx_core.errors import SglxError
from sglx_core.untrusted import parse_json

REPO = Path(__file__).resolve().parents[2]

TARGET_S = 60.0
"""Issue 25: the gate may add at most this much to one host's rollout step."""
HOST = "bench-host"
"""The host name the gate reports and its record carries."""
OVERLAY = (
    ("runtime/sglx_runtime/speed_gate.py", "sglx_runtime/speed_gate.py"),
    ("runtime/sglx_runtime/golden_replay.py", "sglx_runtime/golden_replay.py"),
    ("scripts/sglx_core/gate/speed.py", "sglx_core/gate/speed.py"),
    ("scripts/sglx_core/gate/speed_record.py", "sglx_core/gate/speed_record.py"),
    ("scripts/sglx_core/profile/schema.py", "sglx_core/profile/schema.py"),
)
"""--overlay-source: checkout file -> path under the container's site-packages."""
HEALTH_LIMIT_S = 900.0
GATE_LIMIT_S = 900.0
MAX_GATE_OUTPUT = 8 << 20
"""A gate's JSON envelope is a few KiB; more than this is not one."""
PARTS = ("health_s", "replay_s", "speed_measure_s", "speed_judge_s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default="sglx/cpu:latest", help="the image to start")
    parser.add_argument("--runs", type=int, default=3, help="fresh containers, one per run")
    parser.add_argument(
        "--overlay-source",
        action="store_true",
        help="development aid: copy this checkout's gate modules into each container before the "
        "gate runs (measures uncommitted code against an older image)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--out", type=Path, help="also write the JSON results to this file")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    try:
        results = _bench(args.image, args.runs, overlay=args.overlay_source)
    except SglxError as error:
        print(f"bench_gate: {error.message}\n  fix: {error.hint}", file=sys.stderr)
        return 2
    if args.out:
        args.out.write_text(json.dumps(results, indent=2) + "\n")
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_table(results)
    return 0 if results["passed"] else 1


def _bench(tag: str, runs: int, *, overlay: bool) -> dict[str, Any]:
    from sglx.engine import docker_client

    if shutil.which("docker") is None:
        raise SglxError(
            "no `docker` command on PATH (the gate runs through `docker exec`, as health.yml does)",
            hint="install the Docker CLI, or run `make setup`",
            code="environment",
        )
    client = docker_client()
    try:
        image = client.images.get(tag)
    except Exception as exc:  # docker.errors.ImageNotFound, or the engine's own error
        raise SglxError(
            f"no image {tag} in the engine ({exc.__class__.__name__})",
            hint="build it (`make image ARCH=cpu`) or pass --image REF",
            code="environment",
        ) from None
    load_before = os.getloadavg()
    per_run = []
    for index in range(runs):
        run = _one_run(client, tag, image.labels.get("io.sglx.model.name", "demo"), overlay)
        per_run.append(run)
        said = "  ".join(f"{k} {run[k]:.1f}" for k in PARTS)
        print(f"  run {index + 1}: {said}", file=sys.stderr, flush=True)
    medians = {k: median(r[k] for r in per_run) for k in (*PARTS, "health_running_s")}
    restarted = medians["replay_s"] + medians["speed_measure_s"]
    kept = medians["replay_s"] + medians["speed_judge_s"]
    failures = [f"run {i + 1}: {p}" for i, r in enumerate(per_run) for p in r["failed"]]
    return {
        "image": tag,
        "image_id": image.id,
        "host": platform.node(),
        "cpus": os.cpu_count() or 0,
        "engine": client.version()["Version"],
        "overlay_source": overlay,
        "load_avg_before": list(load_before),
        "load_avg_after": list(os.getloadavg()),
        "runs": per_run,
        "median_s": medians,
        "added_restarted_s": restarted,
        "added_kept_s": kept,
        "ratio_restarted": restarted / medians["health_s"],
        "ratio_kept": kept / medians["health_s"],
        "target_s": TARGET_S,
        "within_target": {"restarted": restarted <= TARGET_S, "kept": kept <= TARGET_S},
        "speed_settings": per_run[-1]["speed_settings"],
        "failed": failures,
        "passed": not failures and restarted <= TARGET_S and kept <= TARGET_S,
    }


def _one_run(client: Any, tag: str, model: str, overlay: bool) -> dict[str, Any]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    load = os.getloadavg()[0]
    started = time.perf_counter()
    container = client.containers.run(tag, ["--port", str(port)], detach=True, network_mode="host")
    try:
        up_s = _wait_health(url, started)
        _complete_one_token(url, model)
        health_s = time.perf_counter() - started
        if overlay:
            _overlay_source(container)
        container.reload()
        state = container.attrs
        replay_s, replay = _gate(
            container, ["sglx_runtime.golden_replay", "--url", url, "--host", HOST, "--json"]
        )
        speed = [
            "sglx_runtime.speed_gate",
            "--url",
            url,
            "--host",
            HOST,
            "--image",
            state["Image"],
            "--server-args",
            json.dumps(state["Args"]),
            "--peers",
            "-",
            "--json",
            "--started-at",
            state["State"]["StartedAt"],
        ]
        measure_s, measured = _gate(container, speed, stdin=b"{}")
        record = measured.get("data", {}).get("record")
        judge_s, judged = _gate(
            container, speed, stdin=json.dumps({HOST: json.dumps(record)}).encode()
        )
        running = time.perf_counter()
        _wait_health(url, running)
        _complete_one_token(url, model)
        running_s = time.perf_counter() - running
    finally:
        container.remove(force=True)
    failed = [f"{name}: {_said(doc)}" for name, doc in _parts(replay, measured, judged) if doc]
    if measured.get("data", {}).get("measured") is not True:
        failed.append("speed gate (c) did not measure")
    if judged.get("data", {}).get("measured") is not False:
        failed.append("speed gate (d) measured again instead of judging its own record")
    hosts = measured.get("data", {}).get("report", {}).get("hosts") or [{}]
    return {
        "load_avg_1m_at_start": load,
        "health_up_s": up_s,
        "health_s": health_s,
        "replay_s": replay_s,
        "speed_measure_s": measure_s,
        "speed_judge_s": judge_s,
        "health_running_s": running_s,
        "added_restarted_s": replay_s + measure_s,
        "added_kept_s": replay_s + judge_s,
        "served_dtype": replay.get("data", {}).get("served_dtype"),
        "output_tok_s": (hosts[0].get("numbers") or {}).get("output_tok_s"),
        "speed_settings": hosts[0].get("settings"),
        "failed": failed,
    }


def _parts(
    replay: dict[str, Any], measured: dict[str, Any], judged: dict[str, Any]
) -> list[tuple[str, dict[str, Any] | None]]:
    """Each gate part that did not pass, with its envelope (None where it passed)."""
    named = (("golden replay", replay), ("speed measure", measured), ("speed judge", judged))
    return [(name, None if doc.get("exit_code") == 0 else doc) for name, doc in named]


def _said(doc: dict[str, Any]) -> str:
    messages = [f.get("message", "") for f in [*doc.get("findings", []), *doc.get("errors", [])]]
    return f"exit {doc.get('exit_code')}: " + ("; ".join(messages) or "no message")[:600]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_health(url: str, started: float) -> float:
    """Seconds from `started` until GET /health answers 200, polled each second as
    ansible/roles/sglang_service/library/sglx_health.py does."""
    while time.perf_counter() - started < HEALTH_LIMIT_S:
        try:
            with urllib.request.urlopen(url + "/health", timeout=5) as reply:
                if reply.status == 200:
                    return time.perf_counter() - started
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(1)
    raise SglxError(
        f"{url}/health did not answer 200 within {HEALTH_LIMIT_S:.0f} s",
        hint="start the image by hand (docker run --network host IMAGE) and read its log",
        code="environment",
    )


def _complete_one_token(url: str, model: str) -> None:
    """The health check's one-token completion (sglx_health reads the model from /v1/models;
    the image label names the same served model)."""
    body = json.dumps({"model": model, "prompt": "Hello", "max_tokens": 1, "temperature": 0})
    request = urllib.request.Request(
        url + "/v1/completions", data=body.encode(), headers={"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as reply:
            reply.read(1 << 20)
    except (urllib.error.URLError, OSError) as exc:
        raise SglxError(
            f"{url} is healthy but a one-token completion failed: {exc}",
            hint="read the container's log",
            code="environment",
        ) from None


def _gate(container: Any, argv: Sequence[str], stdin: bytes = b"") -> tuple[float, dict[str, Any]]:
    """Wall seconds and JSON envelope of `docker exec -i C python -m ARGV`, as health.yml runs
    it (the CLI's own start included, as the rollout pays it)."""
    command = ["docker", "exec", "--interactive", container.id, "python", "-m", *argv]
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command, input=stdin, capture_output=True, timeout=GATE_LIMIT_S, check=False
        )
    except subprocess.TimeoutExpired:
        raise SglxError(
            f"{argv[0]} ran longer than {GATE_LIMIT_S:.0f} s",
            hint="run it by hand in the container and read its output",
            code="environment",
        ) from None
    seconds = time.perf_counter() - started
    what = f"{argv[0]}'s output"
    if len(done.stdout) > MAX_GATE_OUTPUT or not done.stdout.lstrip().startswith(b"{"):
        tail = done.stderr.decode("utf-8", "replace")[-800:].strip()
        raise SglxError(
            f"{argv[0]} exited {done.returncode} without a JSON envelope: {tail}",
            hint="is the module in the image? For an image older than the gate pass "
            "--overlay-source",
            code="environment",
        )
    doc = parse_json(done.stdout, path=Path(argv[0]), what=what)
    if not isinstance(doc, dict) or not isinstance(doc.get("data", {}), dict):
        raise SglxError(
            f"{what} is not a result envelope", hint="check the module", code="environment"
        )
    doc["exit_code"] = done.returncode
    return seconds, doc


def _overlay_source(container: Any) -> None:
    """Copy OVERLAY from this checkout into the container's site-packages (as root, as `docker
    cp` does); the site-packages folder is asked of the container's own interpreter."""
    found = container.exec_run(
        ["python", "-c", "import os, sglx_core; print(os.path.dirname(sglx_core.__path__[0]))"]
    )
    site = found.output.decode().strip().splitlines()[-1] if found.exit_code == 0 else ""
    if not site.startswith("/"):
        raise SglxError(
            "cannot find sglx_core's site-packages in the container",
            hint="is this an sglx image?",
            code="environment",
        )
    buffer = io.BytesIO()
    now = time.time()  # newer than the image's bytecode, so the copied sources are read
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for source, target in OVERLAY:
            data = (REPO / source).read_bytes()
            info = tarfile.TarInfo(target)
            info.size, info.mode, info.mtime = len(data), 0o644, now
            archive.addfile(info, io.BytesIO(data))
    if not container.put_archive(site, buffer.getvalue()):
        raise SglxError(
            f"cannot copy the overlay into {site}", hint="check the engine", code="environment"
        )


def _print_table(r: dict[str, Any]) -> None:
    load = "/".join(f"{x:.1f}" for x in r["load_avg_before"])
    after = "/".join(f"{x:.1f}" for x in r["load_avg_after"])
    print(
        f"sglx gate bench: {r['image']}, {r['cpus']} cpus, engine {r['engine']}, "
        f"load {load} -> {after}, overlay {'yes' if r['overlay_source'] else 'no'}"
    )
    base = r["median_s"]["health_s"]
    # The added rows' last column is the sum of the parts' medians (the JSON's added_*_s).
    rows = [
        ("a. health alone (start -> /health -> 1 token)", "health_s"),
        ("b. golden replay", "replay_s"),
        ("c. speed gate, measuring", "speed_measure_s"),
        ("d. speed gate, judging its own record", "speed_judge_s"),
        ("gate added, restarted server (b + c)", "added_restarted_s"),
        ("gate added, kept server (b + d)", "added_kept_s"),
        ("health of the running server", "health_running_s"),
    ]
    width = max(len(name) for name, _ in rows)
    heads = "  ".join(f"{f'run {i + 1}':>7}" for i in range(len(r["runs"])))
    print(f"  {'part':<{width}}  {heads}  {'median':>6}   / health")
    for name, key in rows:
        values = [run[key] for run in r["runs"]]
        mid = r[key] if key.startswith("added") else r["median_s"][key]
        listed = "  ".join(f"{v:7.1f}" for v in values)
        print(f"  {name:<{width}}  {listed}  {mid:6.1f}   {mid / base:6.2f}")
    ok = r["within_target"]
    print(
        f"  within {r['target_s']:.0f} s per host: restarted {'yes' if ok['restarted'] else 'no'}, "
        f"kept {'yes' if ok['kept'] else 'no'}"
    )
    print(f"  speed settings (the gate's report): {json.dumps(r['speed_settings'])}")
    for failure in r["failed"]:
        print(f"  failed: {failure}")


if __name__ == "__main__":
    sys.exit(main())

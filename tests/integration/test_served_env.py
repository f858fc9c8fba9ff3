"""What the served process actually receives, read from the running container.

The cpu image is started with `docker run` as the README says, plus two `-e` variables a user
adds. The environment of the running `sglang.launch_server` process and of its scheduler, read
from /proc/<pid>/environ, must hold every variable of the profile with its baked value,
`SGLANG_PLATFORM=sglx` and the user's variables; the sglx platform must have been activated in
those processes (its own log lines say so); and with `-e SGLX_PROFILE_FALLBACKS=1`, `docker stop`
must leave the fallback table in the log and the JSON reports in the container.
"""

from __future__ import annotations

import io
import json
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.engine_fixtures import free_port
from helpers.server import http, wait_healthy

from sglx_core.profile import load_profile

pytestmark = [pytest.mark.docker, pytest.mark.slow]
REPORTS = "/tmp/sglx-test-fallbacks"
USER_ENV = {"SGLX_PROFILE_FALLBACKS": "1", "SGLX_PROFILE_FALLBACKS_DIR": REPORTS}


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


@pytest.fixture(scope="module")
def running(docker: Any, cpu_image: dict[str, Any], run_id: str) -> Iterator[dict[str, Any]]:
    port = free_port()
    name = f"sglx-test-env-{run_id}"
    user = [arg for name_value in USER_ENV.items() for arg in ("-e", "=".join(name_value))]
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--network",
            "host",
            "--name",
            name,
            *user,
            cpu_image["tag"],
            *[
                "--port",
                str(port),
            ],
        ],
        check=True,
        capture_output=True,
    )
    container = docker.containers.get(name)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, 600, alive=lambda: docker.containers.get(name).status == "running")
        # Host PIDs of the container's processes, by command line.
        top = container.top(ps_args="-eo pid,args")
        processes = {int(row[0]): row[1] for row in top["Processes"]}
        yield {"container": container, "base": base, "processes": processes}
    except BaseException:
        print(container.logs().decode()[-5000:])
        raise
    finally:
        container.remove(force=True)


def the_process(processes: dict[int, str], marker: str) -> int:
    (pid,) = [pid for pid, args in processes.items() if marker in args]
    return pid


def test_server_and_scheduler_get_the_image_environment(
    running: dict[str, Any], docker: Any, cpu_image: dict[str, Any]
) -> None:
    baked = dict(
        e.split("=", 1) for e in docker.images.get(cpu_image["tag"]).attrs["Config"]["Env"]
    )
    profile = load_profile("cpu")
    processes = running["processes"]
    for marker in ("-m sglang.launch_server", "sglang::scheduler"):
        received = environ(the_process(processes, marker))
        for name, value in profile.env.items():
            assert received.get(name) == value == baked[name], (marker, name)
        assert received["SGLANG_PLATFORM"] == "sglx"
        assert received["PATH"] == baked["PATH"]
        assert received["SGLX_PROFILE"] == baked["SGLX_PROFILE"]
        for name, value in USER_ENV.items():
            assert received[name] == value, (marker, name)


def test_sglx_is_the_active_platform_of_the_server(running: dict[str, Any]) -> None:
    log = running["container"].logs().decode()
    # The sglx platform applied the profile's defaults in the server process ...
    assert "sglx: cpu defaults applied:" in log
    # ... and registered sglx kernels for the ops in the scheduler, where the model runs.
    assert "sglx_kernels: rms_norm on cpu falls back from triton to composite" in log
    status, info = http(f"{running['base']}/get_server_info")
    assert status == 200
    assert (info["attention_backend"], info["max_total_tokens"]) == ("torch_native", 4096)
    # The idle scheduler blocks in zmq poll instead of spinning a core (the cpu profile).
    assert info["sleep_on_idle"] is True


def test_docker_stop_leaves_the_fallback_profile(running: dict[str, Any]) -> None:
    for prompt in ("Hello", "Pack my box with", "The quick brown fox"):
        status, body = http(
            f"{running['base']}/v1/completions",
            {"model": "demo", "prompt": prompt, "max_tokens": 8, "temperature": 0},
        )
        assert status == 200, body
    container = running["container"]
    subprocess.run(["docker", "stop", "-t", "30", container.name], check=True, capture_output=True)
    log = container.logs().decode()
    assert "sglx fallback profile (share of op time)" in log, log[-3000:]
    assert "RMSNorm" in log.split("sglx fallback profile")[-1]
    stream, _ = container.get_archive(REPORTS)
    with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as tar:
        reports = [
            json.load(tar.extractfile(m))  # type: ignore[arg-type]
            for m in tar.getmembers()
            if m.name.endswith(".json")
        ]
    calls = {row["op"]: row["calls"] for report in reports for row in report["ops"]}
    assert calls.get("RMSNorm", 0) > 0, reports

"""The image entrypoint (`sglx-serve`) and healthcheck (`sglx-healthcheck`).

`sglx-serve` starts `python -m sglang.launch_server` with the baked model, 0.0.0.0 and the
profile's port, followed by the arguments given to `docker run` (later flags win), and runs
preflight on exactly those arguments beside it. The server inherits this process's environment
untouched: the image's `ENV` (the profile's variables, `SGLANG_PLATFORM=sglx`) and whatever
`docker run -e` added. The profile's SGLang defaults and refusals are applied inside sglang by
the sglx platform, so they are not repeated here.

Preflight and the server start in parallel by default: preflight's slow part is importing torch
and sglang, which the server does anyway, so running it first would cost that time twice. When
preflight fails, the server is stopped and sglx-serve exits with preflight's code (1, or 2 when
preflight could not run). `SGLX_PREFLIGHT=first` runs it before the server starts instead, and
`SGLX_PREFLIGHT=off` (or `SGLX_SKIP_PREFLIGHT=1`) skips it.

sglx-serve stays as the container's PID 1: it forwards signals to the server (which then shuts
down exactly as it does when started bare), reaps orphans and exits with the server's status.
With `SGLX_PROFILE_FALLBACKS=1` it prints the fallback table of the server's processes once they
are gone (their JSON reports stay in the report folder).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import FrameType

from sglx_platform import profiling
from sglx_platform.baked import baked_profile

# Where sglx-serve leaves the port it started the server on, for the healthcheck.
STATE = Path("/tmp/sglx-serve.json")
MODEL_ENV = "SGLX_MODEL"
# The name the image was built with (`sglx image build` writes it; "demo" for the demo model).
NAME_FILE = Path("/etc/sglx/model-name")
DEFAULT_MODEL = "/models/model"
PREFLIGHT_ENV = "SGLX_PREFLIGHT"
SKIP_PREFLIGHT_ENV = "SGLX_SKIP_PREFLIGHT"
PREFLIGHT_MODES = ("parallel", "first", "off")
DEMO_MARKER = "sglx-demo.json"
# The module the server runs as (`python -m`); tests put a probe in its place.
SERVER_MODULE = "sglang.launch_server"
FORWARDED = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
STOP_GRACE_S = 20.0


def server_argv(extra: list[str]) -> list[str]:
    model = os.environ.get(MODEL_ENV, DEFAULT_MODEL)
    port = str(baked_profile().container.port)
    argv = ["--model-path", model, "--host", "0.0.0.0", "--port", port]
    if NAME_FILE.is_file():
        argv += ["--served-model-name", NAME_FILE.read_text().strip()]
    return [*argv, *extra]


def preflight_mode() -> str:
    if os.environ.get(SKIP_PREFLIGHT_ENV) == "1":
        return "off"
    mode = os.environ.get(PREFLIGHT_ENV, "parallel")
    if mode not in PREFLIGHT_MODES:
        _say(f"{PREFLIGHT_ENV}={mode} is not one of {', '.join(PREFLIGHT_MODES)}; using parallel")
        return "parallel"
    return mode


def main(argv: list[str] | None = None) -> int:
    argv = server_argv(list(sys.argv[1:] if argv is None else argv))
    _announce_demo(Path(os.environ.get(MODEL_ENV, DEFAULT_MODEL)))
    mode = preflight_mode()
    if mode == "first" and (code := _preflight(argv)) != 0:
        _say(f"preflight failed (exit {code}); not starting the server")
        return code
    STATE.write_text(json.dumps({"port": _last_value(argv, "--port")}))
    started = time.time()
    server = subprocess.Popen(
        [sys.executable, "-m", SERVER_MODULE, *argv], process_group=0
    )  # env: inherited as it is
    _forward_signals(server)
    if mode == "parallel" and (code := _preflight(argv)) != 0:
        _say(
            f"preflight failed (exit {code}); stopping the server. {PREFLIGHT_ENV}=first runs "
            f"preflight before the server, {PREFLIGHT_ENV}=off skips it."
        )
        _stop(server)
        return code
    code = _wait_reaping(server)
    if profiling.enabled():
        table = profiling.summary_of_reports(profiling.report_dir(), since=started)
        _say(f"the server's fallback profile (reports in {profiling.report_dir()}):\n{table}")
    return code


def _preflight(argv: list[str]) -> int:
    from sglx_platform.preflight.command import guarded
    from sglx_platform.preflight.runner import run

    code = guarded(lambda: run(argv, device_init=True, timeout_s=120.0), as_json=False)
    sys.stdout.flush()
    return code


def _forward_signals(server: subprocess.Popen[bytes]) -> None:
    def forward(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            server.send_signal(signum)

    for signum in FORWARDED:
        signal.signal(signum, forward)


def _stop(server: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL after the grace period."""
    for signum, wait_s in ((signal.SIGTERM, STOP_GRACE_S), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, signum)
        try:
            server.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _wait_reaping(server: subprocess.Popen[bytes]) -> int:
    """Wait for the server, reaping any orphan re-parented to us (we are PID 1 in the image);
    the server's exit status becomes ours (128+N for a signal N, as a shell reports it)."""
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return server.returncode if server.returncode is not None else 0
        except InterruptedError:
            continue
        if pid == server.pid:
            code = os.waitstatus_to_exitcode(status)
            server.returncode = code
            return code if code >= 0 else 128 - code


def _announce_demo(model: Path) -> None:
    marker = model / DEMO_MARKER
    if marker.is_file():
        note = json.loads(marker.read_text()).get("note", "")
        _say(
            f"serving the sglx DEMO model at {model} ({note}); pass your own model with "
            "`sglx image build --model DIR`"
        )


def _say(message: str) -> None:
    print(f"sglx-serve: {message}", file=sys.stderr, flush=True)


def _last_value(argv: list[str], flag: str) -> str:
    """The value argparse will use for `flag`: the last one given (`--flag V` or `--flag=V`)."""
    value = ""
    for index, arg in enumerate(argv):
        if arg == flag and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(f"{flag}="):
            value = arg.split("=", 1)[1]
    return value


def healthcheck() -> int:
    """0 when the server's /health answers 200 (Docker HEALTHCHECK), else 1."""
    try:
        port = json.loads(STATE.read_text())["port"]
    except (OSError, ValueError, KeyError):
        port = baked_profile().container.port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=8) as reply:
            return 0 if reply.status == 200 else 1
    except OSError:
        return 1


if __name__ == "__main__":
    sys.exit(main())

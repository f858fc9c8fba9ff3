"""The image entrypoint (`sglx-serve`) and healthcheck (`sglx-healthcheck`).

`sglx-serve` starts `python -m sglang.launch_server` with the baked model, 0.0.0.0 and the
profile's port, then the arguments of the serving profile chosen for this host and model
(sglx_runtime.serving: the devices read from sysfs, the model's config.json, the capacity
check), then the arguments given to `docker run` (later flags win), and runs preflight on
exactly those arguments beside it. The server inherits this process's environment: the image's
`ENV` (the profile's variables, `SGLANG_PLATFORM=sglx`), whatever `docker run -e` added, and the
chosen serving profile's variables where `docker run -e` did not set them. The profile's SGLang
defaults and refusals are applied inside sglang by the sglx platform, so they are not repeated
here. A model that cannot fit, or a host no serving profile can run, is refused before the
server starts (exit 2), with the numbers and the fixes; so is a node-local JIT cache folder that
is not the server's own, mode 0700, since the server loads code from it (sglx_runtime.jit_cache).

`sglx-serve --list-profiles` and `--dry-run` (each with `--json`) answer without starting
anything and without importing torch or sglang: every serving profile sorted into runnable, low
memory and incompatible with its reason; the final command and environment, and the layer that
set each value. `--version` says which sglx-serve and arch profile the image carries.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import FrameType

from sglx_core import model_assets, observability
from sglx_core.errors import SglxError
from sglx_platform import metrics, model_config, profiling
from sglx_platform.image_profile import baked_profile
from sglx_runtime import jit_cache, serving, tuned_configs, warm_cache

STATE_NAME = "sglx-serve.json"
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
METRICS_FLAG = "--enable-metrics"


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
    try:
        own, user_args = serving.split_own_flags(list(sys.argv[1:] if argv is None else argv))
    except SglxError as error:
        _say(f"refused before starting the server: {error}")
        return 2
    if own:
        return _explain(own, user_args)
    try:
        chosen = _plan(user_args)
    except SglxError as error:
        _say(f"refused before starting the server: {error}")
        return 2
    for line in serving.log_lines(chosen):
        _say(line)
    try:
        jit_cache.checked_cache_root()  # the server loads code from it: refused unless private
        assets = _model_asset_env(user_args)  # e.g. gpt-oss's vocabulary, beside config.json
        # The host's tuned set, when one is mounted: its variables win over the image's.
        tuned_env, tuned_lines = tuned_configs.mounted_env(baked_profile(), chosen.hardware)
    except SglxError as error:
        _say(f"refused before starting the server: {error}")
        return 2
    for line in tuned_lines:
        _say(line)
    os.environ.update({**chosen.env, **assets, **tuned_env})  # the server and preflight inherit it
    argv = server_argv(chosen.resolution.argv if chosen.resolution else user_args)
    _announce_demo(Path(os.environ.get(MODEL_ENV, DEFAULT_MODEL)))
    installed = _install_prebuilt_cache()
    _say(installed if isinstance(installed, str) else installed.line())
    selected = chosen.resolution.chosen.name if chosen.resolution else None
    if observability.metrics_on(baked_profile(), os.environ) or METRICS_FLAG in argv:
        _publish_metrics(argv, selected, installed)
    mode = preflight_mode()
    if mode == "first" and (code := _preflight(argv)) != 0:
        _say(f"preflight failed (exit {code}); not starting the server")
        return code
    state_file().write_text(
        json.dumps({"port": _last_value(argv, "--port"), "serving_profile": selected})
    )
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


def _install_prebuilt_cache() -> warm_cache.Installed | str:
    """The image's prebuilt Triton cache into the node-local one, when it fits the devices; a
    cache that does not fit, or a damaged one, is reported (the line returned) and left out,
    never fatal."""
    try:
        return warm_cache.install(baked_profile(), warm_cache.triton_cache_dir())
    except (SglxError, OSError) as error:
        return f"prebuilt Triton cache not used: {error}"


def _publish_metrics(
    argv: list[str], selected: str | None, installed: warm_cache.Installed | str
) -> None:
    """sglx's series beside sglang's at the server's /metrics (sglx_platform.metrics)."""
    from importlib.metadata import version

    metrics.prepare()
    done = (0, 0) if isinstance(installed, str) else (installed.copied, installed.present)
    served = _last_value(argv, "--served-model-name")
    model = served or Path(_last_value(argv, "--model-path")).name
    metrics.publish_start(
        arch=baked_profile().arch,
        version=version("sglx-platform"),
        serving_profile=selected or "none",
        model=model,
        copied=done[0],
        present=done[1],
        deployment=observability.deployment_labels(os.environ),
    )


def _model_asset_env(user_args: list[str]) -> dict[str, str]:
    """The variables that point the model's start-time loaders at its folder
    (sglx_core.model_assets); refused when a file the model needs is not there, since nothing
    may download it."""
    folder = serving.model_folder(user_args, os.environ.get(MODEL_ENV, DEFAULT_MODEL))
    config = model_config.read_config(folder)
    if config is None:
        return {}
    profile = baked_profile()
    model_assets.require(profile, config, Path(folder))
    return model_assets.env_for(profile, config, Path(folder), os.environ)


def _plan(user_args: list[str]) -> serving.Plan:
    observability.metrics_on(baked_profile(), os.environ)  # SGLX_METRICS: refused if unreadable
    model = serving.model_folder(user_args, os.environ.get(MODEL_ENV, DEFAULT_MODEL))
    return serving.plan(baked_profile(), user_args, os.environ, model)


def _explain(own: set[str], user_args: list[str]) -> int:
    """`--list-profiles` / `--dry-run` (with `--json`): print, start nothing. Exit 0, or 2 with
    the refusal the server would have met."""
    as_json = serving.JSON_FLAG in own
    if serving.VERSION_FLAG in own:
        from importlib.metadata import version

        print(f"sglx-serve {version('sglx-platform')} ({baked_profile().arch})")
        return 0
    try:
        chosen = _plan(user_args)
        _model_asset_env(user_args)  # refused as the start would be
    except SglxError as error:
        if as_json:
            refusal = {"code": error.code, "message": error.message, "hint": error.hint}
            print(json.dumps({"error": refusal}, indent=2))
        else:
            print(f"refused: {error}")
        return 2
    if serving.LIST_FLAG in own:
        document: dict[str, object] = serving.list_document(chosen)
        text = serving.list_table(chosen)
    else:
        resolved = chosen.resolution.argv if chosen.resolution else user_args
        command = [sys.executable, "-m", SERVER_MODULE, *server_argv(resolved)]
        document = serving.dry_run_document(chosen, command)
        text = serving.dry_run_text(chosen, command)
    print(json.dumps(document, indent=2) if as_json else text)
    return 0


def _preflight(argv: list[str]) -> int:
    from sglx_runtime.preflight.command import guarded
    from sglx_runtime.preflight.runner import run

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


def state_file() -> Path:
    """Where sglx-serve leaves the port it started the server on, for the healthcheck: the
    temporary folder of the process (the container's /tmp; the tests' own folder)."""
    return Path(tempfile.gettempdir()) / STATE_NAME


def healthcheck() -> int:
    """0 when the server's /health answers 200 (Docker HEALTHCHECK), else 1."""
    try:
        port = json.loads(state_file().read_text())["port"]
    except (OSError, ValueError, KeyError):
        port = baked_profile().container.port
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=8) as reply:
            return 0 if reply.status == 200 else 1
    except OSError:
        return 1


if __name__ == "__main__":
    sys.exit(main())

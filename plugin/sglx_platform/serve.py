"""The image entrypoint (`sglx-serve`) and healthcheck (`sglx-healthcheck`).

`sglx-serve` runs preflight on the exact server arguments it is about to use, then replaces
itself with `python -m sglang.launch_server`: the baked model, 0.0.0.0 and the profile's port,
followed by the arguments given to `docker run` (later flags win). The profile's SGLang
defaults and refusals are applied inside sglang by the sglx platform, so they are not repeated
here.
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

from sglx_platform import preflight
from sglx_platform.baked import baked_profile

# Where sglx-serve leaves the port it started the server on, for the healthcheck.
STATE = Path("/tmp/sglx-serve.json")
MODEL_ENV = "SGLX_MODEL"
# The name the image was built with (`sglx image build` writes it; "demo" for the demo model).
NAME_FILE = Path("/etc/sglx/model-name")
DEFAULT_MODEL = "/models/model"
SKIP_PREFLIGHT_ENV = "SGLX_SKIP_PREFLIGHT"
DEMO_MARKER = "sglx-demo.json"


def server_argv(extra: list[str]) -> list[str]:
    model = os.environ.get(MODEL_ENV, DEFAULT_MODEL)
    port = str(baked_profile().container.port)
    argv = ["--model-path", model, "--host", "0.0.0.0", "--port", port]
    if NAME_FILE.is_file():
        argv += ["--served-model-name", NAME_FILE.read_text().strip()]
    return [*argv, *extra]


def main(argv: list[str] | None = None) -> int:
    argv = server_argv(list(sys.argv[1:] if argv is None else argv))
    model = Path(os.environ.get(MODEL_ENV, DEFAULT_MODEL))
    if (model / DEMO_MARKER).is_file():
        note = json.loads((model / DEMO_MARKER).read_text()).get("note", "")
        print(
            f"sglx-serve: serving the sglx DEMO model at {model} ({note}); pass your own "
            "model with `sglx image build --model DIR`",
            flush=True,
        )
    if os.environ.get(SKIP_PREFLIGHT_ENV) != "1":
        code = preflight.main(["--", *argv])
        sys.stdout.flush()
        if code != 0:
            print(
                f"sglx-serve: preflight failed (exit {code}); not starting the server. "
                f"{SKIP_PREFLIGHT_ENV}=1 skips preflight.",
                file=sys.stderr,
                flush=True,
            )
            return code
    STATE.write_text(json.dumps({"port": _last_value(argv, "--port")}))
    os.execv(sys.executable, [sys.executable, "-m", "sglang.launch_server", *argv])
    return 0  # not reached


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

"""sglx-serve hands the server exactly the image's environment, on every arch.

sglx-serve runs for real (preflight included) with the environment each committed Dockerfile
bakes, plus variables a user adds with `docker run -e`; only the server it starts is replaced by
a probe that records what it received. The ROCm and Kunlun profiles have no device here, so
their preflight fails, and sglx-serve must stop the server and exit 1 -- after the server got
the same environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.dockerfile_env import dockerfile_env
from helpers.profiles import bake
from helpers.serving_fixtures import mi300x_host
from helpers.tuned_files import write_tuning_run

from sglx_core import tuned
from sglx_core.profile import load_profile

REPO = Path(__file__).resolve().parents[3]
ARCHES = ["cpu", "gfx942", "gfx950", "gfx1151", "kunlun"]
USER_ENV = {"SGLX_PROFILE_FALLBACKS": "1", "SITE_VARIABLE": "from docker run -e"}
SERVE = (
    "import sys, sglx_runtime.serve as serve\n"
    "serve.SERVER_MODULE = 'env_probe'\n"
    "sys.exit(serve.main())\n"
)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sglx.demo_model import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("model") / "demo")


def baked(arch: str, tmp_path: Path) -> Path:
    """The resolved profile as the image bakes it, with its node-local JIT cache folder (which
    sglx-serve checks before it starts anything) a private folder of the test."""
    cache = tmp_path / "jit-cache"
    cache.mkdir(mode=0o700)
    jit = {**load_profile(arch).container.jit_cache.model_dump(), "target": str(cache)}
    return bake(arch, tmp_path / "arch.yaml", container={"jit_cache": jit})


def serve(
    arch: str, tmp_path: Path, model: Path, extra: dict[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], Any]:
    image_env = dockerfile_env(REPO / "images" / arch / "Dockerfile")
    out = tmp_path / "probe.json"
    env = {
        **image_env,
        # What the image would read from /etc/sglx and /models, here from the test's files.
        "SGLX_PROFILE": str(baked(arch, tmp_path)),
        "SGLX_MODEL": str(model),
        "SGLX_PROBE_ROOT": str(tmp_path / "host"),
        "HOME": str(tmp_path),
        "TMPDIR": str(tmp_path),  # where sglx-serve leaves its state file
        **USER_ENV,
        "PYTHONPATH": str(REPO / "tests" / "helpers"),
        "SGLX_TEST_PROBE_OUT": str(out),
        **(extra or {}),
    }
    # The host's memory, which the cpu arch's serving-profile selection reads under the root.
    (tmp_path / "host" / "proc").mkdir(parents=True)
    shutil.copyfile("/proc/meminfo", tmp_path / "host" / "proc" / "meminfo")
    proc = subprocess.run(
        [sys.executable, "-c", SERVE, "--port", "31999"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert out.is_file(), proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


@pytest.mark.parametrize("arch", ARCHES)
def test_the_server_gets_the_image_environment(arch: str, tmp_path: Path, model: Path) -> None:
    proc, probe = serve(arch, tmp_path, model)
    received = probe["environ"]
    baked = dockerfile_env(REPO / "images" / arch / "Dockerfile")
    profile = load_profile(arch)
    assert profile.env, "every profile bakes variables"
    for name, value in profile.env.items():
        assert received.get(name) == value == baked[name], name
    assert received["SGLANG_PLATFORM"] == "sglx"
    assert received["PATH"] == baked["PATH"]
    for name, value in USER_ENV.items():
        assert received[name] == value
    assert probe["argv"][:2] == ["--model-path", str(model)]
    assert probe["argv"][-2:] == ["--port", "31999"]
    if arch == "cpu":
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "preflight passed" in proc.stdout
    else:
        # No accelerator here: preflight fails as device_init_failed and the server is stopped.
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "device_init_failed" in proc.stdout
        assert "preflight failed (exit 1); stopping the server" in proc.stderr


def test_preflight_first_does_not_start_the_server_when_it_fails(
    tmp_path: Path, model: Path
) -> None:
    out = tmp_path / "probe.json"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SGLX_", "SGLANG_"))},
        "SGLX_PROFILE": str(baked("gfx942", tmp_path)),
        "SGLX_MODEL": str(model),
        "SGLX_PROBE_ROOT": str(tmp_path),
        "SGLX_PREFLIGHT": "first",
        "PYTHONPATH": str(REPO / "tests" / "helpers"),
        "SGLX_TEST_PROBE_OUT": str(out),
    }
    proc = subprocess.run(
        [sys.executable, "-c", SERVE], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 1
    assert "preflight failed (exit 1); not starting the server" in proc.stderr
    assert not out.exists()


def test_the_server_reads_the_mounted_tuned_set_and_another_archs_is_refused(
    tmp_path: Path, model: Path
) -> None:
    """The host's tuned set, mounted where the profile says (here a folder of the test),
    reaches the server as the variables AITER, TunableOp and hipBLASLt read; sglx-serve names it
    in the log. A set of another arch stops the start before anything runs (exit 2)."""
    tuning = write_tuning_run(tmp_path / "tuning")
    profile = load_profile("gfx942")
    tuned.capture(tuning, tmp_path / "set", profile, captured_from="t", host="h", sglx="t")
    other = tmp_path / "other"
    (tuning / "bf16_tuned_gemm.csv").unlink()  # the gfx950 profile takes the rest
    (tuning / "a8w8_blockscale_tuned_gemm.csv").unlink()
    tuned.capture(tuning, other, load_profile("gfx950"), captured_from="t", host="h", sglx="t")
    for folder, arch_ok in ((tmp_path / "set", True), (other, False)):
        work = tmp_path / f"run-{folder.name}"
        work.mkdir(parents=True)
        cache = work / "jit-cache"
        cache.mkdir(mode=0o700)
        jit = {**profile.container.jit_cache.model_dump(), "target": str(cache)}
        baked_profile = bake("gfx942", work / "arch.yaml", container={"jit_cache": jit},
                             tuning={"target": str(folder)})  # fmt: skip
        out = work / "probe.json"
        env = {
            **dockerfile_env(REPO / "images" / "gfx942" / "Dockerfile"),
            "SGLX_PROFILE": str(baked_profile),
            "SGLX_MODEL": str(model),
            "SGLX_PROBE_ROOT": str(work / "host"),
            "SGLX_PREFLIGHT": "off",  # what is tested is the environment; preflight is above
            "HOME": str(work),
            "TMPDIR": str(work),
            "PYTHONPATH": str(REPO / "tests" / "helpers"),
            "SGLX_TEST_PROBE_OUT": str(out),
        }
        mi300x_host(work / "host", 1)
        (work / "host" / "proc").mkdir(exist_ok=True)
        shutil.copyfile("/proc/meminfo", work / "host" / "proc" / "meminfo")
        proc = subprocess.run([sys.executable, "-c", SERVE, "--port", "31999"], env=env,
                              capture_output=True, text=True, timeout=600, check=False)  # fmt: skip
        if not arch_ok:
            assert proc.returncode == 2, proc.stderr[-3000:]
            assert f"{other}: the tuned set was captured for gfx950, not gfx942" in proc.stderr
            assert not out.exists()
            continue
        assert proc.returncode == 0, proc.stderr[-3000:]
        received = json.loads(out.read_text())["environ"]
        assert received["AITER_CONFIG_GEMM_BF16"] == f"{folder}/bf16_tuned_gemm.csv"
        assert received["PYTORCH_TUNABLEOP_FILENAME"] == f"{folder}/tunableop_results%d.csv"
        assert received["PYTORCH_TUNABLEOP_TUNING"] == "0"
        assert received["HIPBLASLT_TUNING_OVERRIDE_FILE"] == f"{folder}/hipblaslt_tuning.txt"
        digest = tuned.load(folder, profile).digest
        assert f"tuned GEMM configurations: set {digest} (" in proc.stderr

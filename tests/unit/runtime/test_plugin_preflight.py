"""sglx-preflight passes and fails in the right classes on fixture hosts.

Each case runs the real console script in a child process against a fixture probe root
(KFD topology, /dev nodes made with mknod) and fixture libraries built with gcc.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.devices import char_node, make_kfd_host
from helpers.elf import shared_library
from helpers.profiles import bake
from helpers.serving_fixtures import MI300X, write_kfd_host

PREFLIGHT = str(Path(sys.executable).with_name("sglx-preflight"))
ROCM_SONAMES = [
    "libamdhip64.so.7",
    "libhsa-runtime64.so.1",
    "librocblas.so.5",
    "libhipblaslt.so.1",
    "librccl.so.1",
    "libamd_comgr.so.3",
]


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from sglx.demo_model import make_demo_model

    return make_demo_model(tmp_path_factory.mktemp("model") / "demo")


def preflight(env: dict[str, str], *args: str, timeout: float = 300) -> tuple[int, dict[str, Any]]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SGLX_", "SGLANG_")) and k != "LD_LIBRARY_PATH"
    }
    proc = subprocess.run(
        [PREFLIGHT, "--json", *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.stdout, proc.stderr[-2000:]
    return proc.returncode, json.loads(proc.stdout)


def classes(envelope: dict[str, Any]) -> dict[str, str | None]:
    return {c["check"]: c["class"] for c in envelope["data"]["checks"] if c["status"] == "fail"}


def test_cpu_preflight_passes_with_server_args(tmp_path: Path, model: Path) -> None:
    env = {"SGLX_PROFILE": str(bake("cpu", tmp_path / "arch.yaml")), "SGLANG_PLATFORM": "sglx"}
    code, envelope = preflight(env, "--", "--model-path", str(model))
    assert code == 0, classes(envelope)
    checks = {c["check"]: c for c in envelope["data"]["checks"]}
    assert checks["device cpu"]["status"] == "pass"
    assert "max_total_tokens=4096" in checks["server args"]["detail"]


def test_a_host_without_the_gpu_fails_as_device_init_failed(tmp_path: Path) -> None:
    (tmp_path / "host").mkdir()
    env = {
        "SGLX_PROFILE": str(bake("gfx942", tmp_path / "arch.yaml")),
        "SGLANG_PLATFORM": "sglx",
        "SGLX_PROBE_ROOT": str(tmp_path / "host"),
    }
    code, envelope = preflight(env)
    assert code == 1
    failed = classes(envelope)
    assert failed["arch"] == "device_init_failed"
    assert failed["device /dev/kfd"] == "device_init_failed"
    assert failed["library libamdhip64.so.7"] == "symbol_not_found"
    hints = {f["message"].split(":")[0]: f["hint"] for f in envelope["findings"]}
    assert "--device /dev/kfd --device /dev/dri" in hints["arch"]


def test_gfx942_fixture_host_with_fixture_rocm_libraries_passes(
    tmp_path: Path, model: Path
) -> None:
    # two MI300X cards in no xGMI hive (hive_id 0 on both): PCIe between them
    host = write_kfd_host(tmp_path / "host", [MI300X, MI300X], hive_ids=[0, 0])
    libs = tmp_path / "fixture-rocm-libs"
    for soname in ROCM_SONAMES:
        shared_library(libs, soname, "int fixture_rocm(void) { return 0; }\n")
    env = {
        "SGLX_PROFILE": str(bake("gfx942", tmp_path / "arch.yaml")),
        "SGLANG_PLATFORM": "sglx",
        "SGLX_PROBE_ROOT": str(host),
        "LD_LIBRARY_PATH": str(libs),
    }
    code, envelope = preflight(
        env, "--no-device-init", "--", "--model-path", str(model), "--kv-cache-dtype", "fp8_e4m3"
    )
    assert code == 0, classes(envelope)
    checks = {c["check"]: c for c in envelope["data"]["checks"]}
    assert checks["arch"]["detail"] == "kfd node 1: gfx942, kfd node 2: gfx942"
    assert checks["device /dev/dri/renderD128"]["status"] == "pass"
    # two GPUs in no xGMI hive (hive_id 0): a warning, the start goes on (seed S0-25)
    link = checks["interconnect"]
    assert link["status"] == "warn" and "node 1: no hive, node 2: no hive" in link["detail"], link
    assert "--pp-size" in link["fix"]


def test_device_nodes_without_a_driver_and_a_gpu_of_another_arch(tmp_path: Path) -> None:
    host = make_kfd_host(tmp_path / "host", [90500], working=False)
    env = {
        "SGLX_PROFILE": str(bake("gfx942", tmp_path / "arch.yaml")),
        "SGLANG_PLATFORM": "sglx",
        "SGLX_PROBE_ROOT": str(host),
    }
    code, envelope = preflight(env)
    assert code == 1
    findings = {f["message"].split(":")[0]: f for f in envelope["findings"]}
    assert "KFD lists only gfx950 GPUs" in findings["arch"]["message"]
    assert "sglx image for gfx950" in findings["arch"]["hint"]
    assert findings["device /dev/kfd"]["code"] == "device_init_failed"
    assert "no driver" in findings["device /dev/kfd"]["message"]


def test_refused_arguments_forbidden_env_and_another_platform(tmp_path: Path, model: Path) -> None:
    env = {
        "SGLX_PROFILE": str(bake("cpu", tmp_path / "arch.yaml")),
        "SGLANG_PLATFORM": "vllm_kunlun",
        "SGLANG_USE_CPU_ENGINE": "1",
    }
    code, envelope = preflight(
        env, "--", "--model-path", str(model), "--attention-backend", "triton"
    )
    assert code == 1
    failed = classes(envelope)
    assert failed["plugin"] == "plugin_not_found"
    assert failed["env SGLANG_USE_CPU_ENGINE"] == "config_refused"
    assert failed["server args"] == "config_refused"


def test_undefined_symbols_and_hangs_are_classified(tmp_path: Path) -> None:
    libs = tmp_path / "fixture-libs"
    shared_library(
        libs,
        "libfixture_mismatch.so.1",
        "extern int symbol_from_another_release(void);\n"
        "int use(void) { return symbol_from_another_release(); }\n",
    )
    shared_library(
        libs,
        "libfixture_hang.so.1",
        "#include <unistd.h>\n"
        "__attribute__((constructor)) static void stuck(void) { sleep(600); }\n",
    )
    require = {
        "libtorch_cpu.so": "torch",
        "libfixture_mismatch.so.*": "stands in for a vendor library built against another release",
    }
    env = {
        "SGLX_PROFILE": str(bake("cpu", tmp_path / "a.yaml", scan={"require": require})),
        "SGLANG_PLATFORM": "sglx",
        "LD_LIBRARY_PATH": str(libs),
    }
    code, envelope = preflight(env)
    assert code == 1
    assert classes(envelope) == {"library libfixture_mismatch.so.1": "symbol_not_found"}

    require = {"libfixture_hang.so.*": "stands in for a driver library that never returns"}
    env["SGLX_PROFILE"] = str(bake("cpu", tmp_path / "b.yaml", scan={"require": require}))
    code, envelope = preflight(env, "--timeout", "5")
    assert code == 1
    assert classes(envelope) == {"init": "init_hang"}
    (finding,) = envelope["findings"]
    assert "libfixture_hang.so.1 did not finish within 5 s" in finding["message"]


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="sglx-test-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def test_a_node_the_user_cannot_open_says_which_group_to_add(shared_tmp: Path) -> None:
    node = char_node(shared_tmp / "dev" / "kfd", mode=0o660)
    # Import as root, then drop to nobody (the interpreter lives under /root), then open.
    script = (
        "import os, sys; from pathlib import Path\n"
        "from sglx_core.profile import load_profile\n"
        "from sglx_runtime.preflight.hardware import open_check\n"
        "profile = load_profile('gfx942')\n"
        "os.setgroups([]); os.setresgid(65534, 65534, 65534); os.setresuid(65534, 65534, 65534)\n"
        "check = open_check(profile, Path(sys.argv[1]), Path(sys.argv[2]))\n"
        "print(check.status, check.failure.value, check.detail, '|', check.fix)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(shared_tmp), str(node)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("fail device_init_failed permission denied for uid 65534")
    assert "add the container user to video, render (--group-add)" in proc.stdout


def crashing_library(libs: Path, soname: str, body: str) -> None:
    shared_library(
        libs,
        soname,
        "#include <signal.h>\n#include <stdio.h>\n#include <unistd.h>\n"
        f"__attribute__((constructor)) static void on_load(void) {{ {body} }}\n",
    )


def cpu_env_requiring(tmp_path: Path, libs: Path, soname: str) -> dict[str, str]:
    require = {"libtorch_cpu.so": "torch", f"{soname.split('.so')[0]}.so.*": "a fixture library"}
    return {
        "SGLX_PROFILE": str(bake("cpu", tmp_path / f"{soname}.yaml", scan={"require": require})),
        "SGLANG_PLATFORM": "sglx",
        "LD_LIBRARY_PATH": str(libs),
    }


def test_a_probe_child_that_dies_fails_the_step_it_was_in(tmp_path: Path) -> None:
    """Whatever the child printed first, on any stream, its death fails the running step."""
    libs = tmp_path / "libs"
    forged = r"{\"event\": \"end\"}\n{\"kind\": \"library\", \"ok\": true}\n"
    crashing_library(
        libs, "libfixture_segv.so.1", f'printf("{forged}"); fflush(stdout); raise(SIGSEGV);'
    )
    code, envelope = preflight(cpu_env_requiring(tmp_path, libs, "libfixture_segv.so.1"))
    assert code == 1
    assert classes(envelope) == {"library libfixture_segv.so.1": "symbol_not_found"}
    (finding,) = envelope["findings"]
    assert "the probe process killed by SIGSEGV during this step" in finding["message"]

    crashing_library(libs, "libfixture_exit.so.1", 'fprintf(stderr, "bye from C\\n"); _exit(0);')
    code, envelope = preflight(cpu_env_requiring(tmp_path, libs, "libfixture_exit.so.1"))
    assert code == 1
    assert classes(envelope) == {"library libfixture_exit.so.1": "symbol_not_found"}
    (finding,) = envelope["findings"]
    assert "exited before reporting every step during this step" in finding["message"]
    assert "its last words: bye from C" in finding["message"]


def test_stray_output_of_what_the_child_loads_does_not_break_the_protocol(
    tmp_path: Path,
) -> None:
    libs = tmp_path / "libs"
    crashing_library(
        libs,
        "libfixture_chatty.so.1",
        'printf("not json {{{\\n"); fflush(stdout); write(2, "warn\\n", 5);',
    )
    code, envelope = preflight(cpu_env_requiring(tmp_path, libs, "libfixture_chatty.so.1"))
    assert code == 0, classes(envelope)
    checks = {c["check"]: c["status"] for c in envelope["data"]["checks"]}
    assert checks["library libfixture_chatty.so.1"] == "pass"
    assert checks["module sglang.srt.server_args"] == "pass"


def test_an_error_inside_preflight_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A bug in preflight (here: a check module made to raise) must not surface as a
    traceback with exit 1, which the entrypoint would read as a failed check."""
    script = (
        "import sys\n"
        "import sglx_runtime.preflight.runner as runner\n"
        "def broken(checks): raise KeyError('boom')\n"
        "runner.check_profile = broken\n"
        "from sglx_runtime.preflight.command import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "SGLX_DEBUG"}
    for args in ([], ["--json"]):
        proc = subprocess.run(
            [sys.executable, "-c", script, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 2
        assert "Traceback" not in proc.stderr
        said = proc.stdout if args else proc.stderr
        assert "preflight itself failed: KeyError: 'boom'" in said
        assert "SGLX_DEBUG=1" in said
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**env, "SGLX_DEBUG": "1"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" in proc.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--timeout", "nan"], "--timeout must be a number above 0"),
        (["--timeout", "0"], "--timeout must be a number above 0"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_usage_errors_are_exit_2_with_a_json_envelope(args: list[str], words: str) -> None:
    code, envelope = preflight({}, *args)
    assert code == 2
    (error,) = envelope["errors"]
    assert words in error["message"]

"""Robust device init (lock, timeout, retries) and the cross-rank configuration check."""

from __future__ import annotations

import fcntl
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from helpers.profiles import bake
from helpers.weights_store import converted_weights

from sglx_platform.consistency import differences, fingerprint
from sglx_platform.device_init import LOCK_NAME, host_lock, init_device, lock_path
from sglx_platform.failures import FailureClass, PlatformError


@pytest.fixture(autouse=True)
def fast_init(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SGLX_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("SGLX_INIT_TIMEOUT_S", "2")
    monkeypatch.setenv("SGLX_INIT_RETRIES", "2")


def test_a_transient_failure_is_retried() -> None:
    attempts = []

    def flaky() -> None:
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise RuntimeError("device busy")

    init_device(flaky, "fixture device 0")
    assert len(attempts) == 3


def test_a_device_that_keeps_failing_is_device_init_failed() -> None:
    def broken() -> None:
        raise RuntimeError("hipErrorNoDevice")

    with pytest.raises(PlatformError) as caught:
        init_device(broken, "fixture device 0")
    assert caught.value.failure is FailureClass.DEVICE_INIT_FAILED
    assert "after 3 attempts: hipErrorNoDevice" in caught.value.detail


def test_a_device_that_never_answers_is_an_init_hang() -> None:
    started = time.monotonic()
    with pytest.raises(PlatformError) as caught:
        init_device(lambda: time.sleep(30), "fixture device 0")
    assert caught.value.failure is FailureClass.INIT_HANG
    assert time.monotonic() - started < 10  # reported at the timeout, not retried


def test_init_waits_for_another_process_holding_the_host_lock(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another process holds the lock on the $SGLX_LOCK_DIR folder: init says it waits, and its
    device operation runs only after that process let go (told by event order, not time)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import fcntl, os, sys
            fd = os.open({str(tmp_path)!r}, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("locked", flush=True)
            sys.stdin.readline()
        """),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None and holder.stdout is not None
    assert holder.stdout.readline().strip() == "locked"
    events: list[str] = []
    caplog.set_level(logging.INFO, logger="sglx_platform.device_init")
    waiter = threading.Thread(target=init_device, args=(lambda: events.append("init"), "dev 0"))
    waiter.start()
    deadline = time.monotonic() + 30
    while "waiting for the device-init lock" not in caplog.text:
        assert time.monotonic() < deadline and waiter.is_alive(), caplog.text
        time.sleep(0.05)
    events.append("released")
    holder.stdin.write("go\n")
    holder.stdin.close()
    waiter.join(timeout=30)
    holder.wait(timeout=30)
    assert events == ["released", "init"]
    assert f"waiting for the device-init lock {tmp_path}:" in caplog.text


def test_a_lock_dir_that_is_not_mounted_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$SGLX_LOCK_DIR set without its folder (-e without -v): refused, not a private lock."""
    monkeypatch.setenv("SGLX_LOCK_DIR", str(tmp_path / "not-mounted"))
    with pytest.raises(PlatformError) as caught:
        init_device(lambda: None, "fixture device 0")
    assert caught.value.failure is FailureClass.CONFIG_REFUSED
    assert "not-mounted" in caught.value.detail and "container.lock_dir" in caught.value.fix


def test_without_a_lock_dir_the_lock_is_a_file_of_this_container(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("SGLX_LOCK_DIR")
    assert lock_path().name == LOCK_NAME
    assert lock_path().parent in (Path("/var/lock"), Path("/tmp"))


def test_a_lock_held_past_the_timeout_is_an_init_hang(tmp_path: Path) -> None:
    path = tmp_path / LOCK_NAME
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with pytest.raises(PlatformError) as caught, host_lock(path, timeout_s=0.5):
            pass
    assert caught.value.failure is FailureClass.INIT_HANG
    assert "fuser" in caught.value.fix


def test_fingerprints_name_what_differs_and_where() -> None:
    prints = [
        {"profile": "a", "env:SGLANG_USE_AITER": "1"},
        {"profile": "a", "env:SGLANG_USE_AITER": "0"},
        {"profile": "a"},
    ]
    where = ["rank 0 on host-a", "rank 1 on host-b", "rank 2 on host-c"]
    assert differences(prints, where) == [
        "env:SGLANG_USE_AITER differs (rank 0 on host-a: 1; rank 1 on host-b: 0; "
        "rank 2 on host-c: <unset>)"
    ]


class _Args:
    """The fields of a ServerArgs record that the fingerprint reads (a msgspec struct)."""

    __struct_fields__ = ("model_path", "max_running_requests", "node_rank", "port", "api_key")

    def __init__(self, model: Path, **values: object) -> None:
        self.model_path, self.max_running_requests = str(model), values.get("mrr", 8)
        self.node_rank, self.port = values.get("rank", 0), values.get("port", 30000)
        self.api_key = values.get("api_key", "s3cret")


def test_fingerprint_compares_server_args_and_weights_not_per_node_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglx_core.profile import load_profile

    model = tmp_path / "model"
    digest = converted_weights(model, shards=1, size=64)  # a real manifest: its weights digest
    monkeypatch.setenv("SGLANG_USE_AITER", "1")
    monkeypatch.setenv("SGLANG_RUN_ID", "launch-1")
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "0")
    profile = load_profile("cpu")
    node0 = fingerprint(profile, _Args(model, rank=0, port=30000))
    assert {"profile", "version:sglang", "version:torch", "env:SGLANG_USE_AITER"} <= set(node0)
    assert node0["arg:max_running_requests"] == "8"
    assert node0["weights"] == digest
    # Per launch and per node by the profile's ranks lists: left out.
    assert not {"env:SGLANG_RUN_ID", "env:SGLANG_CPU_OMP_THREADS_BIND"} & set(node0)
    assert not {"arg:node_rank", "arg:port"} & set(node0)
    # A secret is compared by digest and never shown.
    assert node0["arg:api_key"].startswith("sha256:") and "s3cret" not in node0["arg:api_key"]
    monkeypatch.setenv("SGLANG_RUN_ID", "launch-2")
    monkeypatch.setenv("SGLANG_CPU_OMP_THREADS_BIND", "1")
    assert fingerprint(profile, _Args(model, rank=1, port=30001)) == node0
    other = fingerprint(profile, _Args(model, rank=1, mrr=16))
    assert differences([node0, other], ["rank 0", "rank 1"]) == [
        "arg:max_running_requests differs (rank 0: 8; rank 1: 16)"
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


RANK = """
import os, sys, torch.distributed as dist
from sglx_core.profile import load_profile_file
from sglx_platform.consistency import check_ranks
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=rank,
                        world_size=2)
try:
    check_ranks(load_profile_file(sys.argv[3]))
    print("consistent")
except Exception as exc:
    print(exc)
"""


@pytest.mark.parametrize("same", [True, False])
def test_ranks_with_different_configuration_refuse_to_serve(tmp_path: Path, same: bool) -> None:
    """Two real ranks over torch.distributed (gloo on 127.0.0.1)."""
    profile = bake("cpu", tmp_path / "arch.yaml")
    port = str(_free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(rank), port, str(profile)],
            env={**env, "SGLANG_USE_AITER": "1" if same or rank == 0 else "0"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    if same:
        assert [o.strip() for o in outputs] == ["consistent", "consistent"]
    else:
        for out in outputs:
            assert "[sglx config_refused] ranks disagree on their configuration" in out
            host = socket.gethostname()
            assert f"env:SGLANG_USE_AITER differs (rank 0 on {host}: 1; rank 1 on {host}: 0)" in out


LATE_RANK = """
import sys, time, torch.distributed as dist
from sglx_core.profile import load_profile_file
from sglx_platform.consistency import check_ranks
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{sys.argv[2]}", rank=rank,
                        world_size=2)
if rank == 1:
    time.sleep(30)  # never reaches the check in time
check_ranks(load_profile_file(sys.argv[3]))
print("consistent")
"""


def test_a_rank_that_does_not_answer_fails_the_start_in_bounded_time(tmp_path: Path) -> None:
    profile = bake("cpu", tmp_path / "arch.yaml", ranks={"timeout_s": 5})
    port = str(_free_port())
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", LATE_RANK, str(rank), port, str(profile)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank in (0, 1)
    ]
    started = time.monotonic()
    _, err = procs[0].communicate(timeout=60)
    assert procs[0].returncode == 3
    assert time.monotonic() - started < 30
    assert "did not answer the configuration check within 5 s" in err
    procs[1].kill()
    procs[1].communicate()


def test_cpu_cores_are_split_among_local_ranks() -> None:
    from sglx_core.profile import load_profile
    from sglx_platform.cpu_binding import VARIABLE, apply_default, local_ranks, split_cores

    assert split_cores([0, 1], 2) == "0|1"
    assert split_cores([0, 1, 2, 3, 4, 5, 6, 7], 2) == "0-3|4-7"
    assert split_cores([0, 2, 4], 1) == "0,2,4"
    assert split_cores([0], 2) == "0|0"

    class Args:
        tp_size, pp_size, dp_size, nnodes, enable_dp_attention = 2, 1, 1, 1, False

    assert local_ranks(Args()) == 2
    environ: dict[str, str] = {}
    assert apply_default(load_profile("cpu").ranks, Args(), environ) == environ[VARIABLE]
    assert len(environ[VARIABLE].split("|")) == 2
    kept = {VARIABLE: "0"}
    assert apply_default(load_profile("cpu").ranks, Args(), kept) is None and kept == {
        VARIABLE: "0"
    }
    # Not asked by the profile (ROCm binds devices, not cores), or a single local rank.
    assert apply_default(load_profile("gfx942").ranks, Args(), {}) is None
    Args.nnodes = 2
    assert apply_default(load_profile("cpu").ranks, Args(), {}) is None

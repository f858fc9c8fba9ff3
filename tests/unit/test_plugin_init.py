"""Robust device init (lock, timeout, retries) and the cross-rank configuration check."""

from __future__ import annotations

import fcntl
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers.profiles import bake

from sglx_platform.consistency import differences, fingerprint
from sglx_platform.device_init import LOCK_NAME, host_lock, init_device
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


def test_init_waits_for_another_process_holding_the_host_lock(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import fcntl, sys, time
            f = open({str(tmp_path / LOCK_NAME)!r}, "a")
            fcntl.flock(f, fcntl.LOCK_EX)
            print("locked", flush=True)
            time.sleep(1.5)
        """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    started = time.monotonic()
    init_device(lambda: None, "fixture device 0")  # waits ~1.5 s, then runs
    assert time.monotonic() - started > 0.5
    holder.wait(timeout=10)


def test_a_lock_held_past_the_timeout_is_an_init_hang(tmp_path: Path) -> None:
    path = tmp_path / LOCK_NAME
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        with pytest.raises(PlatformError) as caught, host_lock(path, timeout_s=0.5):
            pass
    assert caught.value.failure is FailureClass.INIT_HANG
    assert "fuser" in caught.value.fix


def test_fingerprints_name_what_differs() -> None:
    prints = [
        {"profile": "a", "env:SGLANG_USE_AITER": "1"},
        {"profile": "a", "env:SGLANG_USE_AITER": "0"},
        {"profile": "a"},
    ]
    assert differences(prints) == [
        "env:SGLANG_USE_AITER differs (rank 0: 1, rank 1: 0, rank 2: <unset>)"
    ]


def test_fingerprint_covers_profile_versions_and_code_path_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglx.profile import load_profile

    monkeypatch.setenv("SGLANG_USE_AITER", "1")
    print_ = fingerprint(load_profile("cpu"))
    assert {"profile", "version:sglang", "version:torch", "env:SGLANG_USE_AITER"} <= set(print_)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


RANK = """
import os, sys, torch.distributed as dist
from sglx.profile import load_profile_file
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
            assert "env:SGLANG_USE_AITER differs (rank 0: 1, rank 1: 0)" in out

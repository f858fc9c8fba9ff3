"""sglx-serve refuses a node-local JIT cache folder that is not the server's own (issue 27).

The server loads code from the folder (Triton's and AITER's caches live there), so it must be
a real folder, owned by the server's uid, mode 0700; anything else stops `sglx-serve` with exit
2 before anything starts, naming the host folder (SGLX_JIT_CACHE_HOST) and the fix.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from helpers import model_configs
from helpers.profiles import bake

from sglx_core.errors import SglxError
from sglx_core.jit_cache import HOST_ENV
from sglx_core.profile import load_profile
from sglx_runtime import jit_cache, serve

HOST_FOLDER = "/var/cache/sglx/jit/" + "ab" * 32
UID, GID = os.geteuid(), os.getegid()
FIX = f"chown {UID}:{GID} {HOST_FOLDER} && chmod 0700 {HOST_FOLDER}"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The baked profile's container.jit_cache.target, here a folder of the test (not made)."""
    folder = tmp_path / "var-cache-sglx"
    jit = {**load_profile("cpu").container.jit_cache.model_dump(), "target": str(folder)}
    monkeypatch.setenv("SGLX_PROFILE", str(bake("cpu", tmp_path / "arch.yaml",
                                                container={"jit_cache": jit})))  # fmt: skip
    monkeypatch.setenv(HOST_ENV, HOST_FOLDER)
    return folder


def refusal() -> SglxError:
    with pytest.raises(SglxError) as caught:
        jit_cache.checked_cache_root()
    assert caught.value.code == "jit_cache_unsafe"
    assert caught.value.hint is not None and "on the host: " in caught.value.hint
    return caught.value


def test_a_private_folder_is_the_cache_root(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    assert jit_cache.checked_cache_root() == cache


@pytest.mark.parametrize("mode", [0o755, 0o777, 0o770, 0o1700])
def test_any_other_mode_is_refused_naming_the_host_folder_and_the_fix(
    cache: Path, mode: int
) -> None:
    cache.mkdir()
    cache.chmod(mode)
    error = refusal()
    assert f"the JIT cache folder {HOST_FOLDER} (mounted at {cache}) has mode {mode:04o}" in (
        error.message
    )
    assert "the server loads code from it" in error.message
    assert error.hint is not None and FIX in error.hint


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a folder to another uid needs root")
def test_another_owner_is_refused(cache: Path) -> None:
    cache.mkdir(mode=0o700)
    os.chown(cache, 4321, -1)
    error = refusal()
    assert f"is owned by uid 4321, not the server's uid {UID}" in error.message
    assert error.hint is not None and FIX in error.hint


def test_a_link_is_refused_even_to_a_private_folder(cache: Path, tmp_path: Path) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    cache.symlink_to(private)
    error = refusal()
    assert "is a symbolic link, not a folder" in error.message
    assert error.hint is not None and f"rm {HOST_FOLDER} && mkdir {HOST_FOLDER} && {FIX}" in (
        error.hint
    )


def test_a_missing_folder_is_refused(cache: Path) -> None:
    error = refusal()
    assert "does not exist" in error.message
    assert error.hint is not None and f"mkdir -p {HOST_FOLDER} && {FIX}" in error.hint


def test_without_the_host_variable_the_container_path_is_named(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(HOST_ENV)
    cache.mkdir(mode=0o755)
    error = refusal()
    assert error.message.startswith(f"the JIT cache folder {cache} has mode 0755")
    assert error.hint is not None and f"chown {UID}:{GID} {cache} && chmod 0700 {cache}" in (
        error.hint
    )


def test_sglx_serve_exits_2_before_anything_starts(
    cache: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No server, no preflight: the refusal comes before either (and before any sglang import)."""

    def started(*_: object, **__: object) -> None:
        raise AssertionError("sglx-serve started something after the refusal")

    cache.mkdir()
    cache.chmod(0o777)
    monkeypatch.setenv("SGLX_MODEL", str(model_configs.write_model(tmp_path / "m", "qwen2.5-0.5b")))
    monkeypatch.setattr(subprocess, "Popen", started)
    monkeypatch.setattr(serve, "_preflight", started)
    monkeypatch.setattr(serve, "state_file", lambda: tmp_path / "sglx-serve.json")
    monkeypatch.setenv("SGLX_SERVING_PROFILE", "off")
    for name in ("SGLX_PREFLIGHT", "SGLX_SKIP_PREFLIGHT"):
        monkeypatch.delenv(name, raising=False)
    capsys.readouterr()
    assert serve.main([]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    assert "sglx-serve: refused before starting the server: the JIT cache folder" in err
    assert "has mode 0777, not 0700" in err and FIX in err
    assert not (tmp_path / "sglx-serve.json").exists()

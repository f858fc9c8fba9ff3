"""`sglx wheels verify` remembers verified hashes outside the wheelhouse, and that record cannot
be fooled: a same-size edit with its mtime set back, a forged or edited cache entry, an old
in-wheelhouse cache and a loose key all end in the wheel being hashed again."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.images_copy import copy_images

from sglx.verified_cache import KEY_NAME, RACY_MARGIN_NS
from sglx.wheels import lockfile
from sglx.wheels.steps import lock_path
from sglx_core.profile import load_profile

JsonRunner = Callable[..., tuple[int, dict[str, Any]]]
CliRunner = Callable[..., tuple[int, str, str]]
WHEELS = {
    "alpha-1.0-py3-none-any.whl": b"alpha wheel",
    "beta-1.0-py3-none-any.whl": b"beta wheel",
    "gamma-1.0-py3-none-any.whl": b"gamma wheel",
}
BETA = "beta-1.0-py3-none-any.whl"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("SGLX_CACHE_DIR", str(folder))
    return folder


@pytest.fixture
def house(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache: Path) -> Path:
    """A three-wheel cpu lock (in a private copy of images/) and a wheelhouse matching it, old
    enough (past the racy margin) for its hashes to be remembered."""
    images = copy_images(tmp_path)
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(images))
    folder = tmp_path / "wheelhouse"
    folder.mkdir()
    wheels = []
    for name, data in WHEELS.items():
        (folder / name).write_bytes(data)
        wheels.append(
            lockfile.Wheel(name.split("-")[0], "1.0", hashlib.sha256(data).hexdigest(), name)
        )
    profile = load_profile("cpu")
    inputs = lockfile.inputs_digest(profile)
    header = {"arch": "cpu", "inputs": inputs, "wheels": len(wheels)}
    lock = lockfile.Lock("cpu", inputs, header, tuple(wheels))
    lock_path("cpu").write_text(lockfile.render(lock, "images/cpu/arch.yaml"))
    time.sleep(RACY_MARGIN_NS / 1e9 + 0.2)
    return folder


def _verify(sglx_json: JsonRunner, house: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    return sglx_json("wheels", "verify", "--arch", "cpu", "--wheelhouse", str(house), *extra)


def _same_size_edit_keeping_mtime(path: Path) -> None:
    st = path.stat()
    data = path.read_bytes()
    path.write_bytes(bytes([data[0] ^ 1]) + data[1:])
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size
    assert path.stat().st_mtime_ns == st.st_mtime_ns


def _entries(cache: Path) -> dict[str, Any]:
    entries: dict[str, Any] = json.loads((cache / "wheels-verified.json").read_text())["entries"]
    return entries


def _warm(sglx_json: JsonRunner, house: Path) -> None:
    code, env = _verify(sglx_json, house)
    assert code == 0, env
    assert sorted(env["data"]["hashed"]) == sorted(WHEELS)
    code, env = _verify(sglx_json, house)
    assert code == 0, env
    assert env["data"]["hashed"] == [] and sorted(env["data"]["cached"]) == sorted(WHEELS)


def _assert_beta_caught(code: int, env: dict[str, Any], *, hashed: list[str]) -> None:
    assert code == 1
    assert env["status"] == "findings"
    (finding,) = env["findings"]
    assert finding["code"] == "wheel_tampered"
    assert f"{BETA}: sha256 " in finding["message"]
    assert "does not match the lock's" in finding["message"]
    assert sorted(env["data"]["hashed"]) == sorted(hashed)


def test_a_second_verify_is_vouched_for_by_a_private_cache_outside_the_wheelhouse(
    sglx: CliRunner, sglx_json: JsonRunner, house: Path, cache: Path
) -> None:
    _warm(sglx_json, house)
    code, out, err = sglx("wheels", "verify", "--arch", "cpu", "--wheelhouse", str(house))
    assert code == 0
    assert "3 of 3 wheels match the lock (0 hashed now, 3 vouched for by the verified cache)" in out
    assert "Traceback" not in out + err
    assert sorted(p.name for p in house.iterdir()) == sorted(WHEELS)  # nothing written into it
    for name in ("wheels-verified.json", KEY_NAME):
        assert stat.S_IMODE((cache / name).stat().st_mode) == 0o600
    assert set(_entries(cache)) == {str((house / n).resolve()) for n in WHEELS}


def test_a_same_size_edit_with_its_mtime_restored_is_caught(
    sglx_json: JsonRunner, house: Path
) -> None:
    _warm(sglx_json, house)
    _same_size_edit_keeping_mtime(house / BETA)
    code, env = _verify(sglx_json, house)
    _assert_beta_caught(code, env, hashed=[BETA])
    assert sorted(env["data"]["cached"]) == sorted(set(WHEELS) - {BETA})


def test_a_forged_or_edited_cache_entry_is_not_trusted(
    sglx_json: JsonRunner, house: Path, cache: Path
) -> None:
    _warm(sglx_json, house)
    beta = house / BETA
    beta.write_bytes(b"evil wheel!")  # same size, new ctime
    path = cache / "wheels-verified.json"
    document = json.loads(path.read_text())
    entry = document["entries"][str(beta.resolve())]
    st = beta.stat()
    # Edited: the fields now describe the tampered file, the MAC is the old one.
    entry.update(ino=st.st_ino, size=st.st_size, mtime_ns=st.st_mtime_ns, ctime_ns=st.st_ctime_ns)
    path.write_text(json.dumps(document))
    code, env = _verify(sglx_json, house)
    _assert_beta_caught(code, env, hashed=[BETA])
    # Forged: a MAC computed under a key that is not this user's.
    message = json.dumps(
        [1, str(beta.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns,
         st.st_ctime_ns, hashlib.sha256(WHEELS[BETA]).hexdigest(), "x"],
        separators=(",", ":"),
    )  # fmt: skip
    entry["mac"] = hmac.new(b"k" * 32, message.encode(), hashlib.sha256).hexdigest()
    document["entries"][str(beta.resolve())] = entry
    path.write_text(json.dumps(document))
    code, env = _verify(sglx_json, house)
    _assert_beta_caught(code, env, hashed=[BETA])


def test_the_old_in_wheelhouse_cache_does_not_count(
    sglx: CliRunner, house: Path, cache: Path
) -> None:
    beta = house / BETA
    beta.write_bytes(b"evil wheel!")
    st = beta.stat()
    forged = {BETA: [st.st_size, st.st_mtime_ns, hashlib.sha256(WHEELS[BETA]).hexdigest()]}
    (house / ".sglx-verified.json").write_text(json.dumps(forged))
    code, out, err = sglx("wheels", "verify", "--arch", "cpu", "--wheelhouse", str(house))
    assert code == 1
    assert "2 of 3 wheels match the lock (3 hashed now, 0 vouched for" in out
    assert f"finding [wheel_tampered] {beta}: {BETA}: sha256" in out
    assert "ignored .sglx-verified.json, an old in-wheelhouse cache that is no" in out
    assert "Traceback" not in out + err


def test_full_rehashes_every_wheel_and_trusts_no_cache(
    sglx: CliRunner, sglx_json: JsonRunner, house: Path
) -> None:
    _warm(sglx_json, house)
    code, env = _verify(sglx_json, house, "--full")
    assert code == 0
    assert env["data"]["full"] is True
    assert sorted(env["data"]["hashed"]) == sorted(WHEELS)
    assert env["data"]["cached"] == [] and env["data"]["cache"] is None
    code, out, err = sglx("wheels", "verify", "--arch", "cpu", "--wheelhouse", str(house), "--full")
    assert code == 0
    assert "3 of 3 wheels match the lock (all hashed now (--full))" in out
    assert "Traceback" not in out + err


def test_a_key_others_can_read_is_replaced_which_voids_every_entry(
    sglx_json: JsonRunner, house: Path, cache: Path
) -> None:
    _warm(sglx_json, house)
    key = cache / KEY_NAME
    old = key.read_bytes()
    key.chmod(0o644)
    code, env = _verify(sglx_json, house)
    assert code == 0
    assert sorted(env["data"]["hashed"]) == sorted(WHEELS) and env["data"]["cached"] == []
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert key.read_bytes() != old


@pytest.mark.parametrize("content", [b"\xff\xfe garbage", b"[1, 2]", b'{"version": 1}'])
def test_a_damaged_cache_file_only_costs_hashing_again(
    sglx_json: JsonRunner, house: Path, cache: Path, content: bytes
) -> None:
    _warm(sglx_json, house)
    (cache / "wheels-verified.json").write_bytes(content)
    code, env = _verify(sglx_json, house)
    assert code == 0 and env["errors"] == []
    assert sorted(env["data"]["hashed"]) == sorted(WHEELS)


def test_a_file_changed_just_before_hashing_is_not_remembered(
    sglx_json: JsonRunner, house: Path
) -> None:
    (house / BETA).write_bytes(WHEELS[BETA])  # rewritten now: within the racy margin
    code, env = _verify(sglx_json, house)
    assert code == 0 and sorted(env["data"]["hashed"]) == sorted(WHEELS)
    code, env = _verify(sglx_json, house)
    assert code == 0 and env["data"]["hashed"] == [BETA]

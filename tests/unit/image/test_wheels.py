"""Wheel locks: derived from the profile, refused when stale or when they would replace the
base's packages; wheelhouses checked wheel by wheel."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.images_copy import copy_images, edit_yaml

from sglx.progress import Progress
from sglx.wheels import lockfile, wheelhouse
from sglx.wheels.resolve import _prune
from sglx.wheels.steps import load_lock
from sglx.wheels.target import target_of
from sglx_core.errors import SglxError
from sglx_core.profile import known_arches, load_profile

QUIET = Progress("test", quiet=True)


@pytest.fixture
def images(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = copy_images(tmp_path)
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(root))
    return root


def test_every_committed_lock_matches_its_profile() -> None:
    for arch in known_arches():
        lock = load_lock(load_profile(arch))  # raises when stale or replacing the base
        assert lock.wheels, arch


def test_every_lock_records_the_upload_cutoff_it_was_resolved_with() -> None:
    for arch in known_arches():
        cutoff = load_lock(load_profile(arch)).header.get(lockfile.UPLOADED_PRIOR_TO)
        assert isinstance(cutoff, str), arch
        assert lockfile.upload_cutoff(cutoff, what="the cutoff") == cutoff, arch


def test_a_lock_without_a_cutoff_is_a_finding_not_a_resolution(
    images: Path, sglx: Callable[..., tuple[int, str, str]]
) -> None:
    path = images.parent / "bundles" / "locks" / "cpu.txt"
    unpinned = path.read_text().replace(f', "{lockfile.UPLOADED_PRIOR_TO}": ', ', "_": ')
    path.write_text(unpinned)
    code, out, err = sglx("wheels", "lock", "--arch", "cpu", "--check")
    assert code == 1, out + err
    assert "records no uploaded_prior_to cutoff" in out + err
    assert path.read_text() == unpinned  # --check writes nothing
    assert "sglx wheels lock --arch cpu" in out + err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--uploaded-prior-to", "last tuesday"], "'last tuesday' is not an ISO 8601 time"),
        (["--drift"], "--drift needs --check"),
    ],
)
def test_lock_usage_errors_name_the_fix(
    sglx: Callable[..., tuple[int, str, str]], argv: list[str], said: str
) -> None:
    code, out, err = sglx("wheels", "lock", "--arch", "cpu", *argv)
    assert code == 2, out + err
    assert said in err
    assert "Traceback" not in err


def test_cutoffs_are_normalised_to_utc_seconds() -> None:
    assert lockfile.upload_cutoff("2026-11-26T16:00:00+01:00", what="x") == "2026-11-26T15:00:00Z"
    assert lockfile.upload_cutoff("2026-11-26", what="x") == "2026-11-26T00:00:00Z"


def test_vendor_locks_leave_the_bases_torch_alone() -> None:
    for arch in ("gfx942", "gfx950", "gfx1151", "kunlun"):
        names = load_lock(load_profile(arch)).names()
        assert not names & {"torch", "triton", "torchvision", "nvidia-cublas"}, arch
        assert {"fastapi", "transformers", "orjson"} <= names


def test_cpu_lock_carries_sglang_and_its_torch_pins() -> None:
    lock = load_lock(load_profile("cpu"))
    versions = {lockfile.canonical(w.name): w.version for w in lock.wheels}
    assert versions["sglang"] == "0.5.23"
    assert versions["torch"] == "2.14.1"
    assert versions["torchvision"] == "0.29.1"
    assert "nvidia-cuda-runtime" in versions  # reached through cuda-toolkit[cudart]
    assert lock.header["sglang"] == "pinned"


def test_an_upstream_base_keeps_sglang_out_of_the_lock() -> None:
    """gfx942's base (upstream's SGLang ROCm image) ships sglang: the lock neither pins it nor
    asks the site to build it."""
    lock = load_lock(load_profile("gfx942"))
    assert lock.header["sglang"] == "unpinned"
    assert not any(w.name == "sglang" for w in lock.wheels)
    assert not any("--find-links DIR" in note for note in lock.notes)


def test_a_requirement_the_base_provides_is_refused(images: Path) -> None:
    from sglx.wheels.resolve import resolve

    edit_yaml(images / "gfx942" / "arch.yaml", {"python": {"requirements": {"torch": ""}}})
    with pytest.raises(SglxError) as caught:
        resolve(
            load_profile("gfx942"),
            find_links=[],
            uploaded_prior_to=lockfile.now_cutoff(),
            progress=QUIET,
        )
    assert caught.value.code == "lock_replaces_base"
    assert "never replace the base's packages" in caught.value.message


def test_a_lock_that_would_replace_the_bases_torch_is_refused(images: Path) -> None:
    path = images.parent / "bundles" / "locks" / "gfx942.txt"
    path.write_text(
        path.read_text() + "# torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl\n"
        "torch==2.14.1 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    )
    with pytest.raises(SglxError) as caught:
        load_lock(load_profile("gfx942"))
    assert caught.value.code == "lock_replaces_base"
    assert "would replace torch" in caught.value.message


def test_a_profile_change_makes_the_lock_stale(images: Path) -> None:
    edit_yaml(images / "shared" / "base.yaml", {"python": {"requirements": {"rich": ""}}})
    with pytest.raises(SglxError) as caught:
        load_lock(load_profile("cpu"))
    assert caught.value.code == "lock_stale"
    assert "sglx wheels lock --arch cpu" in (caught.value.hint or "")


def test_lock_round_trips_through_its_text_format(tmp_path: Path) -> None:
    lock = load_lock(load_profile("kunlun"))
    path = tmp_path / "kunlun.txt"
    path.write_text(lockfile.render(lock, "images/kunlun/arch.yaml"))
    again = lockfile.parse(path)
    assert again.wheels == lock.wheels
    assert again.digest == lock.digest


def test_target_is_the_images_python_and_glibc_not_this_machines() -> None:
    target = target_of(load_profile("gfx942"))
    assert target.python_version == "3.12"
    assert target.platforms[0] == "manylinux_2_35_x86_64"  # the upstream bases' Ubuntu 22.04
    assert target.platforms[-1] == "manylinux2014_x86_64"


def _item(name: str, requires: list[str], extras: list[str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "version": "1", "requires_dist": requires},
        "requested_extras": extras,
    }


def test_pruning_follows_extras_and_stops_at_provided_packages() -> None:
    items = [
        _item("app", ["kit[fast]", "torch", 'winonly; sys_platform == "win32"']),
        _item("kit", ['fastlib; extra == "fast"', 'slowlib; extra == "slow"']),
        _item("fastlib", []),
        _item("slowlib", []),
        _item("winonly", []),
        _item("torch", ["nvidia-cublas"]),
        _item("nvidia-cublas", []),
    ]
    target = target_of(load_profile("gfx942"))
    kept = [
        i["metadata"]["name"]
        for i in _prune(items, roots={"app"}, provided={"torch"}, target=target)
    ]
    assert kept == ["app", "fastlib", "kit"]


def _lock_of(files: dict[str, bytes], folder: Path) -> lockfile.Lock:
    wheels = []
    for name, data in files.items():
        (folder / name).write_bytes(data)
        wheels.append(
            lockfile.Wheel(name.split("-")[0], "1.0", hashlib.sha256(data).hexdigest(), name)
        )
    return lockfile.Lock("cpu", "sha256:" + "0" * 64, {}, tuple(wheels))


def test_a_missing_or_tampered_wheel_is_named(tmp_path: Path) -> None:
    lock = _lock_of(
        {"alpha-1.0-py3-none-any.whl": b"alpha", "beta-1.0-py3-none-any.whl": b"b"}, tmp_path
    )
    wheelhouse.require_complete(lock, tmp_path, QUIET)  # complete: no error
    (tmp_path / "alpha-1.0-py3-none-any.whl").unlink()
    (tmp_path / "beta-1.0-py3-none-any.whl").write_bytes(b"evil")
    with pytest.raises(SglxError) as caught:
        wheelhouse.require_complete(lock, tmp_path, QUIET)
    assert "missing: alpha-1.0-py3-none-any.whl is not in" in caught.value.message
    assert "tampered: beta-1.0-py3-none-any.whl: sha256" in caught.value.message
    assert caught.value.code == "wheelhouse_mismatch"

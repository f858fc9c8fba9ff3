"""One install record for the three doors (issue 23, item 3): a tiny bundle installed by its
install.sh (this machine's sh and coreutils, the real engine) is seen as installed by `sglx
bundle install`, and the reverse; a chunk edited after the install (its mtime set back) is not
taken as verified by either; and the bundle_install role (real ansible-playbook, local
connection) skips a bundle the record says is installed, writes the record through install.sh
when it installs one, and itself where an older install.sh writes none. Every image and folder
is removed when its test ends."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.bundles import import_tiny_image

from sglx.bundle import record

pytestmark = pytest.mark.docker

JsonRunner = Callable[..., tuple[int, dict[str, Any]]]
ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent


def remove_image(docker: Any, ref: str) -> None:
    from docker.errors import ImageNotFound

    with contextlib.suppress(ImageNotFound):
        docker.images.remove(ref, force=True)


@pytest.fixture(scope="module")
def pristine(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str]]:
    from sglx.cli import main

    tag = f"sglx-test/install-record:{run_id}"
    image_id = import_tiny_image(docker, tag, blob_bytes=1_000_000)
    out = tmp_path_factory.mktemp("record") / "bundle"
    args = ["bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(out)]
    assert main([*args, "--chunk-size", "256KiB", "--no-scan", "-q"]) == 0
    remove_image(docker, image_id)
    yield out, image_id
    remove_image(docker, image_id)
    shutil.rmtree(out.parent, ignore_errors=True)


@pytest.fixture
def bundle(pristine: tuple[Path, str], tmp_path: Path, docker: Any) -> Iterator[tuple[Path, str]]:
    """A copy of the bundle, on a site whose engine lacks its image."""
    source, image_id = pristine
    copy = tmp_path / "bundle"
    shutil.copytree(source, copy)
    yield copy, image_id
    remove_image(docker, image_id)


def install_sh(bundle: Path, state: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(bundle / "install.sh"), "--no-scan", "--state", str(state)],
        capture_output=True, text=True, timeout=300, check=False, env={**os.environ, **env},
    )  # fmt: skip


def the_record(state: Path) -> tuple[Path, dict[str, Any]]:
    [path] = state.glob("sha256-*.json")
    return path, json.loads(path.read_text())


def test_a_bundle_installed_by_install_sh_is_installed_for_sglx(
    bundle: tuple[Path, str], tmp_path: Path, sglx_json: JsonRunner
) -> None:
    folder, image_id = bundle
    state = tmp_path / "state"
    done = install_sh(folder, state)
    assert done.returncode == 0, done.stderr
    assert "install.sh: loading sglx-test/install-record" in done.stderr
    path, written = the_record(state)
    digest = "sha256:" + hashlib.sha256((folder / "bundle.json").read_bytes()).hexdigest()
    assert path.name == record.file_name(digest)
    # One format: install.sh's text is exactly what sglx renders from the same fields.
    assert path.read_text() == record.render(written)
    assert list(written) == list(record.FIELDS)
    assert written["door"] == "install.sh" and written["image_id"] == image_id
    assert written["bundle_path"] == str(folder.resolve())
    assert record.installed(written, digest)

    code, envelope = sglx_json(
        "bundle", "install", "--no-scan", str(folder), "--state", str(state), "-q"
    )
    assert code == 0, envelope
    data = envelope["data"]
    assert data["redone"] == []
    assert data["steps"]["verify"]["detail"].startswith("0 files hashed")
    assert data["installed_before"]["door"] == "install.sh"
    assert data["record"] == str(path)


def test_a_bundle_installed_by_sglx_is_installed_for_install_sh(
    bundle: tuple[Path, str], tmp_path: Path, sglx_json: JsonRunner
) -> None:
    folder, image_id = bundle
    state = tmp_path / "state"
    code, envelope = sglx_json(
        "bundle", "install", "--no-scan", str(folder), "--state", str(state), "-q"
    )
    assert code == 0, envelope
    assert envelope["data"]["installed_before"] is None
    path, written = the_record(state)
    assert path.read_text() == record.render(written)
    assert written["door"] == "sglx" and written["image_id"] == image_id

    done = install_sh(folder, state)
    assert done.returncode == 0, done.stderr
    # bundle.json names the record, so sglx keeps no stamp of it: the one file hashed again.
    hasher = "openssl" if shutil.which("openssl") else "sha256sum"
    reused = len(written["verified"])
    assert (
        f"install.sh: checking 1 files against SHA256SUMS ({hasher}, {reused} unchanged since "
        f"verified, by {path})"
    ) in done.stderr
    assert f"install.sh: the engine already has image {image_id}" in done.stderr
    assert f"already installed (by sglx at {written['installed_at']})" in done.stderr
    _, rewritten = the_record(state)  # with the stamp of bundle.json added
    assert rewritten == {**written, "verified": rewritten["verified"]}
    assert set(rewritten["verified"]) == {*written["verified"], "bundle.json"}


def flip_keeping_mtime(path: Path) -> None:
    """An edit that keeps the size and sets the mtime back: only the ctime tells."""
    before = path.stat()
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


def test_a_record_is_not_forged_by_editing_the_bundle(
    bundle: tuple[Path, str], tmp_path: Path, sglx_json: JsonRunner
) -> None:
    folder, _ = bundle
    state = tmp_path / "state"
    assert install_sh(folder, state).returncode == 0
    _, written = the_record(state)
    chunk = "image/image.tar.001"
    assert chunk in written["verified"]
    flip_keeping_mtime(folder / chunk)

    code, envelope = sglx_json(
        "bundle", "install", "--no-scan", str(folder), "--state", str(state), "-q"
    )
    assert code == 1
    assert [f["path"] for f in envelope["findings"]] == [chunk]
    done = install_sh(folder, state)
    assert done.returncode == 1
    assert f"{chunk}: FAILED" in done.stderr
    assert "already installed" not in done.stderr


def role_install(bundle: Path, state: Path, work: Path) -> subprocess.CompletedProcess[str]:
    """The bundle_install role's main entry (preflight, install; no copy) on localhost."""
    playbook = work / "install.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Install a bundle", "hosts": "localhost", "connection": "local",
        "gather_facts": False,
        "roles": [{"role": "bundle_install", "bundle_install_path": str(bundle),
                   "bundle_install_state_dir": str(state), "bundle_install_no_scan": True,
                   "bundle_install_docker": shutil.which("docker")}],
    }]))  # fmt: skip
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip


def install_task(done: subprocess.CompletedProcess[str]) -> str:
    """What ansible-playbook printed for the install.sh task: ok, changed or skipping."""
    after = done.stdout.split("Verify every file and load the image (install.sh)", 1)[1]
    return after.split("\n", 2)[1].split(":", 1)[0]


def test_the_role_reads_and_writes_the_same_record(
    bundle: tuple[Path, str], tmp_path: Path, sglx_json: JsonRunner
) -> None:
    folder, image_id = bundle
    state = tmp_path / "state"
    assert (
        sglx_json("bundle", "install", "--no-scan", str(folder), "--state", str(state), "-q")[0]
        == 0
    )
    done = role_install(folder, state, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert install_task(done) == "skipping"

    path, _ = the_record(state)
    path.unlink()
    done = role_install(folder, state, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    assert install_task(done) == "changed"
    _, written = the_record(state)
    assert written["door"] == "bundle_install" and written["image_id"] == image_id
    code, envelope = sglx_json(
        "bundle", "install", "--no-scan", str(folder), "--state", str(state), "-q"
    )
    assert code == 0
    assert envelope["data"]["installed_before"]["door"] == "bundle_install"
    assert envelope["data"]["redone"] == []


def test_the_role_writes_the_record_where_an_older_install_sh_does_not(tmp_path: Path) -> None:
    """A bundle whose install.sh predates the record (here one that does nothing)."""
    from helpers.bundles import hand_bundle

    archive = tmp_path / "image.tar"
    archive.write_bytes(os.urandom(8192))
    folder = hand_bundle(tmp_path / "bundle", archive, {"install.sh": b"#!/bin/sh\n"}, 4096)
    state = tmp_path / "state"
    done = role_install(folder, state, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    _, written = the_record(state)
    digest = "sha256:" + hashlib.sha256((folder / "bundle.json").read_bytes()).hexdigest()
    assert record.installed(written, digest)
    assert set(written) == set(record.FIELDS)
    assert (written["door"], written["verified"], written["steps"]) == ("bundle_install", {}, {})

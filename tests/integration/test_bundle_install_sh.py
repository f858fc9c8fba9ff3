"""`install.sh` on a host without Python: a Debian container (the session's debootstrapped cpu
base with every Python file removed) that has only sh, coreutils and the docker CLI of this
machine (bind-mounted, talking to this engine through its socket)."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import import_tiny_image

from sglx.scan.layers import IterStream

PYTHON = re.compile(r"^(\./)?(usr/(local/)?(bin|lib)/(python|pydoc|py3)|usr/share/python)")


def remove_image(docker: Any, ref: str) -> None:
    from docker.errors import ImageNotFound

    with contextlib.suppress(ImageNotFound):
        docker.images.remove(ref, force=True)


@pytest.fixture(scope="module")
def no_python_debian(
    docker: Any, cpu_base: str, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The cpu base's files minus every python3 file, imported as an image."""
    container = docker.containers.create(cpu_base, command=["/bin/true"], network_disabled=True)
    rootfs = tmp_path_factory.mktemp("nopython") / "rootfs.tar"
    try:
        source = io.BufferedReader(IterStream(iter(container.export(chunk_size=1 << 20))))
        with (
            tarfile.open(fileobj=source, mode="r|") as src,
            tarfile.open(rootfs, "w") as dst,
        ):
            for member in src:
                if PYTHON.match(member.name):
                    continue
                dst.addfile(member, src.extractfile(member) if member.isfile() else None)
    finally:
        container.remove(force=True)
    tag = f"sglx-test/no-python-debian:{run_id}"
    docker.api.import_image_from_file(str(rootfs), repository=tag.split(":")[0], tag=run_id)
    rootfs.unlink()
    yield tag
    remove_image(docker, tag)


@pytest.fixture(scope="module")
def tiny_bundle(
    docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Path, str]]:
    from sglx.cli import main

    tag = f"sglx-test/bundle-sh:{run_id}"
    image_id = import_tiny_image(docker, tag)
    out = tmp_path_factory.mktemp("sh") / "bundle"
    args = ["bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(out)]
    assert main([*args, "--chunk-size", "1MiB", "--no-scan", "-q"]) == 0
    remove_image(docker, image_id)
    yield out, image_id
    remove_image(docker, image_id)
    shutil.rmtree(out.parent, ignore_errors=True)


def run_sh(docker: Any, image: str, bundle: Path, script: str) -> tuple[int, str]:
    cli = shutil.which("docker")
    assert cli is not None, "the docker CLI is needed on this machine"
    container = docker.containers.run(
        image,
        ["/bin/sh", "-c", script],
        detach=True,
        name=f"sglx-test-install-sh-{uuid.uuid4().hex[:8]}",
        volumes={
            "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"},
            str(Path(cli).resolve()): {"bind": "/usr/local/bin/docker", "mode": "ro"},
            str(bundle): {"bind": "/bundle", "mode": "ro"},
        },
    )
    try:
        code = int(container.wait(timeout=300)["StatusCode"])
        return code, container.logs().decode()
    finally:
        container.remove(force=True)


def test_install_sh_installs_on_a_host_without_python(
    docker: Any, no_python_debian: str, tiny_bundle: tuple[Path, str], tmp_path: Path
) -> None:
    from docker.errors import ImageNotFound

    bundle, image_id = tiny_bundle
    code, logs = run_sh(
        docker,
        no_python_debian,
        bundle,
        "if command -v python3 || ls /usr/bin/python* 2>/dev/null; then exit 97; fi; "
        "sh /bundle/install.sh --no-scan",
    )
    assert code == 0, logs
    # The cpu base has openssl (Debian's ca-certificates depends on it), so install.sh hashes
    # with it; tests/unit/bundle/test_install_sh_hasher.py runs the sha256sum fallback.
    assert re.search(
        r"^install\.sh: checking \d+ files against SHA256SUMS \(openssl\)$", logs, re.M
    )
    assert "install.sh: all files match" in logs
    assert "loading sglx-test/bundle-sh" in logs
    assert re.search(
        r"^docker run -d --restart on-failure --name sglx-cpu .* --shm-size 1g "
        r".*-e HF_HUB_OFFLINE=1",
        logs,
        re.M,
    )
    assert docker.images.get(image_id).id == image_id

    code, logs = run_sh(docker, no_python_debian, bundle, "sh /bundle/install.sh --no-scan")
    assert code == 0, logs
    assert f"the engine already has image {image_id}: not loading it again" in logs

    damaged = tmp_path / "damaged"
    shutil.copytree(bundle, damaged)
    chunk = damaged / "image/image.tar.001"
    chunk.write_bytes(chunk.read_bytes()[:-1] + b"!")
    (damaged / "stray.txt").write_text("not listed")
    docker.images.remove(image_id, force=True)
    code, logs = run_sh(docker, no_python_debian, damaged, "sh /bundle/install.sh --no-scan")
    assert code == 1, logs
    assert "image/image.tar.001: FAILED" in logs
    assert "files of the bundle do not match SHA256SUMS" in logs
    with pytest.raises(ImageNotFound):
        docker.images.get(image_id)
    chunk.write_bytes((bundle / "image/image.tar.001").read_bytes())
    code, logs = run_sh(
        docker, no_python_debian, damaged, "sh /bundle/install.sh --no-scan --check"
    )
    assert code == 1, logs
    assert "files not listed in SHA256SUMS: stray.txt" in logs

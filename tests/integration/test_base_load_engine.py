"""`sglx base load` against the real engine: a real `docker save` of a tiny `docker import`-ed
image and a hand-made OCI layout load and are tagged; an archive the engine refuses is an
error that says so, and leaves nothing tagged; a base that is not the pinned one never loads.

Every image carries the session's run id and is removed at the end."""

from __future__ import annotations

import hashlib
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.engine_fixtures import has_image, remove_images
from helpers.image_archives import (
    docker_members,
    file_member,
    image_id,
    layer_tar,
    oci_members,
    with_sidecar,
    write_tar,
)
from helpers.images_copy import copy_images, edit_yaml

pytestmark = pytest.mark.docker
CliRunner = Callable[..., tuple[int, str, str]]


@pytest.fixture
def names(docker: Any, run_id: str) -> Iterator[Callable[[str], str]]:
    """Image references unique to this run, each removed (by tag and by id) afterwards."""
    made: list[str] = []

    def name(stem: str) -> str:
        made.append(f"sglx-test/base-load-{stem}:{run_id}")
        return made[-1]

    yield name
    remove_images(docker, *made)


def test_a_docker_save_of_an_imported_image_loads_and_is_tagged(
    sglx: CliRunner, docker: Any, names: Callable[[str], str], tmp_path: Path
) -> None:
    source, extra = names("imported"), names("extra")
    rootfs = tmp_path / "rootfs.tar"
    rootfs.write_bytes(layer_tar(b"tiny\n"))
    subprocess.run(["docker", "import", str(rootfs), source], check=True, capture_output=True)
    archive = tmp_path / "saved.tar"
    subprocess.run(["docker", "save", "-o", str(archive), source], check=True)
    expected = docker.images.get(source).id
    docker.images.remove(source, force=True)
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()

    code, out, err = sglx("base", "load", str(archive), "--sha256", digest, "-q", "--tag", extra)
    assert code == 0, err
    assert expected in out and extra in out
    assert "Traceback" not in out + err
    assert docker.images.get(extra).id == expected
    assert not has_image(docker, source)  # --tag replaces the archive's own tag
    code, out, err = sglx("base", "load", str(archive), "--sha256", digest, "-q")
    assert code == 0, err
    assert docker.images.get(source).id == expected


def test_an_oci_layout_loads_with_its_ref_name(
    sglx_json: Callable[..., tuple[int, dict[str, Any]]],
    docker: Any,
    names: Callable[[str], str],
    tmp_path: Path,
) -> None:
    ref = names("oci")
    members = oci_members(ref=ref)
    archive = with_sidecar(write_tar(tmp_path / "oci.tar", members))
    code, envelope = sglx_json("base", "load", str(archive), "-q")
    assert code == 0, envelope["errors"]
    assert envelope["data"]["kind"] == "oci-layout"
    assert envelope["data"]["id"] == image_id(members) == docker.images.get(ref).id
    assert ref in envelope["data"]["tags"]


def test_an_archive_the_engine_refuses_is_an_error_and_leaves_nothing_tagged(
    sglx: CliRunner, docker: Any, names: Callable[[str], str], tmp_path: Path
) -> None:
    ref = names("refused")
    members = docker_members(tags=[ref])
    members[1] = file_member("layer0/layer.tar", layer_tar(b"not what the config says\n"))
    archive = with_sidecar(write_tar(tmp_path / "bad.tar", members))
    code, out, err = sglx("base", "load", str(archive), "-q")
    assert code == 2
    assert "sglx: error: the engine failed loading bad.tar: invalid diffID for layer 0" in err
    assert "hint: check the engine" in err
    assert "Traceback" not in out + err
    assert not has_image(docker, ref)
    assert not has_image(docker, image_id(members))


def test_a_base_that_is_not_the_pinned_one_never_reaches_the_engine(
    sglx: CliRunner,
    docker: Any,
    names: Callable[[str], str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    images = copy_images(tmp_path / "copy")
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(images))
    pin = "sha256:" + "2" * 64
    edit_yaml(images / "cpu" / "arch.yaml", {"base": {"digest": pin}})
    ref = names("unpinned")
    members = docker_members(tags=[ref], layer=layer_tar(ref.encode()))
    archive = with_sidecar(write_tar(tmp_path / "other.tar", members))
    code, out, err = sglx("base", "load", str(archive), "--arch", "cpu", "-q")
    assert code == 2
    assert f"not the base the cpu profile pins ({pin})" in err
    assert "Traceback" not in out + err
    assert not has_image(docker, ref)
    assert not has_image(docker, image_id(members))
    # Pinned to what it holds, the same archive loads.
    edit_yaml(images / "cpu" / "arch.yaml", {"base": {"digest": image_id(members)}})
    code, out, err = sglx("base", "load", str(archive), "--arch", "cpu", "-q")
    assert code == 0, err
    assert docker.images.get(ref).id == image_id(members)

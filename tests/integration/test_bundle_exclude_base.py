"""Base layers by reference on the real engine (Docker 20.10): `create --exclude-base` leaves out
the layers the image shares with its base; `install` and install.sh refuse it, before anything
loads, on an engine without the base, naming it and `sglx base load`; once the base is loaded
from its tar they load it to the image id a full bundle gives.

Two tiny images, seconds each: a base made with `docker import` (3 MB, its `docker save` tar
stands in for upstream's) and an image on it with one 100 kB layer, labelled with its base as
`sglx image build` labels one. Every image carries the run's id and is removed at the end.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import child_image, import_tiny_image
from helpers.engine_fixtures import has_image, remove_images

from sglx import image_labels

CliRunner = Callable[..., tuple[int, str, str]]
JsonRunner = Callable[..., tuple[int, dict[str, Any]]]


@dataclass(frozen=True)
class Based:
    base_tag: str
    base_id: str
    base_tar: Path
    app_tag: str
    app_id: str
    bundle: Path


@pytest.fixture(scope="module")
def based(docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Based]:
    from sglx.cli import main

    base_tag = f"sglx-test/bundle-base-base:{run_id}"
    app_tag = f"sglx-test/bundle-base-app:{run_id}"
    folder = tmp_path_factory.mktemp("exclude-base")
    ids: list[str] = []
    try:
        base_id = import_tiny_image(docker, base_tag)
        ids.append(base_id)
        labels = {image_labels.BASE_NAME: base_tag, image_labels.BASE_DIGEST: base_id}
        app_id = child_image(docker, base_tag, app_tag, "app", 100_000, labels=labels)
        ids.insert(0, app_id)
        base_tar = folder / "base.tar"
        with base_tar.open("wb") as out:
            for chunk in docker.images.get(base_tag).save(named=True):
                out.write(chunk)
        digest = hashlib.sha256(base_tar.read_bytes()).hexdigest()
        (folder / "base.tar.sha256").write_text(f"{digest}  base.tar\n")
        bundle = folder / "app"
        argv = ["--image", app_tag, "--out", str(bundle), "--exclude-base", "--no-scan", "-q"]
        assert main(["bundle", "create", "--arch", "cpu", *argv]) == 0
        yield Based(base_tag, base_id, base_tar, app_tag, app_id, bundle)
    finally:
        remove_images(docker, *ids, app_tag, base_tag)
        shutil.rmtree(folder, ignore_errors=True)


def test_it_names_its_base_and_carries_only_the_images_own_layers(
    based: Based, sglx: CliRunner, sglx_json: JsonRunner
) -> None:
    image = json.loads((based.bundle / "bundle.json").read_text())["image"]
    assert image["base"] == {
        "ref": based.base_tag, "image_id": based.base_id, "layers": 1, "obtain": "",
    }  # fmt: skip
    assert image["parent"] is None
    assert [layer["carried"] for layer in image["layers"]] == [False, True]
    # The 100 kB layer, the config and manifest: the base's 3 MB layer is left out.
    assert image["size"] < 3_000_000 / 20
    # Made with --no-scan: not scanned, a finding (issue 37 item 4); --no-scan accepts it.
    code, envelope = sglx_json("bundle", "verify", str(based.bundle))
    assert code == 1, envelope
    assert [f["code"] for f in envelope["findings"]] == ["bundle_not_scanned"], envelope
    assert envelope["data"]["scan"].startswith("not scanned (without its base's layers")
    code, envelope = sglx_json("bundle", "verify", str(based.bundle), "--no-scan")
    assert (code, envelope["findings"]) == (0, []), envelope
    assert envelope["data"]["base"]["ref"] == based.base_tag
    assert envelope["data"]["needs"] == [image["layers"][0]["chain_id"]]
    code, out, _ = sglx("bundle", "verify", str(based.bundle), "--no-scan", "-q")
    assert f"it leaves out the 1 layers (2.9 MiB) of the base image {based.base_tag}" in out
    code, out, _ = sglx("bundle", "inspect", str(based.bundle))
    assert code == 0 and f"from the base {based.base_tag}" in out
    code, _, err = sglx("scan", "--bundle", str(based.bundle), "-q")
    assert code == 2 and "cannot be scanned alone" in err


def test_without_its_base_it_is_refused_and_after_base_load_it_installs_to_the_same_id(
    based: Based, docker: Any, tmp_path: Path, sglx: CliRunner
) -> None:
    remove_images(docker, based.app_id, based.base_id)
    assert not has_image(docker, based.base_id)
    state = tmp_path / "state"
    code, out, err = sglx(
        "bundle", "install", "--no-scan", str(based.bundle), "--state", str(state)
    )
    assert code == 2, out + err
    assert f"leaves out the 1 layers of the base image {based.base_tag} ({based.base_id})" in err
    assert "nothing was loaded" in err and "Traceback" not in err
    assert f"hint: load the base {based.base_tag} into this engine first" in err
    assert "`sglx base load FILE`" in err and not state.exists()
    done = subprocess.run(
        ["sh", str(based.bundle / "install.sh"), "--no-scan", "--state",
         str(tmp_path / "sh-state")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert f"leaves out the 1 layers of the base image {based.base_tag}" in done.stderr
    assert "`sglx base load FILE`" in done.stderr
    assert not has_image(docker, based.app_id)
    assert list((tmp_path / "sh-state").iterdir()) == []  # no install record
    # The fix it names: the base's tar, loaded (and checked) by `sglx base load`.
    code, out, err = sglx("base", "load", str(based.base_tar), "-q")
    assert code == 0, err
    assert docker.images.get(based.base_tag).id == based.base_id
    code, out, err = sglx(
        "bundle", "install", "--no-scan", str(based.bundle), "--state", str(state)
    )
    assert code == 0, err
    assert docker.images.get(based.app_tag).id == based.app_id
    remove_images(docker, based.app_id)
    done = subprocess.run(
        ["sh", str(based.bundle / "install.sh"), "--no-scan", "--state",
         str(tmp_path / "sh-state")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert docker.images.get(based.app_tag).id == based.app_id

"""The sglx_registry role's module `sglx_registry_layout` on archives made by hand in Docker
20.10's `docker save` layout: the skopeo `dir:` layout it writes (uncompressed layers named by
their diff ids, the config, one manifest per image whether from a full bundle or a delta),
layers the registry holds left out, and a damaged, incomplete or hostile bundle refused."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MODULE = (
    Path(__file__).resolve().parents[3]
    / "ansible/roles/sglx_registry/library/sglx_registry_layout.py"
)


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sglx_registry_layout", MODULE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


layout = load()


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer_tar(name: str, size: int) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    return buffer.getvalue()


def add(tar: tarfile.TarFile, name: str, data: bytes = b"", link: str = "") -> None:
    info = tarfile.TarInfo(name)
    if link:
        info.type, info.linkname = tarfile.SYMTYPE, link
    else:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if not link else None)


def save_stream(layers: list[bytes], carried: list[bool]) -> tuple[bytes, str, list[str]]:
    """A `docker save` stream of an image of `layers` (folders named arbitrarily: the module
    goes by manifest.json), leaving out the layer.tar of each layer not carried."""
    diff_ids = [sha(data) for data in layers]
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    image_id = sha(config)
    folders = [hashlib.sha256(f"folder {i}".encode()).hexdigest() for i in range(len(layers))]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for index, (folder, data) in enumerate(zip(folders, layers, strict=True)):
            add(tar, f"{folder}/VERSION", b"1.0")
            add(tar, f"{folder}/json", b"{}")
            earlier = layers.index(data)
            if not carried[index]:
                continue
            if earlier < index:  # docker save links a repeated layer to the first one
                add(tar, f"{folder}/layer.tar", link=f"../{folders[earlier]}/layer.tar")
            else:
                add(tar, f"{folder}/layer.tar", data)
        add(tar, f"{image_id.split(':')[1]}.json", config)
        saved = [{"Config": f"{image_id.split(':')[1]}.json", "RepoTags": ["x:1"],
                  "Layers": [f"{f}/layer.tar" for f in folders]}]  # fmt: skip
        add(tar, "manifest.json", json.dumps(saved).encode())
    return buffer.getvalue(), image_id, diff_ids


def bundle(
    where: Path, layers: list[bytes], carried: list[bool] | None = None, chunk: int = 4096
) -> tuple[Path, dict[str, Any]]:
    """A bundle folder holding what the module reads: bundle.json's image record and chunks."""
    carried = carried or [True] * len(layers)
    stream, image_id, diff_ids = save_stream(layers, carried)
    (where / "image").mkdir(parents=True)
    chunks = []
    for index in range(max(1, -(-len(stream) // chunk))):
        path = f"image/image.tar.{index:03d}"
        (where / path).write_bytes(stream[index * chunk : (index + 1) * chunk])
        chunks.append(path)
    image = {
        "id": image_id, "ref": "x:1", "size": len(stream), "chunks": chunks,
        "layers": [{"diff_id": d, "size": len(data), "carried": c, "chain_id": d}
                   for d, data, c in zip(diff_ids, layers, carried, strict=True)],
        "parent": None if all(carried) else {"bundle": "parent-bundle", "image_ref": "x:0"},
    }  # fmt: skip
    (where / "bundle.json").write_text(json.dumps({"image": image}))
    return where, image


@pytest.fixture(scope="module")
def layers() -> list[bytes]:
    return [layer_tar("base", 30_000), layer_tar("plugin", 5_000)]


def test_a_full_bundle_becomes_a_dir_layout_of_uncompressed_layers(
    tmp_path: Path, layers: list[bytes]
) -> None:
    src, image = bundle(tmp_path / "b", layers)
    done = layout.write_layout(str(src), str(tmp_path / "out"), [])
    out = tmp_path / "out"
    manifest = (out / "manifest.json").read_bytes()
    assert done["manifest_digest"] == sha(manifest)
    doc = json.loads(manifest)
    assert doc["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert doc["config"]["digest"] == image["id"]
    assert sha((out / image["id"].split(":")[1]).read_bytes()) == image["id"]
    assert [x["digest"] for x in doc["layers"]] == [sha(data) for data in layers]
    assert {x["mediaType"] for x in doc["layers"]} == {
        "application/vnd.docker.image.rootfs.diff.tar"
    }
    for data in layers:
        assert (out / sha(data).split(":")[1]).read_bytes() == data
    assert (out / "version").read_text() == "Directory Transport Version: 1.1\n"
    assert (done["written_layers"], done["written_bytes"]) == (2, sum(map(len, layers)))


def test_layers_the_registry_holds_are_not_written_and_a_delta_gives_the_same_manifest(
    tmp_path: Path, layers: list[bytes]
) -> None:
    full, _ = bundle(tmp_path / "full", layers)
    first = layout.write_layout(str(full), str(tmp_path / "a"), [])
    held = [sha(layers[0])]
    again = layout.write_layout(str(full), str(tmp_path / "b"), held)
    assert not (tmp_path / "b" / held[0].split(":")[1]).exists()
    assert (again["written_layers"], again["written_bytes"]) == (1, len(layers[1]))
    delta, _ = bundle(tmp_path / "delta", layers, carried=[False, True])
    done = layout.write_layout(str(delta), str(tmp_path / "c"), held)
    assert first["manifest_digest"] == again["manifest_digest"] == done["manifest_digest"]
    assert [x["written"] for x in done["layers"]] == [False, True]


def test_a_delta_whose_parent_is_not_in_the_registry_is_refused(
    tmp_path: Path, layers: list[bytes]
) -> None:
    delta, _ = bundle(tmp_path / "delta", layers, carried=[False, True])
    with pytest.raises(layout.LayoutError) as caught:
        layout.write_layout(str(delta), str(tmp_path / "out"), [])
    message = str(caught.value)
    assert f"layer 0 ({sha(layers[0])}) is neither in the bundle's image archive" in message
    assert "a delta over the bundle parent-bundle (image x:0): seed that bundle first" in message


def test_a_repeated_layer_linked_in_the_archive_is_one_blob(tmp_path: Path) -> None:
    same = layer_tar("same", 2_000)
    src, _ = bundle(tmp_path / "b", [same, layer_tar("top", 1_000), same])
    done = layout.write_layout(str(src), str(tmp_path / "out"), [])
    assert [x["digest"] for x in done["layers"]][::2] == [sha(same)] * 2
    assert done["written_layers"] == 2


def test_a_damaged_chunk_is_named_not_pushed(tmp_path: Path, layers: list[bytes]) -> None:
    src, image = bundle(tmp_path / "b", layers)
    chunk = src / image["chunks"][2]  # inside the 30 kB layer's data
    data = bytearray(chunk.read_bytes())
    data[100] ^= 0xFF
    chunk.write_bytes(bytes(data))
    with pytest.raises(layout.LayoutError, match=r"layer 0 of the image archive .* hashes to"):
        layout.write_layout(str(src), str(tmp_path / "out"), [])


def test_a_fifo_for_a_chunk_is_refused_without_hanging(tmp_path: Path, layers: list[bytes]) -> None:
    src, image = bundle(tmp_path / "b", layers)
    chunk = src / image["chunks"][1]
    chunk.unlink()
    os.mkfifo(chunk)
    with pytest.raises(layout.LayoutError, match=r"image\.tar\.001 is not a regular file"):
        layout.write_layout(str(src), str(tmp_path / "out"), [])


def test_a_control_node_without_room_for_the_lacking_layers_is_refused(
    tmp_path: Path, layers: list[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    src, _ = bundle(tmp_path / "b", layers)
    monkeypatch.setattr(layout, "free_bytes", lambda folder: 1000)
    with pytest.raises(layout.LayoutError, match=r"has 1000 bytes free on the control node"):
        layout.write_layout(str(src), str(tmp_path / "out"), [sha(layers[0])])
    assert not (tmp_path / "out").exists()

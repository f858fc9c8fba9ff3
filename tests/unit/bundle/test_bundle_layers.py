"""Delta bundles without an engine: chain ids and the legacy layer names of Docker 20.10's
`docker save` (checked against folders a real 20.10 engine wrote), the stream filter on
hand-made save archives, bundle.json's layer rules, the chain check of `verify --with`, the
engine check of `install` and install.sh's, and bundle.json's layers against an archive."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglx.bundle import layout
from sglx.bundle.chunks import ChunkWriter
from sglx.bundle.delta import Bundle, chain_findings, engine_missing
from sglx.bundle.image_archive import layer_findings
from sglx.bundle.install_sh import parent_check
from sglx.bundle.layers import chain_ids, held_chains, identify, legacy_layer_id
from sglx.bundle.manifest import (
    BundleManifest,
    FileEntry,
    ImageRecord,
    LayerEntry,
    ParentRecord,
    Slot,
    dump,
    parse,
)
from sglx.bundle.save_stream import SaveFilter
from sglx_core.errors import SglxError

# Two layer folders of `docker save` by Docker 20.10.24 (an image from `docker import`, then a
# file added and committed): the names are what legacy_layer_id must reproduce.
D1 = "sha256:486a6d3494d3f304fd9741601707b2cb787356aa391e1aa0643911e1e1005399"
D2 = "sha256:a250b5b15a5863a10c13ce4a853c006fddec24d935467e0711c56559ce84faa6"
EMPTY_CONFIG = (
    '{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,'
    '"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,'
    '"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null}'
)
BOTTOM = "e2d127567e955da6087e5fec1a701b7641b9b7778c5759aad6309463729ffe02"
BOTTOM_JSON = (
    f'{{"id":"{BOTTOM}","created":"1970-01-01T00:00:00Z","container_config":{EMPTY_CONFIG},'
    '"os":"linux"}'
)
TOP = "a5c55c893ec081202faa51d87d952de936682f27da531f15444c0f46f6601b41"
RUN_CONFIG = (
    '{"Hostname":"65f037145871","Domainname":"","User":"","AttachStdin":false,'
    '"AttachStdout":true,"AttachStderr":true,"Tty":false,"OpenStdin":false,"StdinOnce":false,'
    '"Env":null,"Cmd":["/x"],"Image":"sglxexp/parent:1","Volumes":null,"WorkingDir":"",'
    '"Entrypoint":null,"OnBuild":null,"Labels":{}}'
)
TOP_JSON = (
    f'{{"id":"{TOP}","parent":"{BOTTOM}","created":"2026-12-03T17:14:06.535764795Z",'
    '"container":"65f037145871e5c361c19d93d6a39ccb977c29a3c8059c4753b2289db40acf1b",'
    f'"container_config":{RUN_CONFIG},"docker_version":"20.10.24+dfsg1","config":{RUN_CONFIG},'
    '"architecture":"amd64","os":"linux"}'
)


def test_chain_ids_follow_the_oci_rule() -> None:
    chains = chain_ids([D1, D2])
    assert chains[0] == D1
    assert chains[1] == "sha256:" + hashlib.sha256(f"{D1} {D2}".encode()).hexdigest()


def test_legacy_layer_names_are_those_docker_20_10_wrote() -> None:
    chains = chain_ids([D1, D2])
    assert legacy_layer_id(BOTTOM_JSON, chains[0], with_os=False) == BOTTOM
    assert legacy_layer_id(TOP_JSON, chains[1], with_os=True) == TOP
    assert identify(BOTTOM_JSON, BOTTOM, chains) == 0
    assert identify(TOP_JSON, TOP, chains) == 1
    assert identify(TOP_JSON, TOP, chains[:1]) is None
    assert identify("[1, 2]", TOP, chains) is None
    assert identify('{"id": "x"', TOP, chains) is None


# A `docker save` archive made by hand, in the classic format: folders named as 20.10 names
# them, members in name order.
def save_archive(
    layers: list[bytes], *, pax_on: int | None = None, link: tuple[int, int] | None = None
) -> tuple[bytes, str, list[str], list[str]]:
    diff_ids = ["sha256:" + hashlib.sha256(data).hexdigest() for data in layers]
    chains = chain_ids(diff_ids)
    folders: list[str] = []
    texts: list[str] = []
    for index in range(len(layers)):
        top = index == len(layers) - 1
        body: dict[str, Any] = {"id": "ID"}
        if folders:
            body["parent"] = folders[-1]
        body.update({"created": "1970-01-01T00:00:00Z", "container_config": {"Cmd": None}})
        body["os"] = "linux"
        text = json.dumps(body, separators=(",", ":"))
        folder = legacy_layer_id(text, chains[index], with_os=top)
        assert folder is not None
        folders.append(folder)
        texts.append(text.replace('"ID"', json.dumps(folder)))
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    paths = [f"{folder}/layer.tar" for folder in folders]
    manifest = json.dumps(
        [{"Config": image_id[7:] + ".json", "RepoTags": ["t:1"], "Layers": paths}]
    )
    members: dict[str, tuple[bytes, str | None]] = {
        image_id[7:] + ".json": (config, None),
        "manifest.json": (manifest.encode(), None),
        "repositories": (b"{}", None),
    }
    for index, folder in enumerate(folders):
        members[f"{folder}/VERSION"] = (b"1.0", None)
        members[f"{folder}/json"] = (texts[index].encode(), None)
        target = None
        if link is not None and index == link[0]:
            target = f"../{folders[link[1]]}/layer.tar"
        members[f"{folder}/layer.tar"] = (layers[index], target)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted({*members, *(f.split("/")[0] + "/" for f in members if "/" in f)}):
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            data, target = members[name]
            if target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
                continue
            if pax_on is not None and name == paths[pax_on]:
                info.pax_headers = {"comment": "dropped with its member"}
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue(), image_id, diff_ids, folders


def run(filt: SaveFilter, raw: bytes, block: int) -> bytes:
    return b"".join(
        bytes(b) for b in filt.run(raw[i : i + block] for i in range(0, len(raw), block))
    )


@pytest.mark.parametrize("block", [1, 511, 513, 4096, 1 << 20])
def test_the_filter_passes_a_full_archive_byte_for_byte_and_records_its_layers(block: int) -> None:
    layers = [os.urandom(3000), os.urandom(700), os.urandom(5)]
    raw, image_id, diff_ids, _ = save_archive(layers)
    filt = SaveFilter(image_id, diff_ids)
    assert run(filt, raw, block) == raw
    recorded = filt.layers()
    assert [(x.diff_id, x.size, x.carried) for x in recorded] == [
        (d, len(data), True) for d, data in zip(diff_ids, layers, strict=True)
    ]
    assert [x.chain_id for x in recorded] == chain_ids(diff_ids)


@pytest.mark.parametrize("block", [1, 700, 1 << 20])
def test_the_filter_leaves_out_the_parents_layers_and_their_extended_headers(block: int) -> None:
    layers = [os.urandom(3000), os.urandom(2000), os.urandom(100)]
    raw, image_id, diff_ids, folders = save_archive(layers, pax_on=0)
    chains = chain_ids(diff_ids)
    filt = SaveFilter(image_id, diff_ids, frozenset(chains[:2]))
    out = run(filt, raw, block)
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        members = tar.getmembers()
        names = [m.name for m in members]
        assert tar.extractfile(f"{folders[2]}/layer.tar").read() == layers[2]  # type: ignore[union-attr]
    assert f"{folders[0]}/layer.tar" not in names and f"{folders[1]}/layer.tar" not in names
    assert {f"{folders[0]}/json", f"{folders[0]}/VERSION", "manifest.json"} <= set(names)
    assert not any("comment" in m.pax_headers for m in members)
    assert len(out) < len(raw) - 5000
    assert [x.carried for x in filt.layers()] == [False, False, True]
    assert filt.unidentified == []


def test_a_kept_link_to_a_dropped_layer_is_an_error_never_an_archive() -> None:
    """`docker save` links a second copy of a layer's bytes to the first: leaving the first
    out would leave the link dangling (create never asks for it: it carries such a layer)."""
    first = os.urandom(1000)
    raw, image_id, diff_ids, _ = save_archive([first, os.urandom(10), first], link=(2, 0))
    filt = SaveFilter(image_id, diff_ids, frozenset(chain_ids(diff_ids)[:1]))
    run(filt, raw, 4096)
    with pytest.raises(SglxError, match="links to a file the archive leaves out"):
        filt.layers()
    kept = SaveFilter(image_id, diff_ids)
    run(kept, raw, 4096)
    assert [x.size for x in kept.layers()] == [1000, 10, 1000]


def test_a_stream_that_is_not_the_image_is_refused() -> None:
    raw, image_id, diff_ids, _ = save_archive([os.urandom(100)])
    other = SaveFilter("sha256:" + "0" * 64, diff_ids)
    run(other, raw, 4096)
    with pytest.raises(SglxError, match=r"neither its config's digest .* nor its manifest's"):
        other.layers()
    wrong = SaveFilter(image_id, [*diff_ids, "sha256:" + "1" * 64])
    run(wrong, raw, 4096)
    with pytest.raises(SglxError, match="layers are not the engine's"):
        wrong.layers()
    strict = frozenset(chain_ids(diff_ids))  # a delta's filter: anything unexpected is an error
    with pytest.raises(SglxError, match="ended inside a member"):
        run(SaveFilter(image_id, diff_ids, strict), raw[:1500], 512)
    damaged = bytearray(raw)
    damaged[10] ^= 0xFF
    with pytest.raises(SglxError, match="fails its checksum"):
        run(SaveFilter(image_id, diff_ids, strict), bytes(damaged), 4096)


def test_a_full_bundles_stream_goes_on_untouched_even_when_it_cannot_be_read() -> None:
    """Without layers to leave out the stream is only read beside the copy: a stream sglx does
    not understand still makes the archive, with no layers recorded."""
    raw = os.urandom(5000)
    filt = SaveFilter("sha256:" + "0" * 64, [D1])
    assert run(filt, raw, 700) == raw
    assert filt.recorded() is None and "not the archive sglx expects" in str(filt.problem)
    archive, image_id, _, _ = save_archive([os.urandom(100)])
    wrong = SaveFilter(image_id, [D1])
    assert run(wrong, archive, 4096) == archive
    assert wrong.recorded() is None and "not the engine's" in str(wrong.problem)


def test_a_folder_no_chain_names_is_carried_whole() -> None:
    layers = [os.urandom(100), os.urandom(100)]
    raw, image_id, diff_ids, folders = save_archive(layers)
    chains = chain_ids(diff_ids)
    filt = SaveFilter(image_id, diff_ids, frozenset(chains[:1]))
    # The drop set names a chain the folders' json do not reproduce: nothing is left out.
    filt._chains = ["sha256:" + "2" * 64, chains[1]]
    run(filt, raw, 4096)
    assert filt.unidentified == [folders[0]]
    assert not filt.dropped


def image(
    diff_ids: list[str], carried: list[bool], parent: ParentRecord | None = None, **kw: Any
) -> ImageRecord:
    layers = tuple(
        LayerEntry(diff_id=d, chain_id=c, size=10 * (i + 1), carried=k)
        for i, (d, c, k) in enumerate(zip(diff_ids, chain_ids(diff_ids), carried, strict=True))
    )
    fields: dict[str, Any] = {
        "ref": "t:1",
        "id": "sha256:" + "a" * 64,
        "archive": layout.IMAGE_ARCHIVE,
        "size": 5,
        "chunk_size": 1024,
        "chunks": (layout.chunk_name(0),),
        "layers": layers,
        "parent": parent,
    }
    fields.update(kw)
    return ImageRecord(**fields)


def manifest_of(record: ImageRecord) -> BundleManifest:
    return BundleManifest(
        arch="cpu",
        created="2026-01-01T00:00:00+00:00",
        sglx_version="0",
        image=record,
        wheelhouse=Slot(included=False),
        ansible=Slot(included=False),
        files=(FileEntry(path=layout.chunk_name(0), size=5, sha256="0" * 64, kind="image-chunk"),),
    )


PARENT = ParentRecord(
    digest="sha256:" + "b" * 64,
    bundle="sglx-bundle-cpu-1",
    image_ref="t:0",
    image_id="sha256:" + "c" * 64,
)
DIFFS = ["sha256:" + c * 64 for c in "123"]


@pytest.mark.parametrize(
    ("record", "words"),
    [
        (image(DIFFS, [False, True, True]), "a layer is not carried, but no image.parent names"),
        (image(DIFFS, [True] * 3, layers=None, parent=PARENT), "a delta must list its layers"),
        (image(DIFFS, [False, True, True], PARENT, id=PARENT.image_id), "this bundle's own image"),
    ],
)
def test_bundle_json_layers_must_agree_with_themselves(record: ImageRecord, words: str) -> None:
    with pytest.raises(SglxError, match=words):
        parse(dump(manifest_of(record)), "b/bundle.json")


def test_a_chain_id_that_its_diff_ids_do_not_make_is_refused() -> None:
    raw = json.loads(dump(manifest_of(image(DIFFS, [False, True, True], PARENT))))
    raw["image"]["layers"][1]["chain_id"] = DIFFS[1]
    with pytest.raises(SglxError, match=r"image.layers.1.chain_id: .* is not the chain id"):
        parse(json.dumps(raw).encode(), "b/bundle.json")
    assert parse(dump(manifest_of(image(DIFFS, [False, True, True], PARENT))), "b").image.parent


def bundle(record: ImageRecord, digest: str, name: str) -> Bundle:
    return Bundle(Path(name), Path("/site") / name, manifest_of(record), digest)


def test_the_chain_check_walks_every_link_it_is_given() -> None:
    full = bundle(image(DIFFS[:1], [True], id=PARENT.image_id), PARENT.digest, PARENT.bundle)
    middle_parent = ParentRecord(
        digest="sha256:" + "d" * 64, bundle="mid", image_ref="t:1", image_id="sha256:" + "e" * 64
    )
    middle = bundle(
        image(DIFFS[:2], [False, True], PARENT, id=middle_parent.image_id),
        middle_parent.digest,
        "mid",
    )
    top = manifest_of(image(DIFFS, [False, False, True], middle_parent))
    findings, lines = chain_findings(top, [middle, full])
    assert findings == []
    assert lines[-1] == "the chain is complete: it ends in sglx-bundle-cpu-1, a full bundle"
    findings, lines = chain_findings(top, [middle])
    assert findings == [] and "pass --with it too" in lines[-1]
    findings, _ = chain_findings(top, [full])
    assert [f.code for f in findings] == ["bundle_parent"]
    assert "no --with bundle is it" in findings[0].message and "mid" in findings[0].hint  # type: ignore[operator]
    other_image = bundle(
        image(DIFFS[:2], [True, True], id="sha256:" + "f" * 64), middle.digest, "x"
    )
    findings, _ = chain_findings(top, [other_image])
    assert "but the delta was made over image" in findings[0].message
    lacking = bundle(
        image([DIFFS[0], DIFFS[2]], [True, True], id=middle_parent.image_id), middle.digest, "y"
    )
    findings, _ = chain_findings(top, [lacking])
    assert "its image lacks 1 of the layers the delta takes from it" in findings[0].message


class FakeImage:
    def __init__(self, layers: list[str]) -> None:
        self.attrs = {"RootFS": {"Layers": layers}}


class FakeImages:
    def __init__(self, by_id: dict[str, list[str]]) -> None:
        self.by_id = by_id
        self.listed = 0

    def get(self, image_id: str) -> FakeImage:
        from docker.errors import ImageNotFound

        if image_id not in self.by_id:
            raise ImageNotFound(image_id)
        return FakeImage(self.by_id[image_id])


class FakeApi:
    """The low-level listing `sglx.engine.image_ids` makes (`docker image ls -aq`)."""

    def __init__(self, images: FakeImages) -> None:
        self._images = images

    def images(self, all: bool = False, quiet: bool = False) -> list[str]:
        self._images.listed += 1
        return list(self._images.by_id)


class FakeClient:
    def __init__(self, by_id: dict[str, list[str]]) -> None:
        self.images = FakeImages(by_id)
        self.api = FakeApi(self.images)


def test_the_engine_holds_a_deltas_layers_through_its_parent_or_any_other_image() -> None:
    delta = image(DIFFS, [False, False, True], PARENT)
    client = FakeClient({PARENT.image_id: DIFFS[:2]})
    assert engine_missing(client, delta) == [] and client.images.listed == 0
    client = FakeClient({"sha256:" + "9" * 64: [*DIFFS[:2], "sha256:" + "8" * 64]})
    assert engine_missing(client, delta) == [] and client.images.listed == 1
    client = FakeClient({"sha256:" + "9" * 64: DIFFS[:1]})
    assert [x.diff_id for x in engine_missing(client, delta)] == [DIFFS[1]]
    assert engine_missing(FakeClient({}), image(DIFFS, [True] * 3)) == []
    assert held_chains([DIFFS[:2]]) == set(chain_ids(DIFFS[:2]))


STUB_DOCKER = """#!/bin/sh
# `docker image inspect --format F ID` and `docker image ls -aq --no-trunc`, from $STUB_IMAGES:
# one `ID LAYER...` line per image.
case "$1 $2" in
  "image inspect")
    line=$(grep "^$5 " "$STUB_IMAGES") || exit 1
    for layer in ${line#* }; do printf '%s ' "$layer"; done; echo ;;
  "image ls") cut -d' ' -f1 "$STUB_IMAGES" ;;
  *) exit 3 ;;
esac
"""


def sh_checks(folder: Path, *checks: str) -> Callable[..., subprocess.CompletedProcess[str]]:
    """`with_images(LINE...)`: install.sh's `checks` run by sh (then `echo held`) against
    STUB_DOCKER (in FOLDER/bin) holding the images of those `ID LAYER...` lines."""
    (folder / "bin").mkdir()
    (folder / "bin" / "docker").write_text(STUB_DOCKER)
    (folder / "bin" / "docker").chmod(0o755)
    images = folder / "images"
    script = "\n".join(
        [
            'die() { echo "error: $1" >&2; [ $# -lt 2 ] || echo "hint: $2" >&2; exit 2; }',
            "q() { printf '%s' \"$1\"; }",
            *checks,
            "echo held",
        ]
    )
    env = {"PATH": f"{folder / 'bin'}:/usr/bin:/bin", "STUB_IMAGES": str(images)}

    def with_images(*lines: str) -> subprocess.CompletedProcess[str]:
        images.write_text("".join(line + "\n" for line in lines))
        return subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True)

    return with_images


def test_install_sh_checks_the_engine_for_the_parents_layers(tmp_path: Path) -> None:
    with_images = sh_checks(tmp_path, parent_check(image(DIFFS, [False, False, True], PARENT)))
    assert with_images(f"{PARENT.image_id} {DIFFS[0]} {DIFFS[1]}").stdout == "held\n"
    other = "sha256:" + "9" * 64
    assert with_images(f"{other} {DIFFS[0]} {DIFFS[1]} {DIFFS[2]}").stdout == "held\n"
    done = with_images(f"{other} {DIFFS[0]}", f"{PARENT.image_id[:-1]}0 {DIFFS[1]} {DIFFS[0]}")
    assert done.returncode == 2, done.stdout
    assert "this bundle is a delta over the bundle sglx-bundle-cpu-1" in done.stderr
    assert "lacks 2 layers it takes from it; nothing was loaded" in done.stderr
    assert "install the bundle sglx-bundle-cpu-1 first" in done.stderr
    assert parent_check(image(DIFFS, [True] * 3)).strip().startswith(": # a full bundle")


def bundle_folder(tmp_path: Path, raw: bytes, record: ImageRecord) -> tuple[Path, BundleManifest]:
    folder = tmp_path / "b"
    folder.mkdir()
    written = ChunkWriter(folder, 1024).write_all([raw])
    chunks = tuple(c.path for c in written.chunks)
    record = record.model_copy(update={"size": written.size, "chunks": chunks})
    files = tuple(
        FileEntry(path=c.path, size=c.size, sha256=c.sha256, kind="image-chunk")
        for c in written.chunks
    )
    return folder, manifest_of(record).model_copy(update={"files": files})


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda layers: layers[:2], "bundle.json omits layer 2"),
        (lambda layers: [*layers, "sha256:" + "7" * 64], "lists a layer the image does not have"),
        (lambda layers: [layers[1], layers[0], layers[2]], "in another order"),
    ],
)
def test_bundle_json_must_list_exactly_the_images_layers(
    tmp_path: Path, edit: Any, words: str
) -> None:
    raw, image_id, diff_ids, _ = save_archive([os.urandom(2000), os.urandom(100), os.urandom(50)])
    filt = SaveFilter(image_id, diff_ids, frozenset(chain_ids(diff_ids)[:2]))
    out = run(filt, raw, 4096)
    good = image(diff_ids, [False, False, True], PARENT, id=image_id, layers=filt.layers())
    folder, manifest = bundle_folder(tmp_path, out, good)
    assert layer_findings(folder, manifest) == []
    listed = edit(diff_ids)
    carried = [False] * (len(listed) - 1) + [True]
    kept = {"id": image_id, "size": manifest.image.size, "chunks": manifest.image.chunks}
    bad = manifest.model_copy(update={"image": image(listed, carried, PARENT, **kept)})
    findings = layer_findings(folder, bad)
    assert [f.code for f in findings][:1] == ["bundle_layers"] and words in findings[0].message


def test_carried_and_referenced_must_be_what_the_archive_holds(tmp_path: Path) -> None:
    raw, image_id, diff_ids, _ = save_archive([os.urandom(2000), os.urandom(100)])
    filt = SaveFilter(image_id, diff_ids, frozenset(chain_ids(diff_ids)[:1]))
    out = run(filt, raw, 4096)
    layers = filt.layers()
    flipped = (
        layers[0].model_copy(update={"carried": True}),
        layers[1].model_copy(update={"carried": False}),
    )
    folder, manifest = bundle_folder(
        tmp_path, out, image(diff_ids, [True, False], PARENT, id=image_id, layers=flipped)
    )
    messages = [f.message for f in layer_findings(folder, manifest)]
    assert any("is carried by bundle.json, but the archive lacks" in m for m in messages)
    assert any(
        "taken from the parent by bundle.json, but the archive carries" in m for m in messages
    )


def test_a_parent_made_before_layers_were_recorded_is_read_from_its_archive(
    tmp_path: Path,
) -> None:
    """Its layers come from the image config in its chunks, trusted because the config hashes
    to the image id its bundle.json names; inspect shows them all carried."""
    from sglx.bundle.inspect import inspect_bundle
    from sglx.progress import Progress

    raw, image_id, diff_ids, _ = save_archive([os.urandom(2000), os.urandom(100)])
    folder, manifest = bundle_folder(tmp_path, raw, image(diff_ids, [True, True], id=image_id))
    old = manifest.model_copy(update={"image": manifest.image.model_copy(update={"layers": None})})
    (folder / layout.MANIFEST).write_bytes(dump(old))
    parent = Bundle(folder, folder, old, "sha256:" + "d" * 64)
    assert parent.diff_ids() == tuple(diff_ids)
    result = inspect_bundle(folder / layout.MANIFEST, Progress("t", quiet=True))
    assert result.data["layers_from"] == "the archive (not in bundle.json)"
    assert [(x["size"], x["carried"]) for x in result.data["layers"]] == [(2000, True), (100, True)]
    lying = old.model_copy(
        update={"image": old.image.model_copy(update={"id": "sha256:" + "e" * 64})}
    )
    with pytest.raises(SglxError, match="is not its image"):
        Bundle(folder, folder, lying, "sha256:" + "d" * 64).diff_ids()

"""An image's two digests (sglx.image_identity) and the save stream of every store: the
manifest the containerd store writes on loading Docker 20.10's archive (checked against the one
Docker 28.5.2 with containerd 2.1.9 wrote), and `SaveFilter` on the OCI layout of Docker 25 and
later (`index.json`, `blobs/sha256/`, gzip layers, an image index), hand-made in the member
order Docker 28.5.2's `docker save` writes."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from typing import Any

import pytest
from test_bundle_layers import run, save_archive

from sglx.bundle.layers import chain_ids
from sglx.bundle.save_stream import SaveFilter
from sglx.image_identity import digest_of, imported_manifest, leads_to_config
from sglx_core.errors import SglxError

# `docker save` on Docker 20.10.24 of an image of two layers, then `docker load` of it into
# Docker 28.5.2 on the containerd store: the image id it reported, and the digests it made it of.
LOADED_ID = "sha256:ceb5ce90cf9c7513809599bfcb3a8421a8ad0bb25ee4ed152a1764a513c75559"
CONFIG = ("sha256:19b2b3cf69c7321ee635491a0c7e27cb61145032002779c29d9fb5c7c44182f0", 2434)
LAYERS = [
    ("sha256:4c5e6e0205d36ff6aa70d57bf55aeb4ebd2c383b5fe6eb698ae0057da6b747a1", 182732800),
    ("sha256:f953fda4660eac7304e540e87927c52b4e0abf254e185a5e4062c03b85cf26c6", 2048),
]
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def test_the_manifest_the_containerd_store_writes_for_a_classic_archive() -> None:
    assert digest_of(imported_manifest(CONFIG, LAYERS)) == LOADED_ID


def oci_archive(
    layers: list[bytes], *, compress: bool = False, nested: bool = False
) -> tuple[bytes, dict[str, Any]]:
    """An OCI-layout save of one image; the digests it holds."""
    diff_ids = [digest_of(data) for data in layers]
    blobs_of = [gzip.compress(data, mtime=0) if compress else data for data in layers]
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    layer_type = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if compress else "")
    manifest = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"digest": digest_of(config), "size": len(config)},
            "layers": [
                {"mediaType": layer_type, "digest": digest_of(b), "size": len(b)} for b in blobs_of
            ],
        }
    ).encode()
    blobs = {digest_of(b): b for b in [config, manifest, *blobs_of]}
    top = digest_of(manifest)
    if nested:
        index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [{"mediaType": OCI_MANIFEST, "digest": top, "size": len(manifest)}],
            }
        ).encode()
        top = digest_of(index)
        blobs[top] = index
    members = {f"blobs/sha256/{d[7:]}": b for d, b in blobs.items()}
    members["index.json"] = json.dumps({"manifests": [{"digest": top, "size": 1}]}).encode()
    members["manifest.json"] = json.dumps(
        [
            {
                "Config": f"blobs/sha256/{digest_of(config)[7:]}",
                "RepoTags": ["t:1"],
                "Layers": [f"blobs/sha256/{digest_of(b)[7:]}" for b in blobs_of],
            }
        ]
    ).encode()
    members["oci-layout"] = b'{"imageLayoutVersion":"1.0.0"}'
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for folder in ("blobs", "blobs/sha256"):
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size = len(members[name])
            tar.addfile(info, io.BytesIO(members[name]))
    return buffer.getvalue(), {
        "config": digest_of(config),
        "manifest": top,
        "diff_ids": diff_ids,
        "sizes": [len(b) for b in blobs_of],
    }


@pytest.mark.parametrize("compress", [False, True])
@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize("engine_names", ["config", "manifest"])
def test_an_oci_save_records_its_layers_and_both_digests(
    compress: bool, nested: bool, engine_names: str
) -> None:
    """Docker 25+ writes the OCI layout on either store: the classic store names the image by
    its config digest, the containerd store by its manifest's (or image index's)."""
    raw, held = oci_archive([os.urandom(3000), os.urandom(10)], compress=compress, nested=nested)
    filt = SaveFilter(held[engine_names], held["diff_ids"])
    assert run(filt, raw, 700) == raw
    layers = filt.layers()
    assert [(x.diff_id, x.size, x.carried) for x in layers] == [
        (d, size, True) for d, size in zip(held["diff_ids"], held["sizes"], strict=True)
    ]
    assert filt.identity is not None
    assert (filt.identity.config_digest, filt.identity.manifest_digest) == (
        held["config"],
        held["manifest"],
    )


def test_a_classic_archive_gets_the_manifest_digest_the_containerd_store_will_report() -> None:
    layers = [os.urandom(3000), os.urandom(5)]
    raw, image_id, diff_ids, _ = save_archive(layers)
    filt = SaveFilter(image_id, diff_ids)
    run(filt, raw, 4096)
    filt.layers()
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        config_size = tar.getmember(image_id[7:] + ".json").size
    assert filt.identity is not None
    expected = imported_manifest(
        (image_id, config_size), [(d, len(x)) for d, x in zip(diff_ids, layers, strict=True)]
    )
    assert filt.identity.manifest_digest == digest_of(expected)
    assert filt.identity.config_digest == image_id


@pytest.mark.parametrize(
    "case", ["index.json names no manifest", "an absent manifest", "a manifest that lies"]
)
def test_an_oci_save_whose_index_leads_elsewhere_or_whose_blob_lies_is_refused(case: str) -> None:
    raw, held = oci_archive([os.urandom(100)])
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # type: ignore[union-attr]
    changed = {
        "index.json names no manifest": {"index.json": b'{"manifests": []}'},
        "an absent manifest": {
            "index.json": json.dumps({"manifests": [{"digest": "sha256:" + "1" * 64}]}).encode()
        },
        "a manifest that lies": {
            f"blobs/sha256/{held['manifest'][7:]}": b'{"config": {"digest": "x"}}'
        },
    }[case]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in {**members, **changed}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    filt = SaveFilter(held["manifest"], held["diff_ids"])
    run(filt, buffer.getvalue(), 4096)
    with pytest.raises(SglxError, match="not the archive sglx expects"):
        filt.layers()


def test_a_delta_of_an_oci_save_leaves_out_the_uncompressed_layers_the_site_holds() -> None:
    """The classic store's OCI save (and the containerd store's, for layers it loaded from a
    classic archive) names each layer blob by its diff id: a delta leaves those out."""
    layers = [os.urandom(3000), os.urandom(2000), os.urandom(100)]
    raw, held = oci_archive(layers)
    chains = chain_ids(held["diff_ids"])
    filt = SaveFilter(held["config"], held["diff_ids"], frozenset(chains[:2]))
    out = run(filt, raw, 700)
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        names = set(tar.getnames())
    assert {f"blobs/sha256/{d[7:]}" for d in held["diff_ids"]} & names == {
        f"blobs/sha256/{held['diff_ids'][2][7:]}"
    }
    assert [x.carried for x in filt.layers()] == [False, False, True]
    assert len(out) < len(raw) - 4000


def test_a_delta_carries_the_layers_the_engine_keeps_compressed() -> None:
    """No diff id names a compressed blob (the containerd store's own builds): it is carried,
    and a delta that could leave out none of its parent's layers is refused by create."""
    raw, held = oci_archive([os.urandom(3000), os.urandom(10)], compress=True)
    filt = SaveFilter(held["manifest"], held["diff_ids"], frozenset(chain_ids(held["diff_ids"])))
    assert run(filt, raw, 4096) == raw
    assert [x.carried for x in filt.layers()] == [True, True]


def podman_archive(layers: list[bytes]) -> tuple[bytes, str, list[str]]:
    """A save as podman's Docker-compatible API writes it (checked against podman 5.8.6): each
    layer as `<diff id hex>.tar` first, the config `<hex>.json`, then legacy folders whose
    `layer.tar` links to the flat tar, `manifest.json` naming the flat tars, no tags."""
    diff_ids = [digest_of(data) for data in layers]
    config = json.dumps({"rootfs": {"type": "layers", "diff_ids": diff_ids}}).encode()
    config_id = digest_of(config)
    flat = [f"{d[7:]}.tar" for d in diff_ids]
    manifest = [{"Config": f"{config_id[7:]}.json", "RepoTags": [], "Layers": flat}]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        for name, data in zip(flat, layers, strict=True):
            add(name, data)
        add(f"{config_id[7:]}.json", config)
        for index, name in enumerate(flat):
            folder = f"{index:064x}"
            link = tarfile.TarInfo(f"{folder}/layer.tar")
            link.type, link.linkname = tarfile.SYMTYPE, f"../{name}"
            tar.addfile(link)
            add(f"{folder}/VERSION", b"1.0")
        add("manifest.json", json.dumps(manifest).encode())
        add("repositories", b"{}")
    return buffer.getvalue(), config_id, diff_ids


def test_podmans_archive_is_read_and_a_delta_leaves_out_its_flat_layer_tars_with_their_links() -> (
    None
):
    layers = [os.urandom(3000), os.urandom(200)]
    raw, config_id, diff_ids = podman_archive(layers)
    full = SaveFilter(config_id, diff_ids)
    assert run(full, raw, 512) == raw
    assert [x.carried for x in full.layers()] == [True, True]
    delta = SaveFilter(config_id, diff_ids, frozenset(chain_ids(diff_ids)[:1]))
    out = run(delta, raw, 512)
    with tarfile.open(fileobj=io.BytesIO(out)) as tar:
        names = set(tar.getnames())
    assert f"{diff_ids[0][7:]}.tar" not in names and f"{0:064x}/layer.tar" not in names
    assert {f"{diff_ids[1][7:]}.tar", f"{1:064x}/layer.tar"} <= names
    assert [x.carried for x in delta.layers()] == [False, True]


def _nested(levels: int, config_digest: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A descriptor naming `levels` image indexes around a manifest of `config_digest`, and the
    blobs by digest."""
    blobs: dict[str, Any] = {}
    document: dict[str, Any] = {"mediaType": OCI_MANIFEST, "config": {"digest": config_digest}}
    for level in range(levels + 1):
        digest = f"sha256:{level:064x}"
        blobs[digest] = document
        descriptor = {"digest": digest}
        document = {
            "mediaType": OCI_INDEX,
            "manifests": [{"digest": "sha256:" + "f" * 64}, descriptor],
        }
    return descriptor, blobs


@pytest.mark.parametrize(("levels", "found"), [(0, True), (1, True), (2, True), (3, False)])
def test_the_index_walk_follows_two_image_indexes_and_skips_a_platform_left_out(
    levels: int, found: bool
) -> None:
    """One walk (image_identity.leads_to_config) serves base load and the save stream: a
    manifest not held (another platform) leads nowhere, and nesting deeper than
    MAX_INDEX_DEPTH is not followed."""
    config = "sha256:" + "c" * 64
    top, blobs = _nested(levels, config)
    read = lambda descriptor, where: blobs.get(descriptor["digest"], False)  # noqa: E731
    assert leads_to_config(top, config, read, "index.json") is found
    assert leads_to_config(top, "sha256:" + "d" * 64, read, "index.json") is False

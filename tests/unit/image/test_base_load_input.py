"""`sglx base load FILE` checks everything it can before the engine: the sidecar, the sha256,
every tar member, the manifest or OCI index, the tag and the pinned digest.

DOCKER_HOST points at a socket nothing listens on, so a refusal that mentions no engine proves
the engine was never contacted; a valid archive gets as far as "no Docker engine answers"."""

from __future__ import annotations

import hashlib
import json
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.image_archives import (
    Member,
    blob_digest,
    docker_25_members,
    docker_members,
    file_member,
    image_id,
    layer_tar,
    oci_members,
    special_member,
    with_sidecar,
    write_tar,
)
from helpers.images_copy import copy_images, edit_yaml

from sglx.base_archive import MAX_JSON_BYTES, MAX_MEMBERS

CliRunner = Callable[..., tuple[int, str, str]]
NO_ENGINE = "no Docker engine answers"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"


@pytest.fixture(autouse=True)
def no_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, run_id: str) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine-{run_id}.sock")


def _refused(sglx: CliRunner, archive: Path, *extra: str, code: str = "archive_invalid") -> str:
    """Run `sglx base load`, assert it stopped with exit 2 before the engine; its stderr."""
    status, out, err = sglx("base", "load", str(archive), "-q", *extra)
    assert status == 2, (out, err)
    assert "Traceback" not in out + err
    assert NO_ENGINE not in err
    assert err.startswith("sglx: error: ")
    assert "  hint: " in err
    status, out, _ = sglx("base", "load", str(archive), "-q", "--json", *extra)
    assert status == 2
    assert json.loads(out)["errors"][0]["code"] == code
    return err


def _archive(tmp_path: Path, members: list[Member], name: str = "base.tar") -> Path:
    return with_sidecar(write_tar(tmp_path / name, members))


def test_a_valid_docker_archive_or_oci_layout_reaches_the_engine_only_after_the_checks(
    sglx: CliRunner, tmp_path: Path
) -> None:
    for archive in (
        _archive(tmp_path, docker_members(tags=["vendor/base:1"]), "docker.tar"),
        _archive(tmp_path, oci_members(ref="vendor/base:1"), "oci.tar"),
    ):
        status, out, err = sglx("base", "load", str(archive), "-q")
        assert status == 2
        assert NO_ENGINE in err
        assert "Traceback" not in out + err


@pytest.mark.parametrize(
    "content", [b"", b"this is not a tar archive at all\n" * 40, bytes(range(256)) * 8]
)
def test_a_file_that_is_not_a_tar_is_refused_before_the_engine(
    sglx: CliRunner, tmp_path: Path, content: bytes
) -> None:
    archive = tmp_path / "base.tar"
    archive.write_bytes(content)
    with_sidecar(archive)
    assert "not a tar archive" in _refused(sglx, archive)


@pytest.mark.parametrize(
    ("cut", "words"),
    [
        (lambda last: 1100, "truncated or damaged: no end-of-archive marker"),  # in a header
        (lambda last: 1700, "not a readable tar archive (unexpected end of data)"),
        (lambda last: last + 10, "not a readable tar archive (unexpected end of data)"),
    ],
)
def test_a_truncated_tar_is_refused(
    sglx: CliRunner, tmp_path: Path, cut: Callable[[int], int], words: str
) -> None:
    whole = write_tar(tmp_path / "whole.tar", docker_members())
    with tarfile.open(whole) as tar:
        last = tar.getmember("manifest.json").offset_data
    archive = tmp_path / "base.tar"
    archive.write_bytes(whole.read_bytes()[: cut(last)])
    with_sidecar(archive)
    err = _refused(sglx, archive)
    assert words in err and "copy it again from the connected side" in err


@pytest.mark.parametrize(
    ("sidecar", "words"),
    [
        (b"", "empty, it holds no sha256"),
        (b"\n \n", "empty, it holds no sha256"),
        (b"\x89PNG\r\n\x1a\n\x00\xff\xfe", "not a sha256sum file (it holds binary data"),
        (b"not-a-digest  base.tar\n", "base.tar.sha256:1: not a sha256sum line"),
        (b"a" * 64 + b"  one.tar\n" + b"b" * 64 + b"  two.tar\n", "2 checksums and none for"),
        (b"0" * (64 << 10) + b"\n", "is too big for a sha256sum file"),
    ],
)
def test_a_bad_sidecar_is_named_with_the_fix(
    sglx: CliRunner, tmp_path: Path, sidecar: bytes, words: str
) -> None:
    archive = write_tar(tmp_path / "base.tar", docker_members())
    (tmp_path / "base.tar.sha256").write_bytes(sidecar)
    err = _refused(sglx, archive, code="checksum_invalid")
    assert words in err
    assert "sha256sum base.tar > base.tar.sha256" in err


def test_a_sidecar_listing_several_files_picks_the_archives_line(
    sglx: CliRunner, tmp_path: Path
) -> None:
    archive = write_tar(tmp_path / "base.tar", docker_members())
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    (tmp_path / "base.tar.sha256").write_text(f"{'a' * 64}  other.tar\n{digest} *base.tar\n")
    status, _, err = sglx("base", "load", str(archive), "-q")
    assert status == 2 and NO_ENGINE in err


def test_a_bad_sha256_option_and_a_wrong_checksum_are_refused(
    sglx: CliRunner, tmp_path: Path
) -> None:
    archive = write_tar(tmp_path / "base.tar", docker_members())
    err = _refused(sglx, archive, "--sha256", "xyz", code="usage")
    assert "--sha256 'xyz' is not a sha256 (64 hex digits)" in err
    err = _refused(sglx, archive, "--sha256", "0" * 64, code="checksum_mismatch")
    assert f"does not match the expected {'0' * 64}" in err
    err = _refused(sglx, archive, code="checksum_missing")
    assert "no checksum for" in err and "pass --sha256 HEX or put base.tar.sha256" in err


def _evil(member: Member) -> list[Member]:
    return [*docker_members(), member]


@pytest.mark.parametrize(
    ("member", "words"),
    [
        (file_member("../evil", b"x"), "member '../evil' has a '..' path component"),
        (file_member("layer0/../../evil", b"x"), "has a '..' path component"),
        (file_member("/etc/cron.d/evil", b"x"), "member '/etc/cron.d/evil' is an absolute path"),
        (
            special_member("layer0/up", tarfile.SYMTYPE, "../../etc/passwd"),
            "member 'layer0/up' links outside the archive ('../../etc/passwd')",
        ),
        (
            special_member("layer0/abs", tarfile.SYMTYPE, "/etc/passwd"),
            "links to the absolute path '/etc/passwd'",
        ),
        (special_member("hard", tarfile.LNKTYPE, "../outside"), "links outside the archive"),
        (special_member("dev/sda", tarfile.BLKTYPE), "is a device file or fifo"),
        (special_member("dev/tty", tarfile.CHRTYPE), "is a device file or fifo"),
        (special_member("pipe", tarfile.FIFOTYPE), "is a device file or fifo"),
        (file_member("./layer0/layer.tar", b"again"), "member 'layer0/layer.tar' appears twice"),
    ],
)
def test_a_member_that_could_escape_or_is_not_a_plain_file_is_refused(
    sglx: CliRunner, tmp_path: Path, member: Member, words: str
) -> None:
    assert words in _refused(sglx, _archive(tmp_path, _evil(member)))


def test_too_many_members_are_refused(sglx: CliRunner, tmp_path: Path) -> None:
    extra = [file_member(f"pad/{i}", b"") for i in range(MAX_MEMBERS)]
    err = _refused(sglx, _archive(tmp_path, [*docker_members(), *extra]))
    assert f"more than {MAX_MEMBERS} members" in err


def _docker_with(tmp_path: Path, manifest: bytes) -> Path:
    members = [m for m in docker_members() if m[0].name != "manifest.json"]
    return _archive(tmp_path, [*members, file_member("manifest.json", manifest)])


@pytest.mark.parametrize(
    ("manifest", "words"),
    [
        (b"{not json", "manifest 'manifest.json' is not valid JSON"),
        (b"\xff\xfe", "manifest 'manifest.json' is not valid JSON"),
        (b'{"Config": "x"}', "manifest.json is not a list of images"),
        (b"[]", "manifest.json is not a list of images"),
        (b"[1]", "manifest.json[0] is not an object"),
        (b'[{"Layers": ["layer0/layer.tar"]}]', "manifest.json[0].Config is missing"),
        (b'[{"Config": "c.json", "Layers": []}]', "Layers is not a list of 1 to 500 paths"),
        (b'[{"Config": "c.json", "Layers": ["layer0/layer.tar"]}, {}]', "lists 2 images"),
        (
            b'[{"Config": "c.json", "Layers": ["nope/layer.tar"]}]',
            "layer 'nope/layer.tar' is not in the archive",
        ),
        (b'[{"Config": "c.json", "Layers": ["layer0/layer.tar"]}]', "config 'c.json' is not in"),
        (b" " * (MAX_JSON_BYTES + 1), f"more than the {MAX_JSON_BYTES} a JSON document"),
    ],
)
def test_a_malformed_docker_manifest_is_refused(
    sglx: CliRunner, tmp_path: Path, manifest: bytes, words: str
) -> None:
    assert words in _refused(sglx, _docker_with(tmp_path, manifest))


def test_a_config_that_disagrees_with_the_manifest_is_refused(
    sglx: CliRunner, tmp_path: Path
) -> None:
    members = docker_members()
    members[0] = file_member(members[0][0].name, b'{"rootfs": {"diff_ids": []}}')
    err = _refused(sglx, _archive(tmp_path, members))
    assert "the image config names 0 layers but the manifest 1" in err
    members[0] = file_member(members[0][0].name, b'{"os": "linux"}')
    err = _refused(sglx, _archive(tmp_path, members, "other.tar"))
    assert "the image config has no rootfs.diff_ids list" in err


def _index(edit: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    return edit


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (lambda i: i.pop("manifests"), "index.json has no 'manifests' list"),
        (lambda i: i.update(manifests=[]), "index.json has no 'manifests' list"),
        (lambda i: i.update(manifests="x"), "index.json has no 'manifests' list"),
        (lambda i: i["manifests"].append(i["manifests"][0]), "index.json lists 2 images"),
        (lambda i: i["manifests"][0].pop("digest"), "manifests[0].digest is missing or not"),
        (lambda i: i["manifests"][0].update(digest="md5:00"), "manifests[0].digest is missing"),
        (lambda i: i["manifests"][0].update(size="big"), "manifests[0].size is missing"),
        (
            lambda i: i["manifests"][0].update(size=i["manifests"][0]["size"] + 1),
            "its descriptor says",
        ),
        (
            lambda i: i["manifests"][0].update(digest="sha256:" + "e" * 64),
            f"manifest blob 'blobs/sha256/{'e' * 64}' is not in the archive",
        ),
        (
            lambda i: i["manifests"][0].update(mediaType="application/vnd.oci.image.index.v1+json"),
            "index.json points at a multi-platform index",
        ),
        (lambda i: i.update(manifests=[7]), "manifests[0] is not a descriptor object"),
    ],
)
def test_a_malformed_oci_index_is_refused(
    sglx: CliRunner, tmp_path: Path, edit: Callable[[dict[str, Any]], None], words: str
) -> None:
    assert words in _refused(sglx, _archive(tmp_path, oci_members(edit_index=edit)))


@pytest.mark.parametrize(
    ("index", "words"),
    [
        (b"[1, 2", "index 'index.json' is not valid JSON"),
        (b"[]", "index.json has no 'manifests' list"),
        (b'{"manifests": [' + b" " * MAX_JSON_BYTES + b"]}", "a JSON document"),
    ],
)
def test_an_oci_index_that_is_not_json_or_too_big_is_refused(
    sglx: CliRunner, tmp_path: Path, index: bytes, words: str
) -> None:
    members = [m for m in oci_members() if m[0].name != "index.json"]
    archive = _archive(tmp_path, [*members, file_member("index.json", index)])
    assert words in _refused(sglx, archive)


def test_an_archive_with_neither_manifest_nor_index_is_refused(
    sglx: CliRunner, tmp_path: Path
) -> None:
    err = _refused(sglx, _archive(tmp_path, [file_member("hello.txt", b"hi")]))
    assert "neither a docker-archive (manifest.json) nor an OCI layout (index.json)" in err
    assert "docker save -o FILE IMAGE" in err


def test_a_bad_tag_in_the_option_or_the_archive_is_refused(sglx: CliRunner, tmp_path: Path) -> None:
    archive = _archive(tmp_path, docker_members())
    err = _refused(sglx, archive, "--tag", "Vendor Base:1", code="usage")
    assert "--tag: 'Vendor Base:1' is not an image reference" in err
    tagged = _archive(tmp_path, docker_members(tags=["vendor/Base:1"]), "tagged.tar")
    err = _refused(sglx, tagged, code="usage")
    assert "RepoTags: 'vendor/Base:1' is not an image reference" in err


def test_an_archive_that_is_not_the_pinned_base_is_refused_before_loading(
    sglx: CliRunner, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    images = copy_images(tmp_path / "copy")
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(images))
    pin = "sha256:" + "1" * 64
    edit_yaml(images / "cpu" / "arch.yaml", {"base": {"digest": pin}})
    members = docker_members()
    err = _refused(sglx, _archive(tmp_path, members), "--arch", "cpu", code="base_mismatch")
    assert f"holds image {image_id(members)}, not the base the cpu profile pins ({pin})" in err
    assert "carry in the archive of the pinned base image" in err


# --- the id the containerd image store will give the image ---------------------------------


def test_the_containerd_stores_id_is_predicted_for_every_kind_of_save(tmp_path: Path) -> None:
    """Docker 20.10's archive: the manifest that store writes on loading it
    (sglx.image_identity.imported_manifest, checked against Docker 28.5.2); an OCI layout, and
    Docker 25+'s save that holds both: the manifest index.json names."""
    from sglx.base_archive import inspect_archive
    from sglx.image_identity import imported_manifest

    classic = docker_members()
    layer = next(d for i, d in classic if i.name == "layer0/layer.tar")
    config = next(d for i, d in classic if i.name.endswith(".json") and "/" not in i.name
                  and i.name != "manifest.json")  # fmt: skip
    assert layer is not None and config is not None
    expected = blob_digest(imported_manifest((blob_digest(config), len(config)),
                                         [(blob_digest(layer), len(layer))]))  # fmt: skip
    read = inspect_archive(write_tar(tmp_path / "classic.tar", classic))
    assert (read.image_id, read.manifest_digest) == (image_id(classic), expected)

    oci = oci_members()
    named = json.loads(next(d for i, d in oci if i.name == "index.json") or b"")
    read = inspect_archive(write_tar(tmp_path / "oci.tar", oci))
    assert read.manifest_digest == named["manifests"][0]["digest"]

    both = docker_25_members()
    read = inspect_archive(write_tar(tmp_path / "both.tar", both))
    assert read.kind == "docker-archive"
    assert (read.image_id, read.manifest_digest) == (image_id(oci), named["manifests"][0]["digest"])


def test_a_multi_platform_index_leads_to_the_saved_platform(tmp_path: Path) -> None:
    """A containerd-store save of a pulled base: index.json names an image index whose other
    platforms' manifests are not in the archive; the store names the image by that index."""
    from sglx.base_archive import inspect_archive

    made: dict[str, str] = {}

    def nest(members: list[Member]) -> None:
        at = next(n for n, (i, _) in enumerate(members) if i.name == "index.json")
        index = json.loads(members[at][1] or b"")
        other = {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                 "digest": "sha256:" + "e" * 64, "size": 10}  # fmt: skip
        platforms = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX,
                                "manifests": [other, index["manifests"][0]]}).encode()  # fmt: skip
        members.append(file_member(f"blobs/sha256/{blob_digest(platforms)[7:]}", platforms))
        index["manifests"] = [{"mediaType": OCI_INDEX, "digest": blob_digest(platforms),
                               "size": len(platforms)}]  # fmt: skip
        members[at] = file_member("index.json", json.dumps(index).encode())
        made["index"] = blob_digest(platforms)

    read = inspect_archive(write_tar(tmp_path / "nested.tar", docker_25_members(nest)))
    assert read.manifest_digest == made["index"]


def test_an_index_leading_to_another_image_than_the_manifest_is_refused(
    sglx: CliRunner, tmp_path: Path
) -> None:
    """The containerd store would load what index.json names, the classic store what
    manifest.json names: an archive where they differ is refused before the engine."""

    def elsewhere(members: list[Member]) -> None:
        other = docker_members(layer=layer_tar(b"another image\n"))
        config = next(d for i, d in other if i.name.endswith(".json") and "/" not in i.name
                      and i.name != "manifest.json")  # fmt: skip
        assert config is not None
        manifest = json.dumps({"schemaVersion": 2, "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json", "digest": blob_digest(config),
            "size": len(config)}, "layers": []}).encode()  # fmt: skip
        members.append(file_member(f"blobs/sha256/{blob_digest(manifest)[7:]}", manifest))
        members.append(file_member(f"blobs/sha256/{blob_digest(config)[7:]}", config))
        at = next(n for n, (i, _) in enumerate(members) if i.name == "index.json")
        members[at] = file_member("index.json", json.dumps({"schemaVersion": 2, "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": blob_digest(manifest), "size": len(manifest)}]}).encode())  # fmt: skip

    archive = with_sidecar(write_tar(tmp_path / "split.tar", docker_25_members(elsewhere)))
    err = _refused(sglx, archive)
    assert "index.json and manifest.json name different images" in err

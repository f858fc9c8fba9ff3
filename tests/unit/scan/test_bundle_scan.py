"""`sglx scan --bundle` reads the bundle format: the image from its chunks (never reassembled)
and the wheelhouse unzipped into the image's venv, where the cpu profile's `optional_files`
paths match. The bundle is written by the real chunk writer and manifest code, no engine."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from helpers.bundles import hand_bundle
from helpers.image_archives import docker_archive
from helpers.image_archives import tree_layer as layer
from test_scan_support import ElfFactory, needs_gcc

CliJson = Callable[..., tuple[int, dict[str, Any]]]
SITE = "/opt/sglx/venv/lib/python3.11/site-packages"


def wheel(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as whl:
        for name, data in files.items():
            whl.writestr(name, data)
    return buffer.getvalue()


@needs_gcc
def test_bundle_scan_reads_chunks_and_lays_the_wheelhouse_into_the_image_venv(
    tmp_path: Path, sglx_json: CliJson
) -> None:
    cc = ElfFactory(tmp_path / "build")
    runtime = cc.lib(tmp_path / "build/libruntime.so.1", libc=False)
    gone = cc.lib(tmp_path / "build/libgone.so.2", libc=False)
    app = cc.lib(tmp_path / "build/libapp.so", needs=[runtime, gone], libc=False)
    ext = cc.lib(tmp_path / "build/_ext.so", needs=[runtime], libc=False)
    fabric = cc.lib(tmp_path / "build/libfabric.so.1", libc=False)
    transport = cc.lib(tmp_path / "build/nvshmem_transport_x.so", needs=[fabric], libc=False)
    archive = docker_archive(
        tmp_path / "image.tar",
        [
            layer(
                [
                    ("opt/rt/libruntime.so.1", "file", runtime.read_bytes()),
                    ("opt/app/libapp.so", "file", app.read_bytes()),
                ]
            )
        ],
        env=["LD_LIBRARY_PATH=/opt/rt"],
    )
    whl = wheel(
        {
            "pkg/_ext.so": ext.read_bytes(),
            "pkg-1.0.data/platlib/pkg_plat/_ext2.so": ext.read_bytes(),
            "nvidia/nvshmem/lib/nvshmem_transport_x.so": transport.read_bytes(),
            "pkg-1.0.dist-info/RECORD": b"",
        }
    )
    bundle = hand_bundle(
        tmp_path / "bundle",
        archive,
        {"wheelhouse/pkg-1.0-cp311-cp311-linux_x86_64.whl": whl},
        chunk_size=4096,
    )
    assert len(list((bundle / "image").iterdir())) >= 3
    code, envelope = sglx_json("scan", "--bundle", str(bundle), "--arch", "cpu", "-q")
    assert code == 1
    image, wheels = envelope["data"]["scans"]
    assert (image["kind"], image["label"]) == ("image_archive", "image.tar[fixture-scan:test]")
    assert [(u["file"], u["needed"]) for u in image["unresolved"]] == [
        ("/opt/app/libapp.so", "libgone.so.2")
    ]
    assert wheels["kind"] == "wheelhouse"
    assert wheels["elf_files"] == 3
    assert wheels["unresolved"] == []
    # The transport's missing libfabric is accepted by the cpu profile's optional_files path,
    # because the wheel sits where the image's venv has it.
    accepted = {item["file"] for item in wheels["accepted"]}
    assert f"{SITE}/nvidia/nvshmem/lib/nvshmem_transport_x.so" in accepted
    assert all("nvshmem" not in (f.get("path") or "") for f in envelope["findings"])


def test_a_folder_that_is_not_a_bundle_is_a_usage_error(
    tmp_path: Path, sglx: Callable[..., tuple[int, str, str]]
) -> None:
    code, out, err = sglx("scan", "--bundle", str(tmp_path))
    assert code == 2
    assert "has no bundle.json: it is not an sglx bundle" in err
    assert "Traceback" not in out + err


def test_a_saved_archive_scans_whole_or_from_its_pieces_in_order(
    tmp_path: Path, sglx_json: CliJson
) -> None:
    """`--archive` is the generic chunked-archive target a bundle is translated into: a
    `docker save` file, or its pieces given in order, read as one stream."""
    archive = docker_archive(
        tmp_path / "image.tar",
        [layer([("opt/app/readme.txt", "file", b"x" * 6000)])],
        env=["LD_LIBRARY_PATH=/opt/rt"],
    )
    data = archive.read_bytes()
    pieces = []
    for i in range(0, len(data), 4096):
        pieces.append(tmp_path / f"image.tar.{i // 4096:03d}")
        pieces[-1].write_bytes(data[i : i + 4096])
    assert len(pieces) >= 3
    for given in ([archive], pieces):
        code, envelope = sglx_json("scan", "--archive", *map(str, given), "-q")
        assert code == 0, envelope
        [scan] = envelope["data"]["scans"]
        assert (scan["kind"], scan["label"]) == ("image_archive", "image.tar[fixture-scan:test]")
        assert scan["ld_library_path_from"] == "the image config in the archive"
        assert envelope["data"]["source"]["kind"] == "archive"


def test_a_bundle_chunk_cut_short_is_named_before_reading(
    tmp_path: Path, sglx_json: CliJson
) -> None:
    archive = docker_archive(tmp_path / "image.tar", [layer([("opt/a.txt", "file", b"a")])])
    bundle = hand_bundle(tmp_path / "bundle", archive, {}, chunk_size=4096)
    chunk = sorted((bundle / "image").iterdir())[1]
    chunk.write_bytes(chunk.read_bytes()[:100])
    code, envelope = sglx_json("scan", "--bundle", str(bundle), "-q")
    assert code == 2
    [error] = envelope["errors"]
    assert error["code"] == "corrupt"
    assert "chunks hold" in error["message"]
    assert "a chunk is cut short, grown or missing" in error["message"]
    assert "sglx bundle verify" in error["hint"]


def _bundle_with_profile(tmp_path: Path, profile_text: str) -> Path:
    """A bundle whose wheelhouse holds nvshmem's transport (its libfabric missing) and whose
    meta/arch.yaml is `profile_text`."""
    cc = ElfFactory(tmp_path / "build")
    fabric = cc.lib(tmp_path / "build/libfabric.so.1", libc=False)
    transport = cc.lib(tmp_path / "build/nvshmem_transport_x.so", needs=[fabric], libc=False)
    archive = docker_archive(
        tmp_path / "image.tar", [layer([("opt/app/readme.txt", "file", b"x")])], env=[]
    )
    whl = wheel({"nvidia/nvshmem/lib/nvshmem_transport_x.so": transport.read_bytes()})
    return hand_bundle(
        tmp_path / "bundle",
        archive,
        {
            "wheelhouse/nvidia_nvshmem-1.0-py3-none-linux_x86_64.whl": whl,
            "meta/arch.yaml": profile_text.encode(),
        },
        chunk_size=4096,
    )


@needs_gcc
def test_a_bundle_is_scanned_by_its_own_profile_unless_arch_names_another(
    tmp_path: Path, sglx_json: CliJson
) -> None:
    """The bundle's meta/arch.yaml (the profile baked into its image) sets the rules, not the
    checkout's profile: here the bundle's profile accepts nothing optional, so the transport's
    missing libfabric is a finding; `--arch cpu` asks for the checkout's cpu rules instead."""
    from sglx_core.profile import load_profile
    from sglx_core.profile.resolved import resolved_text

    cpu = load_profile("cpu")
    strict = cpu.model_copy(update={"scan": cpu.scan.model_copy(update={"optional_files": {}})})
    bundle = _bundle_with_profile(tmp_path, resolved_text(strict))
    missing = "needs libfabric.so.1, which is not found"
    _, own = sglx_json("scan", "--bundle", str(bundle), "-q")
    assert missing in [f["message"] for f in own["findings"]]
    # The rest of the rules are the bundle's cpu profile's (torch's libraries it requires).
    assert any("libtorch_cpu.so" in f["message"] for f in own["findings"])
    _, checkout = sglx_json("scan", "--bundle", str(bundle), "--arch", "cpu", "-q")
    assert missing not in [f["message"] for f in checkout["findings"]]


def test_a_bundle_whose_profile_is_of_another_arch_is_refused(
    tmp_path: Path, sglx: Callable[..., tuple[int, str, str]]
) -> None:
    from sglx_core.profile import load_profile
    from sglx_core.profile.resolved import resolved_text

    archive = docker_archive(tmp_path / "image.tar", [layer([("a.txt", "file", b"x")])], env=[])
    bundle = hand_bundle(
        tmp_path / "bundle",
        archive,
        {"meta/arch.yaml": resolved_text(load_profile("gfx942")).encode()},
        chunk_size=4096,
    )
    code, out, err = sglx("scan", "--bundle", str(bundle))
    assert code == 2
    assert "meta/arch.yaml is the profile of arch gfx942, but bundle.json says cpu" in err
    assert "Traceback" not in out + err

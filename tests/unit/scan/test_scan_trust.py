"""What an unpacked image may do to the scanning machine (issue 21, items 7, 12, 13 and 14):
nothing written outside the scratch root through the image's links, layers inflated in constant
memory and within bounds, trees thousands of folders deep and long link chains handled without
recursion (and resolved as the kernel does, ELOOP past 40 links), and malformed archives
answered with the archive and the field, never "a bug in sglx"."""

from __future__ import annotations

import errno
import gzip
import io
import itertools
import json
import tarfile
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import hand_bundle
from helpers.image_archives import docker_archive
from helpers.image_archives import tree_layer as layer
from test_bundle_scan import wheel
from test_scan_support import ElfFactory, needs_gcc

from sglx.progress import Progress
from sglx.scan.archive import read_manifest, unpack_archive_image
from sglx.scan.inventory import names_only
from sglx.scan.layers import RootWriter
from sglx_core.errors import SglxError
from sglx_core.rootfs import MAX_LINKS, RootFS
from sglx_core.scratch import remove_tree

CliJson = Callable[..., tuple[int, dict[str, Any]]]
SITE = "/opt/sglx/venv/lib/python3.11/site-packages"
DEEP = 1500
QUIET = Progress("test", quiet=True)


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The folder every scratch root of the test goes to ($TMPDIR), removed even if deep."""
    folder = tmp_path / "tmpdir"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    yield folder
    remove_tree(folder)


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def bundle_of(tmp_path: Path, layers: list[bytes], files: dict[str, bytes] | None = None) -> Path:
    archive = docker_archive(tmp_path / "image.tar", layers)
    return hand_bundle(tmp_path / "bundle", archive, files or {}, chunk_size=1 << 20)


# -- item 7: a wheel never writes through an image's link -------------------------------------


@pytest.mark.parametrize("absolute", [True, False], ids=["absolute-link", "relative-link"])
def test_a_wheel_never_writes_through_an_image_link_onto_the_host(
    tmp_path: Path, scratch: Path, sglx_json: CliJson, absolute: bool
) -> None:
    host = tmp_path / "host-dir"
    host.mkdir()
    kept = tmp_path / "host-file.txt"
    kept.write_text("keep me\n")
    climb = "../" * 12
    folder_link = str(host) if absolute else climb + str(host).lstrip("/")
    file_link = str(kept) if absolute else climb + str(kept).lstrip("/")
    image = layer(
        [
            (f"{SITE[1:]}/x", "symlink", folder_link),
            (f"{SITE[1:]}/y.txt", "symlink", file_link),
        ]
    )
    whl = wheel(
        {"x/pwned-by-wheel.txt": b"pwned\n", "y.txt": b"pwned\n", "x.dist-info/RECORD": b""}
    )
    bundle = bundle_of(tmp_path, [image], {"wheelhouse/x-1.0-py3-none-any.whl": whl})

    code, envelope = sglx_json("scan", "--bundle", str(bundle), "--arch", "cpu", "-q")
    assert code in (0, 1), envelope
    assert [s["kind"] for s in envelope["data"]["scans"]] == ["image_archive", "wheelhouse"]
    code, envelope = sglx_json("bundle", "verify", str(bundle), "-q")
    assert code in (0, 1), envelope
    assert envelope["data"]["scan"] in ("ok", "findings"), envelope  # the scan did run

    assert list(host.iterdir()) == []
    assert kept.read_text() == "keep me\n"
    assert names(scratch) == []


# -- item 12: gzip layers inflate in constant memory and within bounds -----------------------


def gzip_layer(name: str, size: int) -> bytes:
    """A gzip layer holding one file of `size` zero bytes (a multiple of 16 MiB), made of
    concatenated gzip members (one stream to every gzip reader), so that building a 1 GiB bomb
    costs one 16 MiB compression."""
    info = tarfile.TarInfo(name)
    info.size = size
    block = 16 << 20
    zeros = gzip.compress(bytes(block), compresslevel=9)
    head = gzip.compress(info.tobuf(tarfile.USTAR_FORMAT, "utf-8", "surrogateescape"))
    return head + zeros * (size // block) + gzip.compress(bytes(10240))


def test_a_large_gzip_layer_inflates_in_constant_memory(tmp_path: Path) -> None:
    """tarfile's own `r|*` took 13 s and 433 MB for 128 MiB of zeros, growing as the square."""
    archive = docker_archive(tmp_path / "image.tar", [gzip_layer("zeros.txt", 128 << 20)])
    [image] = read_manifest(archive) or []
    writer = RootWriter(tmp_path / "root", QUIET, names_only=names_only)
    tracemalloc.start()
    started = time.monotonic()
    try:
        unpack_archive_image(image, writer, QUIET)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"peak {peak >> 20} MiB"
    assert time.monotonic() - started < 60
    assert writer.inflated == (128 << 20) + 512 + 10240


@pytest.mark.parametrize(
    ("layers", "bounds", "words"),
    [
        ([1 << 30], {"max_layer_bytes": 64 << 20}, "layer0/layer.tar inflates to more than 64 MiB"),
        (
            [48 << 20, 48 << 20],
            {"max_total_bytes": 64 << 20},
            "layer1/layer.tar brings the image's layers past 64 MiB in all",
        ),
    ],
    ids=["one-layer", "in-total"],
)
def test_a_gzip_bomb_stops_at_the_bound(
    tmp_path: Path, layers: list[int], bounds: dict[str, int], words: str
) -> None:
    archive = docker_archive(tmp_path / "image.tar", [gzip_layer("z.bin", n) for n in layers])
    assert archive.stat().st_size < 2 << 20
    [image] = read_manifest(archive) or []
    writer = RootWriter(tmp_path / "root", QUIET, **bounds)
    started = time.monotonic()
    with pytest.raises(SglxError) as caught:
        unpack_archive_image(image, writer, QUIET)
    assert time.monotonic() - started < 30
    assert caught.value.code == "too_large"
    assert f"{archive}: layer {words} (gzip)" in caught.value.message
    assert writer.inflated <= (64 << 20) + (2 << 20)


# -- item 13: deep trees and link chains -----------------------------------------------------


def chain(folder: Path, name: str, target: str, links: int) -> None:
    """`folder/name` -> c1 -> ... -> target: `links` links in all."""
    hops = [name, *(f"c{i}" for i in range(1, links)), target]
    for link, following in itertools.pairwise(hops):
        (folder / link).symlink_to(following)


@needs_gcc
@pytest.mark.parametrize("links", [MAX_LINKS, MAX_LINKS + 1])
def test_a_library_behind_more_than_40_links_is_not_found_as_the_kernel_says(
    tmp_path: Path, sglx_json: CliJson, links: int
) -> None:
    cc = ElfFactory(tmp_path / "build")
    dep = cc.lib(tmp_path / "build/libdep.so.1", libc=False)
    root = tmp_path / "root"
    cc.lib(root / "app/libapp.so", needs=[dep], runpath="$ORIGIN/../lib", libc=False)
    (root / "lib").mkdir()
    (root / "lib/libdep.real").write_bytes(dep.read_bytes())
    chain(root / "lib", "libdep.so.1", "libdep.real", links)
    try:
        (root / "lib/libdep.so.1").stat()
        kernel_found = True
    except OSError as exc:
        assert exc.errno == errno.ELOOP
        kernel_found = False
    assert kernel_found is (links <= MAX_LINKS)

    code, envelope = sglx_json("scan", str(root), "-q")
    [scan] = envelope["data"]["scans"]
    unresolved = [(u["file"], u["needed"]) for u in scan["unresolved"]]
    if kernel_found:
        assert (code, unresolved) == (0, [])
    else:
        assert (code, unresolved) == (1, [("/app/libapp.so", "libdep.so.1")])
    assert RootFS(root).resolve("/lib/libdep.so.1") == (
        "/lib/libdep.real" if kernel_found else None
    )


def test_deep_paths_and_long_chains_resolve_without_recursion(tmp_path: Path) -> None:
    root = tmp_path / "root"
    deep = str(root)
    try:
        root.mkdir()
        for _ in range(DEEP):  # Path.mkdir(parents=True) and os.makedirs recurse
            deep += "/d"
            Path(deep).mkdir()
        Path(deep, "f").write_text("x")
        (root / "lib").mkdir()
        (root / "lib/real").write_text("x")
        chain(root / "lib", "long", "real", 1200)
        rootfs = RootFS(root)
        assert rootfs.resolve("/d" * DEEP + "/f") == "/d" * DEEP + "/f"
        assert rootfs.resolve("/lib/long") is None  # ELOOP
        assert rootfs.resolve("/lib/c1160") == "/lib/real"  # the last 40 links of the chain
        (root / "loop").symlink_to("loop")
        assert rootfs.resolve("/loop/x") is None
    finally:
        remove_tree(root)
    assert not root.exists()


@needs_gcc
def test_a_deep_image_scans_and_its_scratch_root_is_removed(
    tmp_path: Path, scratch: Path, sglx_json: CliJson
) -> None:
    """1,500 folders deep, and a chain of 1,200 links: the unpacking, the scan and the removal
    of the scratch root all finish (they ended in RecursionError, the root left behind)."""
    cc = ElfFactory(tmp_path / "build")
    dep = cc.lib(tmp_path / "build/libdep.so.1", libc=False)
    app = cc.lib(tmp_path / "build/libapp.so", needs=[dep], runpath="$ORIGIN", libc=False)
    deep = "d/" * DEEP
    members = [(f"{deep}libapp.so", "file", app.read_bytes())]
    members += [(f"{deep}libdep.so.1", "file", dep.read_bytes()), ("lib/real", "file", b"x")]
    members += [("lib/long", "symlink", "c1")]
    members += [(f"lib/c{i}", "symlink", f"c{i + 1}") for i in range(1, 1199)]
    members += [("lib/c1199", "symlink", "real")]
    bundle = bundle_of(tmp_path, [layer(members)])

    code, envelope = sglx_json("scan", "--bundle", str(bundle), "--arch", "cpu", "-q")
    assert code in (0, 1), envelope
    [scan] = envelope["data"]["scans"]
    assert scan["elf_files"] == 2
    assert [u for u in scan["unresolved"] if u["needed"] == "libdep.so.1"] == []
    assert names(scratch) == []


# -- item 14: malformed image archives -------------------------------------------------------


def raw_archive(path: Path, manifest: Any, config: Any = None) -> Path:
    """A docker-archive with this manifest.json (bytes as given, or JSON) and config."""
    files = {
        "config.json": json.dumps(config or {"config": {"Env": []}}).encode(),
        "layer0/layer.tar": layer([("etc/hello", "file", b"hi")]),
        "manifest.json": manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode(),
    }
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


GOOD = {"Config": "config.json", "RepoTags": ["t:1"], "Layers": ["layer0/layer.tar"]}
MALFORMED = [
    ([{"RepoTags": [], "Layers": GOOD["Layers"]}], None, "entry 0: 'Config' is missing or null"),
    ([{**GOOD, "Layers": None}], None, "entry 0: 'Layers' is missing or null, not a list"),
    (["image"], None, "manifest.json entry 0 is a string, not an object"),
    ([{**GOOD, "Layers": [7]}], None, "entry 0: 'Layers' is a list holding a number"),
    ([GOOD], ["config"], "the config member 'config.json' is a list, not an object"),
    ([GOOD], {"config": {"Env": "A=1"}}, "'config.Env' is not a list of KEY=VALUE strings"),
    ({"images": []}, None, "manifest.json is an object, not a list of images"),
    (b'[{"Config": "a", "Config": "b"}]', None, "'manifest.json' member repeats the key 'Config'"),
]


@pytest.mark.parametrize(("manifest", "config", "words"), MALFORMED)
def test_a_malformed_image_archive_names_the_archive_and_the_field(
    tmp_path: Path, scratch: Path, sglx_json: CliJson, manifest: Any, config: Any, words: str
) -> None:
    archive = raw_archive(tmp_path / "image.tar", manifest, config)
    bundle = hand_bundle(tmp_path / "bundle", archive, {}, chunk_size=1 << 20)
    code, envelope = sglx_json("scan", "--bundle", str(bundle), "--arch", "cpu", "-q")
    assert code == 2
    [error] = envelope["errors"]
    assert error["message"].startswith(str(bundle / "image/image.tar"))
    assert words in error["message"]
    assert "bug in sglx" not in json.dumps(envelope)
    assert names(scratch) == []


def test_a_nul_byte_in_a_layer_pax_path_is_skipped(tmp_path: Path, scratch: Path) -> None:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, pax in (("etc/a", {"path": "etc/a\0b"}), ("etc/ok", {})):
            info = tarfile.TarInfo(name)
            info.size, info.pax_headers = 1, pax
            tar.addfile(info, io.BytesIO(b"x"))
        link = tarfile.TarInfo("etc/link")
        link.type, link.pax_headers = tarfile.SYMTYPE, {"linkpath": "/etc/a\0b"}
        tar.addfile(link)
    archive = docker_archive(tmp_path / "image.tar", [out.getvalue()])
    [image] = read_manifest(archive) or []
    writer = RootWriter(tmp_path / "root", QUIET)
    unpack_archive_image(image, writer, QUIET)
    assert names(tmp_path / "root/etc") == ["ok"]
    assert writer.stats.skipped == {"unsafe name": 2}

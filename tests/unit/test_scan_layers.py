"""Unpacking image archives safely, and `sglx scan --bundle` on a hand-built bundle.

The docker-archive is assembled here with tarfile in the format `docker save` writes
(manifest.json, config JSON, one tar per layer), so whiteouts and hostile member names can be
tested without an engine.
"""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from sglx.progress import Progress
from sglx.scan.bundle import read_manifest, unpack_archive_image

CliJson = Callable[..., tuple[int, dict[str, Any]]]
Member = tuple[str, str, bytes | str | None]  # (name, kind, data or link target)


def layer(members: Sequence[Member]) -> bytes:
    """One layer tar: kinds are file, dir, symlink, hardlink, chardev."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, kind, data in members:
            info = tarfile.TarInfo(name)
            payload = None
            if kind == "file":
                payload = data if isinstance(data, bytes) else str(data or "").encode()
                info.size = len(payload)
                info.mode = 0o755
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(data)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(data)
            elif kind == "chardev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(info, None if payload is None else io.BytesIO(payload))
    return out.getvalue()


def docker_archive(path: Path, layers: Sequence[bytes], env: Sequence[str] = ()) -> Path:
    """A `docker save`-format archive of one image tagged fixture-scan:test."""
    config = {"architecture": "amd64", "os": "linux", "config": {"Env": list(env)}}
    files = {"config.json": json.dumps(config).encode()}
    names = []
    for i, data in enumerate(layers):
        names.append(f"layer{i}/layer.tar")
        files[names[-1]] = data
    manifest = [{"Config": "config.json", "RepoTags": ["fixture-scan:test"], "Layers": names}]
    files["manifest.json"] = json.dumps(manifest).encode()
    with tarfile.open(path, "w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def unpack(archive: Path, root: Path) -> dict[str, str]:
    [image] = read_manifest(archive) or []
    return unpack_archive_image(image, root, Progress("test", quiet=True))


def test_layers_apply_in_order_with_whiteouts(tmp_path: Path) -> None:
    base = layer(
        [
            ("usr/", "dir", None),
            ("usr/lib/libkeep.so.1", "file", "keep"),
            ("usr/lib/libgone.so.1", "file", "gone"),
            ("opt/stuff/a", "file", "a"),
            ("opt/stuff/b", "file", "b"),
            ("etc/ld.so.conf", "file", "/opt/old\n"),
        ]
    )
    top = layer(
        [
            ("usr/lib/.wh.libgone.so.1", "file", ""),
            ("opt/stuff/.wh..wh..opq", "file", ""),
            ("opt/stuff/c", "file", "c"),
            ("etc/ld.so.conf", "file", "/opt/new\n"),
        ]
    )
    archive = docker_archive(tmp_path / "image.tar", [base, top], env=["LD_LIBRARY_PATH=/x:/y"])
    root = tmp_path / "root"
    env = unpack(archive, root)
    assert env == {"LD_LIBRARY_PATH": "/x:/y"}
    assert sorted(p.name for p in (root / "usr/lib").iterdir()) == ["libkeep.so.1"]
    assert sorted(p.name for p in (root / "opt/stuff").iterdir()) == ["c"]
    assert (root / "etc/ld.so.conf").read_text() == "/opt/new\n"


def test_hostile_members_stay_inside_the_root(tmp_path: Path) -> None:
    host = tmp_path / "host"
    host.mkdir()
    (host / "secret").write_text("untouched")
    hostile = layer(
        [
            ("../escape", "file", "x"),
            ("/abs/file", "file", "abs"),
            ("evil", "symlink", str(host)),  # absolute: re-rooted when written through
            ("evil/secret", "file", "overwritten?"),
            ("up", "symlink", "../../../../.."),
            ("up/tmp/x", "file", "x"),
            ("dev/null", "chardev", None),
            ("bin/real", "file", "real"),
            ("bin/hard", "hardlink", "bin/real"),
            ("bin/hard-out", "hardlink", "../../etc/passwd"),
        ]
    )
    root = tmp_path / "root"
    unpack(docker_archive(tmp_path / "image.tar", [hostile]), root)
    assert (host / "secret").read_text() == "untouched"
    assert not (tmp_path / "escape").exists()
    assert (root / "abs/file").read_text() == "abs"
    assert (root / str(host).lstrip("/") / "secret").read_text() == "overwritten?"
    assert (root / "tmp/x").read_text() == "x"  # ".." stops at the root
    assert not (root / "dev/null").exists()
    assert (root / "bin/hard").read_text() == "real"
    assert not (root / "bin/hard-out").exists()


def test_a_tar_without_manifest_is_not_an_image_archive(tmp_path: Path) -> None:
    plain = tmp_path / "weights.tar"
    plain.write_bytes(layer([("model.safetensors", "file", "x")]))
    assert read_manifest(plain) is None


@pytest.mark.parametrize("name", ["../x", "a/../../x"])
def test_names_that_climb_out_are_refused(name: str) -> None:
    from sglx.scan.layers import clean_name

    assert clean_name(name) is None
    assert clean_name("/" + name.replace("..", "ok")) is not None

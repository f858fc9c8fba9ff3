"""Unpacking image archives safely, and `sglx scan --bundle` on a hand-built bundle.

The docker-archive is assembled with tarfile in the format `docker save` writes
(manifest.json, config JSON, one tar per layer: helpers/image_archives.py), so whiteouts and
hostile member names can be tested without an engine.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.image_archives import docker_archive
from helpers.image_archives import tree_layer as layer

from sglx.progress import Progress
from sglx.scan.archive import read_manifest, unpack_archive_image
from sglx.scan.layers import RootWriter

CliJson = Callable[..., tuple[int, dict[str, Any]]]


def unpack(archive: Path, root: Path) -> dict[str, str]:
    [image] = read_manifest(archive) or []
    progress = Progress("test", quiet=True)
    return unpack_archive_image(image, RootWriter(root, progress), progress)


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


def tree(root: Path, placeholders: dict[str, frozenset[str]]) -> dict[str, str]:
    """Every entry under `root` (what it is, a file's content, a link's target), the
    placeholders added as files of unknown content."""
    seen: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        name = "/" + path.relative_to(root).as_posix()
        if path.is_symlink():
            seen[name] = f"link -> {path.readlink()}"
        elif path.is_dir():
            seen[name] = "dir"
        else:
            seen[name] = f"file {path.read_text()!r}"
    for folder, names in placeholders.items():
        for name in names:
            seen[f"{folder.rstrip('/')}/{name}"] = "file (name only)"
    return seen


def test_files_kept_as_names_only_leave_the_same_tree(tmp_path: Path) -> None:
    """Unpacked with `names_only` (a scan's text files), the tree on disk plus the placeholders
    is the full unpack's tree, through whiteouts, opaque folders, links and replacements."""
    base = layer(
        [
            ("app/", "dir", None),
            ("app/mod.py", "file", "code"),
            ("app/gone.py", "file", "gone"),
            ("app/lib.so", "file", "elf"),
            ("app/alias.py", "hardlink", "app/mod.py"),
            ("app/plain", "hardlink", "app/mod.py"),
            ("app/to-mod", "symlink", "mod.py"),
            ("opq/old.py", "file", "old"),
            ("opq/old.so", "file", "old"),
            ("became-dir.py", "file", "f"),
            ("became-file.py/inner.py", "file", "inner"),
        ]
    )
    top = layer(
        [
            ("app/.wh.gone.py", "file", ""),
            ("opq/.wh..wh..opq", "file", ""),
            ("opq/new.py", "file", "new"),
            ("became-dir.py/", "dir", None),
            ("became-dir.py/x.txt", "file", "x"),
            ("became-file.py", "file", "now a file"),
            ("app/mod.py/z.so", "file", "refused: its parent is a file"),
        ]
    )
    archive = docker_archive(tmp_path / "image.tar", [base, top])
    [image] = read_manifest(archive) or []
    progress = Progress("test", quiet=True)
    full, held = tmp_path / "full", tmp_path / "held"
    unpack_archive_image(image, RootWriter(full, progress), progress)
    writer = RootWriter(held, progress, names_only=lambda name: name.endswith((".py", ".txt")))
    unpack_archive_image(image, writer, progress)

    def name_only(name: str, kind: str) -> bool:
        # /app/plain: a hard link to a file kept as its name only
        return kind.startswith("file") and (name.endswith((".py", ".txt")) or name == "/app/plain")

    assert not any(name_only(name, kind) for name, kind in tree(held, {}).items())
    expected = {
        name: "file (name only)" if name_only(name, kind) else kind
        for name, kind in tree(full, {}).items()
    }
    assert tree(held, dict(writer.placeholders)) == expected
    assert "/app/gone.py" not in expected and "/opq/old.py" not in expected
    assert expected["/became-dir.py"] == "dir"
    assert "/app/mod.py/z.so" not in expected

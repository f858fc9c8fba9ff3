"""`sglx scan` on damaged trees: ELF files cut short, files and folders it cannot read.

Fixtures are real gcc-built libraries. Files that cannot be read are made the honest way: mode
000 files and folders, scanned by the unprivileged user `nobody` in a subprocess (`setpriv`),
since root reads any file whatever its mode. Each case asserts the exit code, the finding codes
and words, and that no traceback appears.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from test_scan_support import ElfFactory, needs_gcc

pytestmark = needs_gcc
Cli = Callable[..., tuple[int, str, str]]
CliJson = Callable[..., tuple[int, dict[str, Any]]]
SGLX = Path(sys.executable).with_name("sglx")


def _cut(path: Path, keep: int) -> Path:
    """Keep the first `keep` bytes of `path` (negative: drop that many from the end)."""
    data = path.read_bytes()
    path.write_bytes(data[:keep])
    return path


def _segments_end(path: Path) -> int:
    """Where the last byte the loader maps (PT_LOAD, PT_DYNAMIC) ends in the file."""
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as handle:
        return max(
            s["p_offset"] + s["p_filesz"]
            for s in ELFFile(handle).iter_segments()
            if s["p_type"] in ("PT_LOAD", "PT_DYNAMIC")
        )


def _codes(envelope: dict[str, Any]) -> list[str]:
    return sorted(f["code"] for f in envelope["findings"])


def _finding(envelope: dict[str, Any], code: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = [f for f in envelope["findings"] if f["code"] == code]
    [finding] = found
    return finding


@pytest.fixture
def tree(tmp_path: Path) -> tuple[ElfFactory, Path]:
    return ElfFactory(tmp_path / "build"), tmp_path / "tree"


# -- files cut short ------------------------------------------------------------------------


def test_a_library_cut_short_is_damaged_not_missing(
    tree: tuple[ElfFactory, Path], sglx: Cli, sglx_json: CliJson
) -> None:
    cc, root = tree
    dep = cc.lib(root / "lib/libdep.so.1", libc=False)
    cc.lib(root / "lib/libtop.so", needs=[dep], runpath="$ORIGIN", libc=False)
    _cut(dep, _segments_end(dep) - 100)  # inside a segment: glibc dies with SIGBUS

    code, envelope = sglx_json("scan", str(root), "-q")

    assert code == 1
    assert _codes(envelope) == ["damaged_dependency", "damaged_elf"]
    damaged = _finding(envelope, "damaged_elf")
    assert damaged["path"] == "/lib/libdep.so.1"
    assert "ELF file cut short: the file is" in damaged["message"]
    assert "the loader cannot map it" in damaged["message"]
    assert "re-copy or reinstall /lib/libdep.so.1" in damaged["hint"]
    dependency = _finding(envelope, "damaged_dependency")
    assert dependency["path"] == "/lib/libtop.so"
    assert (
        "needs libdep.so.1; the file the loader finds for it, /lib/libdep.so.1, is cut short"
        in (dependency["message"])
    )
    assert "not found" not in json.dumps(envelope["findings"])
    [scan] = envelope["data"]["scans"]
    [listed] = scan["damaged_files"]
    assert listed["path"] == "/lib/libdep.so.1" and listed["problem"] == "truncated"
    assert damaged["message"] == f"ELF file {listed['reason']}"
    assert scan["unresolved"][0]["broken"] == "/lib/libdep.so.1"
    assert envelope["data"]["summary"]["damaged_files"] == 1

    code, out, err = sglx("scan", str(root), "-q")
    assert code == 1
    assert "libdep.so.1 (there, but damaged)" in out
    assert "finding [damaged_elf] /lib/libdep.so.1: ELF file cut short" in out
    assert "Traceback" not in out + err


def test_a_copy_cut_short_stops_the_search_as_glibc_does(
    tree: tuple[ElfFactory, Path], sglx_json: CliJson
) -> None:
    """glibc fails on the first file of the name ("file too short"): a whole copy later on the
    search path does not save the load."""
    cc, root = tree
    whole = cc.lib(root / "lib/b/libdep.so.1", libc=False)
    (root / "lib/a").mkdir()
    _cut(Path(shutil.copy(whole, root / "lib/a/libdep.so.1")), 100)
    cc.lib(root / "lib/libtop.so", needs=[whole], runpath="$ORIGIN/a:$ORIGIN/b", libc=False)

    code, envelope = sglx_json("scan", str(root), "-q")

    assert code == 1
    dependency = _finding(envelope, "damaged_dependency")
    assert (
        "/lib/a/libdep.so.1, is cut short (cut short: the file is 100 bytes"
        in (dependency["message"])
    )


def test_a_library_missing_only_its_section_headers_still_loads_but_is_reported(
    tree: tuple[ElfFactory, Path], sglx_json: CliJson
) -> None:
    cc, root = tree
    dep = cc.lib(root / "lib/libdep.so.1", libc=False)
    cc.lib(root / "lib/libtop.so", needs=[dep], runpath="$ORIGIN", libc=False)
    _cut(dep, _segments_end(dep))  # what the loader maps is whole; the section table is gone

    code, envelope = sglx_json("scan", str(root), "-q")

    assert code == 1
    assert _codes(envelope) == ["damaged_elf"]  # the dependency resolves, as in glibc
    message = _finding(envelope, "damaged_elf")["message"]
    assert "its section header table ends at byte" in message
    assert "the loader may still map it, but the copy is incomplete" in message
    assert envelope["data"]["summary"]["resolved"] == envelope["data"]["summary"]["dependencies"]


def test_a_damaged_dependency_outside_the_scanned_paths_is_named(
    tree: tuple[ElfFactory, Path], sglx_json: CliJson
) -> None:
    """With --root, a library outside the PATHs is read only when something needs it."""
    cc, root = tree
    dep = cc.lib(root / "usr/lib64/libdep.so.1", libc=False)
    cc.lib(root / "app/libtop.so", needs=[dep], libc=False)
    _cut(dep, 40)

    code, envelope = sglx_json("scan", "--root", str(root), str(root / "app"), "-q")

    assert code == 1
    assert _codes(envelope) == ["damaged_dependency"]
    dependency = _finding(envelope, "damaged_dependency")
    assert "/usr/lib64/libdep.so.1, is cut short" in dependency["message"]
    assert "less than the 64-byte ELF header" in dependency["message"]
    assert "re-copy or reinstall /usr/lib64/libdep.so.1" in dependency["hint"]


@pytest.mark.skipif(shutil.which("objcopy") is None, reason="objcopy is not installed")
def test_a_separate_debug_info_file_is_listed_not_a_finding(
    tree: tuple[ElfFactory, Path], sglx_json: CliJson
) -> None:
    cc, root = tree
    lib = cc.lib(root / "lib/libx.so", libc=False)
    debug = root / "usr/lib/debug/libx.so.debug"
    debug.parent.mkdir(parents=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(lib), str(debug)], check=True)

    code, envelope = sglx_json("scan", str(root), "-q")

    assert code == 0
    assert envelope["findings"] == []
    assert envelope["data"]["scans"][0]["damaged_files"] == []


# -- files the scanning user cannot read ----------------------------------------------------


@pytest.fixture
def shared_tree() -> Iterator[Path]:
    """A folder outside pytest's private tmp (mode 0700) that `nobody` can walk into."""
    top = Path(tempfile.mkdtemp(prefix="sglx-scan-damaged-"))
    top.chmod(0o755)
    try:
        yield top
    finally:
        for path in (top, *top.rglob("*")):
            if not path.is_symlink():
                path.chmod(0o755)
        shutil.rmtree(top)


def _scan_as_nobody(*argv: str) -> tuple[int, dict[str, Any], str]:
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("setpriv is not installed: cannot scan as an unprivileged user")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
    else:
        prefix = []  # already unprivileged: mode 000 is unreadable to this user
    done = subprocess.run(
        [*prefix, str(SGLX), "scan", *argv, "--json", "-q"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent"},
    )
    assert "Traceback" not in done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout), done.stderr


def test_a_tree_whose_every_elf_file_is_unreadable_is_not_clean(shared_tree: Path) -> None:
    cc = ElfFactory(shared_tree / "build")
    root = shared_tree / "tree"
    for name in ("liba.so", "libb.so.1"):
        cc.lib(root / "lib" / name, libc=False).chmod(0o000)
    (root / "lib").chmod(0o755)

    code, envelope, _ = _scan_as_nobody(str(root))

    assert code == 1
    assert _codes(envelope) == ["unreadable_file", "unreadable_file"]
    for finding in envelope["findings"]:
        assert finding["path"] in ("/lib/liba.so", "/lib/libb.so.1")
        assert finding["message"] == "cannot be opened (Permission denied), so it was not checked"
        assert "scan as a user who can read every file" in finding["hint"]
    assert envelope["data"]["summary"]["damaged_files"] == 2


def test_an_unreadable_dependency_and_an_unlistable_folder_are_named(shared_tree: Path) -> None:
    cc = ElfFactory(shared_tree / "build")
    root = shared_tree / "tree"
    dep = cc.lib(root / "lib/libdep.so.1", libc=False)
    cc.lib(root / "lib/libtop.so", needs=[dep], runpath="$ORIGIN", libc=False)
    cc.lib(root / "opt/sealed/libhidden.so", libc=False)
    dep.chmod(0o000)
    (root / "opt/sealed").chmod(0o000)

    code, envelope, _ = _scan_as_nobody(str(root))

    assert code == 1
    assert _codes(envelope) == ["damaged_dependency", "unreadable_file", "unreadable_file"]
    by_path = {f["path"]: f for f in envelope["findings"] if f["code"] == "unreadable_file"}
    assert by_path["/lib/libdep.so.1"]["message"].startswith("cannot be opened (Permission")
    assert by_path["/opt/sealed"]["message"] == (
        "folder cannot be listed (Permission denied): its files were not checked"
    )
    dependency = _finding(envelope, "damaged_dependency")
    assert dependency["path"] == "/lib/libtop.so"
    assert (
        "/lib/libdep.so.1, is unreadable (cannot be opened (Permission denied)"
        in (dependency["message"])
    )

"""Reading ELF dynamic-linking facts with pyelftools, on files gcc builds here."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from test_scan_support import ElfFactory, needs_gcc

from sglx.scan.elf import ElfError, ElfKind, has_elf_magic, read_elf

pytestmark = needs_gcc
X86_64 = ElfKind(64, True, "EM_X86_64")


@pytest.fixture
def cc(tmp_path: Path) -> ElfFactory:
    return ElfFactory(tmp_path / "build")


def test_needed_soname_and_rpath_are_read_in_order(cc: ElfFactory, tmp_path: Path) -> None:
    one = cc.lib(tmp_path / "libone.so.1")
    two = cc.lib(tmp_path / "libtwo.so.2.0", "libtwo.so.2")
    lib = cc.lib(tmp_path / "libmain.so", needs=[two, one], rpath="$ORIGIN/lib:/opt/x")
    info = read_elf(str(lib))
    assert info is not None
    assert info.kind == X86_64
    assert info.elf_type == "ET_DYN"
    assert info.soname == "libmain.so"
    assert info.needed[:2] == ("libtwo.so.2", "libone.so.1")
    assert "libc.so.6" in info.needed
    assert info.rpath == ("$ORIGIN/lib", "/opt/x")
    assert info.runpath is None
    assert info.interpreter is None


def test_runpath_is_read_and_rpath_left_empty(cc: ElfFactory, tmp_path: Path) -> None:
    info = read_elf(str(cc.lib(tmp_path / "librun.so", runpath="$ORIGIN")))
    assert info is not None
    assert info.runpath == ("$ORIGIN",)
    assert info.rpath == ()


def test_rpath_is_ignored_when_runpath_is_also_present(cc: ElfFactory, tmp_path: Path) -> None:
    # ld writes one or the other; turn the DT_SONAME entry into a DT_RUNPATH to get both, as
    # old linkers produced them. glibc then ignores DT_RPATH, and so must we.
    lib = cc.lib(tmp_path / "libboth.so", "/runpath-dir", rpath="/rpath-dir")
    patch_dynamic_tag(lib, from_tag=14, to_tag=29)  # DT_SONAME -> DT_RUNPATH
    info = read_elf(str(lib))
    assert info is not None
    assert info.runpath == ("/runpath-dir",)
    assert info.rpath == ()
    assert info.soname is None


def test_program_has_interpreter_and_nodeflib_is_seen(cc: ElfFactory, tmp_path: Path) -> None:
    program = read_elf(str(cc.exe(tmp_path / "prog")))
    assert program is not None
    assert program.interpreter == "/lib64/ld-linux-x86-64.so.2"
    nodeflib = read_elf(str(cc.lib(tmp_path / "libnd.so", nodeflib=True)))
    assert nodeflib is not None and nodeflib.nodeflib


def test_32_bit_library_reports_its_class_and_machine(cc: ElfFactory, tmp_path: Path) -> None:
    info = read_elf(str(cc.lib(tmp_path / "lib32.so.1", m32=True, libc=False)))
    assert info is not None
    assert info.kind == ElfKind(32, True, "EM_386")
    assert info.kind.describe() == "i386 32-bit"


def test_non_elf_files_are_skipped_by_magic(tmp_path: Path) -> None:
    script = tmp_path / "libc.so"
    script.write_text("/* GNU ld script */\nGROUP ( libc.so.6 )\n")
    assert read_elf(str(script)) is None
    assert not has_elf_magic(str(script))


def test_truncated_elf_is_an_error_not_a_crash(cc: ElfFactory, tmp_path: Path) -> None:
    lib = cc.lib(tmp_path / "libcut.so")
    data = lib.read_bytes()
    cut = tmp_path / "libcut-short.so"
    cut.write_bytes(data[:40])
    with pytest.raises(ElfError):
        read_elf(str(cut))
    assert has_elf_magic(str(cut))


def patch_dynamic_tag(path: Path, *, from_tag: int, to_tag: int) -> None:
    """Rewrite the first dynamic entry with tag `from_tag` to `to_tag` (64-bit little endian)."""
    with path.open("rb") as handle:
        elf = ELFFile(handle)
        dynamic = next(s for s in elf.iter_segments() if s["p_type"] == "PT_DYNAMIC")
        offset, size = dynamic["p_offset"], dynamic["p_filesz"]
    data = bytearray(path.read_bytes())
    for entry in range(offset, offset + size, 16):
        tag, value = struct.unpack_from("<qQ", data, entry)
        if tag == from_tag:
            struct.pack_into("<qQ", data, entry, to_tag, value)
            path.write_bytes(bytes(data))
            return
    raise AssertionError(f"no dynamic tag {from_tag} in {path}")

"""Read what the dynamic loader reads from an ELF file, and nothing else.

`read_elf` checks the 4-byte magic first (most files in an image are not ELF), then parses the
ELF header, the program headers and the dynamic segment with pyelftools' struct definitions
(`elftools.elf.structs.ELFStructs`): DT_NEEDED, DT_SONAME, DT_RPATH, DT_RUNPATH, DF_1_NODEFLIB,
PT_INTERP, class and machine.

Why not `ELFFile`: opening a file with it builds every struct of the format and walks the section
headers to find the dynamic string table, about 1.5 ms a file (research/airgap.md 4.3). The loader
itself never reads section headers: it maps DT_STRTAB through the PT_LOAD segments, and so do we.
The layouts of the program header and dynamic entry come from pyelftools' structs (built once per
endianness and class) and are unpacked a whole table at a time; tag and type numbers come from
pyelftools' enums. That costs about 0.1 ms a file and works on stripped files without section
headers. The file is never executed.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from elftools.construct.core import ConstructError
from elftools.elf.enums import ENUM_D_TAG_COMMON, ENUM_E_MACHINE, ENUM_E_TYPE, ENUM_P_TYPE_BASE
from elftools.elf.structs import ELFStructs

ELF_MAGIC = b"\x7fELF"
EI_NIDENT = 16  # e_ident: magic, class, byte order, version, OS ABI, padding
# The largest ELF header (64-bit) is 64 bytes; the 32-bit one is 52.
_HEADER_SIZE = {32: 52, 64: 64}
# Program headers and dynamic entries larger than this are not from a real linker.
_MAX_PHNUM = 4096
_MAX_DYNAMIC = 1 << 20
_MAX_STRTAB = 64 << 20
# glibc's loader accepts these as "its" machine; names are pyelftools' ENUM_E_MACHINE keys.
MACHINE_NAMES = {
    "EM_X86_64": "x86-64",
    "EM_386": "i386",
    "EM_AARCH64": "aarch64",
    "EM_PPC64": "ppc64",
    "EM_S390": "s390x",
    "EM_RISCV": "riscv",
    "EM_AMDGPU": "amdgpu",
}
DF_1_NODEFLIB = 0x800


class ElfError(Exception):
    """The file starts like an ELF file but its headers or dynamic segment are unreadable."""


class ElfTruncated(ElfError):
    """The file ends before what the loader reads: cut short (an interrupted copy or download).

    Told apart from other unreadable headers because separate debug-info files also have
    dynamic segments that point nowhere, yet are whole: their program header table and every
    segment's file bytes lie inside the file. glibc fails on such a file where it finds it
    ("file too short", or SIGBUS when it touches a segment past the end) rather than searching on.
    """


# What is wrong with a file the scan could not use (`FileProblem.kind`).
TRUNCATED = "truncated"  # an ELF file cut short: a finding
UNREADABLE = "unreadable"  # could not be opened or read (permissions, I/O error): a finding
BAD_HEADERS = "bad_headers"  # ELF magic, headers unreadable (e.g. debug-info files): listed


class FileProblem(NamedTuple):
    """Why a file that may be an ELF file was not resolved, and how bad that is."""

    kind: str  # TRUNCATED, UNREADABLE or BAD_HEADERS
    reason: str


class ElfKind(NamedTuple):
    """What must match between an object and the libraries it may load (glibc `open_verify`).

    A named tuple: it keys the loader's caches, and tuples hash fast.
    """

    elf_class: int  # 32 or 64
    little_endian: bool
    machine: str  # pyelftools name, e.g. "EM_X86_64"

    def describe(self) -> str:
        name = MACHINE_NAMES.get(self.machine, self.machine.removeprefix("EM_").lower())
        endian = "" if self.little_endian else " big-endian"
        return f"{name} {self.elf_class}-bit{endian}"


@dataclass(frozen=True, slots=True)
class ElfInfo:
    """The dynamic-linking facts of one ELF file."""

    kind: ElfKind
    elf_type: str  # "ET_DYN", "ET_EXEC", ...
    interpreter: str | None  # PT_INTERP
    needed: tuple[str, ...]
    soname: str | None
    rpath: tuple[str, ...]  # DT_RPATH entries; empty when DT_RUNPATH is present (glibc ignores it)
    runpath: tuple[str, ...] | None  # DT_RUNPATH entries; None when absent
    nodeflib: bool  # DF_1_NODEFLIB: skip the default directories
    dynamic: bool  # has a PT_DYNAMIC segment
    # Set when the file ends before its section header table: what the loader reads is all
    # there (it never reads section headers), but the copy is incomplete.
    cut_short: str | None = None

    @property
    def loadable(self) -> bool:
        """Whether the loader can map this file as a dependency (a shared object)."""
        return self.elf_type in ("ET_DYN", "ET_EXEC")


def has_elf_magic(path: str) -> bool:
    """True when the file starts with the ELF magic (reads 4 bytes, follows no link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        return os.read(fd, 4) == ELF_MAGIC
    finally:
        os.close(fd)


def read_elf(path: str) -> ElfInfo | None:
    """The dynamic-linking facts of `path`, None when it is not an ELF file.

    Raises `ElfError` for a file with the ELF magic whose headers cannot be read, and `OSError`
    when the file cannot be opened.
    """
    with Path(path).open("rb") as handle:
        head = handle.read(64)
        if head[:4] != ELF_MAGIC:
            return None
        try:
            return _parse(handle, head, os.fstat(handle.fileno()).st_size)
        except (ConstructError, ValueError, KeyError, UnicodeDecodeError) as exc:
            raise ElfError(f"unreadable ELF headers ({exc.__class__.__name__}: {exc})") from None


def inspect_elf(path: str) -> tuple[ElfInfo | None, FileProblem | None]:
    """`read_elf`, with each way it can fail sorted into a `FileProblem`."""
    try:
        info = read_elf(path)
        if info is not None and info.cut_short is not None:
            return info, FileProblem(TRUNCATED, info.cut_short)
        return info, None
    except ElfTruncated as exc:
        return None, FileProblem(TRUNCATED, str(exc))
    except ElfError as exc:
        return None, FileProblem(BAD_HEADERS, str(exc))
    except OSError as exc:
        return None, FileProblem(
            UNREADABLE, f"cannot be read ({exc.strerror}), so it was not checked"
        )


@dataclass(frozen=True)
class _Layout:
    """A flat pyelftools struct compiled to one `struct.Struct`, to unpack whole tables at once."""

    names: tuple[str, ...]
    packer: struct.Struct

    @classmethod
    def of(cls, construct: Any, *, skip: int = 0) -> _Layout:
        """Compile `construct`'s fields after the first `skip` ones (e_ident is a sub-struct)."""
        names: list[str] = []
        formats: list[str] = []
        for field in construct.subcons[skip:]:
            base = getattr(field, "subcon", field)  # an Enum wraps the FormatField
            packer = getattr(base, "packer", None)
            if packer is None:
                continue  # computed fields such as Elf_Dyn.d_ptr
            names.append(field.name)
            formats.append(packer.format)
        endian = formats[0][0]
        return cls(tuple(names), struct.Struct(endian + "".join(f[1:] for f in formats)))

    def row(self, data: bytes, offset: int = 0) -> dict[str, int]:
        return dict(zip(self.names, self.packer.unpack_from(data, offset), strict=True))

    def rows(self, data: bytes, stride: int) -> list[dict[str, int]]:
        size = self.packer.size
        unpack = self.packer.unpack_from
        return [
            dict(zip(self.names, unpack(data, start), strict=True))
            for start in range(0, len(data) - size + 1, stride)
        ]


@dataclass(frozen=True)
class _Structs:
    ehdr: _Layout  # the ELF header after e_ident (16 bytes)
    phdr: _Layout
    dyn: _Layout


@cache
def _structs(little_endian: bool, elf_class: int) -> _Structs:
    """pyelftools' layouts for one kind of file, built once (building them is the slow part)."""
    structs = ELFStructs(little_endian=little_endian, elfclass=elf_class)
    structs.create_basic_structs()
    structs.create_advanced_structs()
    dyn = _Layout.of(structs.Elf_Dyn)
    if dyn.names != ("d_tag", "d_val"):  # _dynamic_entries unpacks (tag, value) pairs
        raise RuntimeError(f"unexpected pyelftools Elf_Dyn layout {dyn.names}")
    ehdr = _Layout.of(structs.Elf_Ehdr, skip=1)
    return _Structs(ehdr, _Layout.of(structs.Elf_Phdr), dyn)


_E_TYPE_NAMES = {value: name for name, value in ENUM_E_TYPE.items()}
_E_MACHINE_NAMES = {value: name for name, value in ENUM_E_MACHINE.items()}


_PT_LOAD = ENUM_P_TYPE_BASE["PT_LOAD"]
_PT_INTERP = ENUM_P_TYPE_BASE["PT_INTERP"]
_PT_DYNAMIC = ENUM_P_TYPE_BASE["PT_DYNAMIC"]
_DT = {
    name: ENUM_D_TAG_COMMON[name]
    for name in (
        "DT_NULL",
        "DT_NEEDED",
        "DT_STRTAB",
        "DT_STRSZ",
        "DT_SONAME",
        "DT_RPATH",
        "DT_RUNPATH",
        "DT_FLAGS_1",
    )
}
_DT_NAMES = {value: name for name, value in _DT.items()}
_STRING_TAGS = ("DT_NEEDED", "DT_SONAME", "DT_RPATH", "DT_RUNPATH")


def _parse(handle: BinaryIO, head: bytes, size: int) -> ElfInfo:
    if len(head) < 6 or head[4] not in (1, 2) or head[5] not in (1, 2):
        raise ElfError("unknown ELF class or byte order")
    elf_class = 32 if head[4] == 1 else 64
    little_endian = head[5] == 1
    if len(head) < _HEADER_SIZE[elf_class]:
        raise ElfTruncated(
            f"cut short: the file is {size} bytes, less than the {_HEADER_SIZE[elf_class]}-byte "
            "ELF header; the loader cannot map it"
        )
    structs = _structs(little_endian, elf_class)
    ehdr = structs.ehdr.row(head, EI_NIDENT)
    machine = _E_MACHINE_NAMES.get(ehdr["e_machine"], f"EM_{ehdr['e_machine']}")
    kind = ElfKind(elf_class, little_endian, machine)
    elf_type = _E_TYPE_NAMES.get(ehdr["e_type"], f"ET_{ehdr['e_type']}")

    if ehdr["e_phnum"] and ehdr["e_phnum"] <= _MAX_PHNUM:
        _check_extent([ehdr["e_phoff"] + ehdr["e_phnum"] * ehdr["e_phentsize"]], size)
    segments = _program_headers(handle, ehdr, structs.phdr, size)
    # Only segments with file bytes: a debug-info file keeps its segments with no bytes at the
    # offsets of the library it was split from, beyond its own end.
    _check_extent(
        (
            s["p_offset"] + s["p_filesz"]
            for s in segments
            if s["p_type"] in _SEGMENTS_READ and s["p_filesz"]
        ),
        size,
    )
    cut_short = _section_table_cut(ehdr, size)
    loads = [s for s in segments if s["p_type"] == _PT_LOAD]
    interpreter = None
    dynamic = None
    for segment in segments:
        if segment["p_type"] == _PT_INTERP and interpreter is None:
            raw = _read(handle, segment["p_offset"], segment["p_filesz"], size)
            interpreter = _c_string(raw, 0)
        elif segment["p_type"] == _PT_DYNAMIC and dynamic is None:
            dynamic = segment
    if dynamic is None:
        return ElfInfo(kind, elf_type, interpreter, (), None, (), None, False, False, cut_short)

    entries = _dynamic_entries(handle, dynamic, structs.dyn, size)
    strtab_addr = entries.get("DT_STRTAB", [None])[0]
    strsz = entries.get("DT_STRSZ", [0])[0]
    if strtab_addr is None:
        if any(tag in entries for tag in _STRING_TAGS):
            raise ElfError("dynamic segment has names but no DT_STRTAB")
        strings = b""
    else:
        offset = _file_offset(loads, strtab_addr)
        if offset is None or strsz > _MAX_STRTAB or offset + strsz > size:
            raise ElfError("DT_STRTAB lies outside the file (a separate debug-info file?)")
        strings = _read(handle, offset, strsz, size)

    def names(tag: str) -> tuple[str, ...]:
        return tuple(_c_string(strings, value) for value in entries.get(tag, ()))

    runpath = names("DT_RUNPATH")
    flags_1 = 0
    for value in entries.get("DT_FLAGS_1", ()):
        flags_1 |= value
    soname = names("DT_SONAME")
    return ElfInfo(
        kind=kind,
        elf_type=elf_type,
        interpreter=interpreter,
        needed=names("DT_NEEDED"),
        soname=soname[0] if soname else None,
        # get-dynamic-info.h: "If both RUNPATH and RPATH are given, the latter is ignored."
        rpath=() if runpath else _split_paths(names("DT_RPATH")),
        runpath=_split_paths(runpath) if runpath else None,
        nodeflib=bool(flags_1 & DF_1_NODEFLIB),
        dynamic=True,
        cut_short=cut_short,
    )


_SEGMENTS_READ = (_PT_LOAD, _PT_DYNAMIC, _PT_INTERP)


def _check_extent(ends: Iterable[int], size: int) -> None:
    """Raise `ElfTruncated` when what the loader reads ends past the end of the file."""
    needed = max(ends, default=0)
    if needed > size:
        raise ElfTruncated(
            f"cut short: the file is {size} bytes, its program headers describe {needed}; the "
            "loader cannot map it"
        )


def _section_table_cut(ehdr: dict[str, int], size: int) -> str | None:
    """Why the file is incomplete although the loader could map it, or None when it is whole.

    The section header table is written last, at the end of the file: a copy cut anywhere
    loses it first.
    """
    if not ehdr["e_shoff"]:
        return None
    # e_shnum 0 with e_shoff set: the count is in the first entry, which must be there.
    end = ehdr["e_shoff"] + max(ehdr["e_shnum"], 1) * ehdr["e_shentsize"]
    if end <= size:
        return None
    return (
        f"cut short: the file is {size} bytes, its section header table ends at byte {end}; "
        "the loader may still map it, but the copy is incomplete"
    )


def _program_headers(
    handle: BinaryIO, ehdr: dict[str, int], layout: _Layout, size: int
) -> list[dict[str, int]]:
    count = ehdr["e_phnum"]
    entry = ehdr["e_phentsize"]
    if count == 0:
        return []
    if count > _MAX_PHNUM or entry < layout.packer.size:
        raise ElfError(f"implausible program header table ({count} x {entry} bytes)")
    table = _read(handle, ehdr["e_phoff"], count * entry, size)
    if len(table) < count * entry:
        raise ElfError("program header table runs past the end of the file")
    return layout.rows(table, entry)


def _dynamic_entries(
    handle: BinaryIO, segment: dict[str, int], layout: _Layout, size: int
) -> dict[str, list[int]]:
    data = _read(handle, segment["p_offset"], min(segment["p_filesz"], _MAX_DYNAMIC), size)
    entries: dict[str, list[int]] = {}
    null = _DT["DT_NULL"]
    for tag, value in layout.packer.iter_unpack(data[: len(data) - len(data) % layout.packer.size]):
        if tag == null:
            break
        name = _DT_NAMES.get(tag)
        if name is not None:
            entries.setdefault(name, []).append(value)
    return entries


def _file_offset(loads: list[dict[str, int]], address: int) -> int | None:
    """Where a virtual address lives in the file, through the PT_LOAD segments."""
    for segment in loads:
        if segment["p_vaddr"] <= address < segment["p_vaddr"] + segment["p_filesz"]:
            return address - segment["p_vaddr"] + segment["p_offset"]
    return None


def _read(handle: BinaryIO, offset: int, length: int, size: int) -> bytes:
    if offset < 0 or offset > size:
        raise ElfError(f"offset {offset} lies outside the file ({size} bytes)")
    handle.seek(offset)
    return handle.read(min(length, size - offset))


def _c_string(data: bytes, offset: int) -> str:
    end = data.find(b"\0", offset)
    if offset >= len(data) or end < 0:
        raise ElfError(f"string at offset {offset} runs past the string table")
    try:
        text = data[offset:end].decode("utf-8")
    except UnicodeDecodeError:
        text = "\0"
    if not text.isprintable():
        raise ElfError("garbled name in the dynamic segment (a separate debug-info file?)")
    return text


def _split_paths(values: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(part for value in values for part in value.split(":"))

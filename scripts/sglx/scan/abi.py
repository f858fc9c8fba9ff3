"""What glibc's dynamic loader assumes for each kind of ELF file: default directories, `$LIB`,
`$PLATFORM` and the program interpreter.

These are facts of the C library and the CPU, not of an sglx arch, so they live here rather than
in a profile. glibc compiles them into ld.so; we cannot run the scanned root's ld.so, so we read
the root's layout instead:

- Debian and Ubuntu (multiarch): `/lib/<triplet>` or `/usr/lib/<triplet>` exists. The loader's
  system directories are `/lib/<triplet>`, `/usr/lib/<triplet>`, `/lib`, `/usr/lib` and `$LIB` is
  `lib/<triplet>` (what `ld.so --help` and `LD_DEBUG=libs` print on Debian 12).
- Otherwise (Fedora, RHEL, ...): `/lib64`, `/usr/lib64` for 64-bit files, `/lib`, `/usr/lib` for
  32-bit ones; `$LIB` is `lib64` or `lib`.

Not modelled: the glibc-hwcaps subdirectories (`glibc-hwcaps/x86-64-v3`, chosen by the site's CPU
at run time) and the legacy `tls`/platform subdirectories. A library found only there is reported
as unresolved, which is the answer for a CPU that lacks the feature.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglx.scan.elf import ElfKind
from sglx_core.rootfs import RootFS


@dataclass(frozen=True)
class Abi:
    triplet: str  # Debian multiarch tuple
    interpreter: str  # the PT_INTERP glibc programs of this kind carry
    platform: str  # AT_PLATFORM, what $PLATFORM expands to


_ABIS = {
    (64, True, "EM_X86_64"): Abi("x86_64-linux-gnu", "/lib64/ld-linux-x86-64.so.2", "x86_64"),
    (32, True, "EM_386"): Abi("i386-linux-gnu", "/lib/ld-linux.so.2", "i686"),
    (64, True, "EM_AARCH64"): Abi("aarch64-linux-gnu", "/lib/ld-linux-aarch64.so.1", "aarch64"),
    (64, True, "EM_PPC64"): Abi("powerpc64le-linux-gnu", "/lib64/ld64.so.2", "ppc64le"),
    (64, False, "EM_S390"): Abi("s390x-linux-gnu", "/lib/ld64.so.1", "s390x"),
}


@dataclass(frozen=True)
class LoaderDefaults:
    """The loader's built-in facts for one kind of object in one root."""

    system_dirs: tuple[str, ...]
    lib: str  # $LIB
    platform: str  # $PLATFORM
    interpreter: str | None  # the standard program interpreter, when the kind is known


def loader_defaults(rootfs: RootFS, kind: ElfKind) -> LoaderDefaults:
    abi = _ABIS.get((kind.elf_class, kind.little_endian, kind.machine))
    wide = kind.elf_class == 64
    dirs: tuple[str, ...]
    if abi is not None and (
        rootfs.is_dir(f"/lib/{abi.triplet}") or rootfs.is_dir(f"/usr/lib/{abi.triplet}")
    ):
        dirs = (f"/lib/{abi.triplet}", f"/usr/lib/{abi.triplet}", "/lib", "/usr/lib")
        lib = f"lib/{abi.triplet}"
    elif wide:
        dirs, lib = ("/lib64", "/usr/lib64"), "lib64"
    else:
        dirs, lib = ("/lib", "/usr/lib"), "lib"
    platform = abi.platform if abi is not None else kind.machine.removeprefix("EM_").lower()
    return LoaderDefaults(dirs, lib, platform, abi.interpreter if abi is not None else None)

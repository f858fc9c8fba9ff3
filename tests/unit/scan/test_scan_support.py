"""Helpers for the scan tests (no tests here): ELF fixtures compiled with gcc, and ldd's view.

Fixtures are real shared objects and programs, built in the test's tmp_path. A dependency is
recorded by linking against a library file by its path, so DT_NEEDED holds that library's
SONAME; linking against a library kept outside the scanned tree makes a missing dependency.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from sglx.scan.analysis import ScanReport, Target, analyze
from sglx.scan.rules import Rules

# soname -> (file name, sonames it needs). The sonames of an apt-installed ROCm 7.2.4; the HIP
# runtime's (libamdhip64.so.7, libamd_comgr.so.3, libhsa-runtime64.so.1) are ROCm 10's too
# (images/shared/rocm.yaml, scan.require).
ROCM_LIBS = {
    "libhsa-runtime64.so.1": ("libhsa-runtime64.so.1.18.70204", ()),
    "libamd_comgr.so.3": ("libamd_comgr.so.3.0.70204", ()),
    "libamdhip64.so.7": (
        "libamdhip64.so.7.2.70204",
        ("libhsa-runtime64.so.1", "libamd_comgr.so.3"),
    ),
    "librocblas.so.5": ("librocblas.so.5.2.70204", ("libamdhip64.so.7",)),
    "libhipblaslt.so.1": ("libhipblaslt.so.1.2.70204", ("libamdhip64.so.7",)),
    "librccl.so.1": ("librccl.so.1.0.70204", ("libamdhip64.so.7",)),
    "librocm_smi64.so.7": ("librocm_smi64.so.7.8.70204", ()),
}
ROCM_DIR = "opt/rocm-7.2.4"
ROCM_DATA = (
    "opt/rocm/bin/rocminfo",
    "usr/share/libdrm/amdgpu.ids",
    "opt/rocm/lib/rocblas/library/TensileLibrary_lazy_gfx942.dat",
    "opt/rocm/lib/hipblaslt/library/hipblasltExtOpLibrary_gfx942.dat",
)
needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="gcc is not installed")


class ElfFactory:
    """Builds shared objects and programs with gcc."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.work.mkdir(parents=True, exist_ok=True)

    def lib(
        self,
        dest: Path,
        soname: str | None = None,
        *,
        needs: Sequence[Path] = (),
        rpath: str | None = None,
        runpath: str | None = None,
        m32: bool = False,
        libc: bool = True,
        nodeflib: bool = False,
    ) -> Path:
        """A shared object at `dest` (SONAME defaults to its file name)."""
        flags = ["-shared", "-fPIC", f"-Wl,-soname,{soname or dest.name}"]
        return self._build(dest, flags, needs, rpath, runpath, m32, libc, nodeflib, main=False)

    def exe(
        self,
        dest: Path,
        *,
        needs: Sequence[Path] = (),
        rpath: str | None = None,
        runpath: str | None = None,
    ) -> Path:
        """A program (PIE, with the standard PT_INTERP)."""
        return self._build(dest, [], needs, rpath, runpath, False, True, False, main=True)

    def _build(
        self,
        dest: Path,
        flags: list[str],
        needs: Sequence[Path],
        rpath: str | None,
        runpath: str | None,
        m32: bool,
        libc: bool,
        nodeflib: bool,
        *,
        main: bool,
    ) -> Path:
        symbol = "f_" + hashlib.sha1(str(dest).encode()).hexdigest()[:12]
        source = self.work / f"{symbol}.c"
        body = f"int {symbol}(void) {{ return 0; }}\n"
        if main:
            body += "int main(void) { return 0; }\n"
        source.write_text(body)
        argv = ["gcc", *flags, "-o", str(dest), str(source)]
        if m32:
            argv.append("-m32")
        if not libc:
            argv.append("-nostdlib")
        if nodeflib:
            argv.append("-Wl,-z,nodefaultlib")
        if rpath is not None:
            argv += ["-Wl,--disable-new-dtags", f"-Wl,-rpath,{rpath}"]
        if runpath is not None:
            argv += ["-Wl,--enable-new-dtags", f"-Wl,-rpath,{runpath}"]
        argv += ["-Wl,--no-as-needed", *(str(n) for n in needs)]
        dest.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(argv, check=True, capture_output=True, text=True)
        return dest


def relink(link: Path, target: str) -> Path:
    """A symbolic link `link` -> `target` (made or replaced)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target)
    return link


def fixture_rocm(cc: ElfFactory, root: Path, *, without: tuple[str, ...] = ()) -> Path:
    """Stands in for a ROCm base: the HIP runtime, rocBLAS and friends as gcc-built shared
    objects with the sonames and layout of an apt-installed ROCm 7.2.4 (/opt/rocm ->
    /opt/rocm-7.2.4, an ld.so.conf.d entry), a torch library that needs them, and the data
    files the gfx942 profile names. Upstream's ROCm 10 layout (the pip SDK in site-packages,
    found through LD_LIBRARY_PATH) is helpers/rocm_base.py's, scanned as an image. Sonames in
    `without` are linked against but not shipped."""
    for d in ("lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "etc/ld.so.conf.d"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/rocm.conf").write_text("/opt/rocm/lib\n")
    relink(root / "opt/rocm", f"/{ROCM_DIR}")
    built: dict[str, Path] = {}
    for soname, (file_name, needs) in ROCM_LIBS.items():
        shipped = soname not in without
        lib_dir = root / ROCM_DIR / "lib" if shipped else cc.work / "not-shipped"
        built[soname] = cc.lib(
            lib_dir / file_name, soname, needs=[built[n] for n in needs], libc=False
        )
        if shipped:
            relink(lib_dir / soname, file_name)
            relink(lib_dir / (soname.split(".so")[0] + ".so"), soname)
    for rel in ROCM_DATA:  # written through the real folder: /opt/rocm is an absolute link
        path = root / rel.replace("opt/rocm/", f"{ROCM_DIR}/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("fixture\n")
    cc.lib(
        root / "opt/venv/torch/lib/libtorch_hip.so",
        needs=[built["libamdhip64.so.7"], built["librocblas.so.5"]],
        libc=False,
    )
    return root


_LDD_LINE = re.compile(r"^\s+(\S+) => (not found|\S+)")


def ldd(path: Path, ld_library_path: str | None = None) -> dict[str, str | None] | None:
    """What the system loader resolves for `path` (name -> real path, None if not found).

    Tests run it only on fixtures they built and on this machine's installed packages (ldd may
    execute what it inspects; the product never calls it). None when ldd refuses the file
    (static, or a class this machine has no loader for).
    """
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    if ld_library_path is not None:
        env["LD_LIBRARY_PATH"] = ld_library_path
    done = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        return None
    out: dict[str, str | None] = {}
    for line in done.stdout.splitlines():
        match = _LDD_LINE.match(line)
        if match:
            found = match.group(2)
            out.setdefault(
                match.group(1), None if found == "not found" else os.path.realpath(found)
            )
    return out


def scan(
    root: Path, *subtrees: str, rules: Rules | None = None, ldlp: Sequence[str] = ()
) -> ScanReport:
    """Run one scan in-process, keeping every closure."""
    target = Target(
        kind="tree",
        label=str(root),
        root=root,
        subtrees=subtrees or ("/",),
        ld_library_path=tuple(ldlp),
    )
    return analyze(target, rules or Rules(), jobs=1, progress=lambda _: None, keep_closures=True)


def resolved(report: ScanReport, root: Path, file: Path) -> dict[str, str | None]:
    """Our answer for one scanned file, as host real paths (comparable with `ldd`)."""
    assert report.closures is not None
    prefix = "" if str(root) == "/" else str(root.resolve())
    wanted = str(file.resolve())[len(prefix) :]
    for closure in report.closures:
        if closure.root == wanted:
            return {
                name: None if target is None else os.path.realpath(prefix + target)
                for name, target in closure.by_name().items()
            }
    raise AssertionError(f"{file} was not scanned")

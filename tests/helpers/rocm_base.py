"""Build context of a fixture that stands in for an upstream SGLang ROCm image's layout.

What it keeps of the real image: ROCm user space under /opt/rocm (gcc-built stand-ins under the
real sonames, rocminfo, amdgpu.ids, per-target kernel files), ROCm's version declared in
/opt/rocm/.info/version, and Python distributions declared by their pip metadata in the base
Python's site-packages (/usr/local/lib/python3.X/dist-packages, where `pip install` puts them
for the system Python on Debian and Ubuntu). Stand-in distributions (`metadata_only`) carry
only pip metadata: they declare a package the fixture cannot contain (AITER, sgl-kernel).
"""

from __future__ import annotations

from pathlib import Path

from helpers.elf import shared_library

ROCM_LIBS = [
    "libamdhip64.so.6",
    "libhsa-runtime64.so.1",
    "librocblas.so.4",
    "libhipblaslt.so.0",
    "librccl.so.1",
    "libamd_comgr.so.3",
    "librocm_smi64.so.7",
]
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"


def rocm_layout(folder: Path, *, rocm_version: str, metadata_only: dict[str, str]) -> Path:
    """A Dockerfile (ARG BASE) that adds the ROCm layout and the stand-in metadata."""
    libs = folder / "libs"
    for soname in ROCM_LIBS:
        shared_library(libs, soname, "int fixture_rocm(void) { return 0; }\n")
    (folder / "ld").mkdir(parents=True, exist_ok=True)
    (folder / "ld" / "rocm.conf").write_text("/opt/rocm/lib\n")
    info = folder / "info"
    info.mkdir(exist_ok=True)
    (info / "version").write_text(rocm_version + "\n")
    site = folder / "site"
    for name, version in metadata_only.items():
        dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: sglx test stand-in (metadata only)\n"
        )
        (dist / "RECORD").write_text("")
    site.mkdir(exist_ok=True)
    steps = [
        "ARG BASE",
        "FROM ${BASE}",
        "COPY libs/ /opt/rocm/lib/",
        "COPY ld/rocm.conf /etc/ld.so.conf.d/rocm.conf",
        "COPY info/ /opt/rocm/.info/",
        f"COPY site/ {SITE_PACKAGES}/",
        # ROCm's packages ship the unversioned development links too (Triton's HIP driver
        # dlopens libamdhip64.so by that name).
        'RUN cd /opt/rocm/lib && for f in *.so.*; do ln -s "$f" "${f%%.so.*}.so"; done '
        "&& ldconfig && mkdir -p /opt/rocm/bin /usr/share/libdrm "
        "/opt/rocm/lib/rocblas/library /opt/rocm/lib/hipblaslt/library "
        "&& printf '#!/bin/sh\\necho fixture rocminfo\\n' > /opt/rocm/bin/rocminfo "
        "&& chmod 755 /opt/rocm/bin/rocminfo "
        "&& echo '74A1, 00, fixture MI300X' > /usr/share/libdrm/amdgpu.ids "
        "&& for g in gfx942 gfx950 gfx1151; do "
        "touch /opt/rocm/lib/rocblas/library/TensileLibrary_$g.dat "
        "/opt/rocm/lib/hipblaslt/library/extop_$g.co; done",
    ]
    (folder / "Dockerfile").write_text("\n".join(steps) + "\n")
    return folder

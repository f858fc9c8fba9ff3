"""Build contexts of fixtures that stand in for the ROCm layouts of upstream's SGLang images.

Two layouts, as upstream's images have them:

- `sdk`, upstream's ROCm 10 release images (lmsysorg/sglang:v<VER>-rocm10-mi30x/-mi35x; sglang
  docker/rocm.Dockerfile, stage rocm1000-base): Python in a venv, /opt/venv, whose
  site-packages hold the ROCm pip SDK (rocm-sdk-core 10.0.0 and the rest). ROCm's tree is
  site-packages/_rocm_sdk_devel, /opt/rocm is a link to it (AITER calls
  /opt/rocm/llvm/bin/amdgpu-arch), and the libraries are found through LD_LIBRARY_PATH=
  $ROCM_HOME/lib, set in the image's environment, not through ld.so.conf. The SDK's libdrm has
  the amdgpu.ids table built in: no /usr/share/libdrm/amdgpu.ids. The release is declared by
  rocm-sdk-core's pip metadata; whether the SDK's tree also carries .info/version is not
  confirmed by our sources, so the fixture leaves it out and the probe's fallback is what runs.
- `apt`, an apt-installed ROCm 7.2.4 (the gfx1151 image, AMD's rocm/pytorch): /opt/rocm/lib in
  ld.so.conf, the release in /opt/rocm/.info/version, amdgpu.ids installed.

Both keep gcc-built stand-ins under the real sonames (the HIP runtime's are the same in ROCm 7.x
and 10.0), rocminfo, per-target kernel files, and Python distributions declared by their pip
metadata in the venv's site-packages. Stand-in distributions (`metadata_only`) carry only pip
metadata: they declare a package the fixture cannot contain (AITER, sgl-kernel). The fixture
base is the session's Debian, whose Python is 3.11 where upstream's is 3.12.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from helpers.elf import shared_library

# The sonames of an apt-installed ROCm 7.2.4. TheRock's pip SDK (ROCm 10) names rocm_smi's
# library librocm_smi64.so.1 instead.
ROCM_LIBS = [
    "libamdhip64.so.7",
    "libhsa-runtime64.so.1",
    "librocblas.so.5",
    "libhipblaslt.so.1",
    "librccl.so.1",
    "libamd_comgr.so.3",
    "librocm_smi64.so.7",
]
SDK_LIBS = [*ROCM_LIBS[:-1], "librocm_smi64.so.1"]
VENV = "/opt/venv"
SITE_PACKAGES = f"{VENV}/lib/python3.11/site-packages"
ROCM_HOME = f"{SITE_PACKAGES}/_rocm_sdk_devel"
Layout = Literal["sdk", "apt"]


def rocm_layout(
    folder: Path, *, layout: Layout, rocm_version: str, metadata_only: dict[str, str]
) -> Path:
    """A Dockerfile (ARG BASE) that adds the ROCm layout and the stand-in metadata."""
    sdk = layout == "sdk"
    libs = folder / "libs"
    for soname in SDK_LIBS if sdk else ROCM_LIBS:
        shared_library(libs, soname, "int fixture_rocm(void) { return 0; }\n")
    (folder / "ld").mkdir(parents=True, exist_ok=True)
    (folder / "ld" / "rocm.conf").write_text("/opt/rocm/lib\n")
    info = folder / "info"
    info.mkdir(exist_ok=True)
    (info / "version").write_text(rocm_version + "\n")
    site = folder / "site"
    dists = {**metadata_only, **({"rocm-sdk-core": rocm_version} if sdk else {})}
    for name, version in dists.items():
        dist = site / f"{name.replace('-', '_')}-{version}.dist-info"
        dist.mkdir(parents=True)
        (dist / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            "Summary: sglx test stand-in (metadata only)\n"
        )
        (dist / "RECORD").write_text("")
    site.mkdir(exist_ok=True)
    rocm = ROCM_HOME if sdk else "/opt/rocm"
    if sdk:
        placed = [
            # The layout lives in a venv: made here when the base has none (a small base).
            f"RUN [ -x {VENV}/bin/python3 ] || python3 -m venv --without-pip {VENV}",
            f"COPY libs/ {ROCM_HOME}/lib/",
            f"ENV ROCM_HOME={ROCM_HOME} ROCM_PATH={ROCM_HOME} LD_LIBRARY_PATH={ROCM_HOME}/lib",
        ]
    else:
        placed = [
            "COPY libs/ /opt/rocm/lib/",
            "COPY ld/rocm.conf /etc/ld.so.conf.d/rocm.conf",
            "COPY info/ /opt/rocm/.info/",
        ]
    steps = [
        "ARG BASE",
        "FROM ${BASE}",
        *placed,
        f"COPY site/ {SITE_PACKAGES}/",
        # ROCm ships the unversioned development links too (Triton's HIP driver dlopens
        # libamdhip64.so by that name).
        f'RUN cd {rocm}/lib && for f in *.so.*; do ln -s "$f" "${{f%%.so.*}}.so"; done '
        f"&& mkdir -p {rocm}/bin {rocm}/lib/rocblas/library {rocm}/lib/hipblaslt/library "
        f"&& printf '#!/bin/sh\\necho fixture rocminfo\\n' > {rocm}/bin/rocminfo "
        f"&& chmod 755 {rocm}/bin/rocminfo "
        "&& for g in gfx942 gfx950 gfx1151; do "
        f"touch {rocm}/lib/rocblas/library/TensileLibrary_$g.dat "
        f"{rocm}/lib/hipblaslt/library/extop_$g.co; done "
        + (
            f"&& ln -s {ROCM_HOME} /opt/rocm"
            if sdk
            else "&& ldconfig && mkdir -p /usr/share/libdrm "
            "&& echo '74A1, 00, fixture MI300X' > /usr/share/libdrm/amdgpu.ids"
        ),
    ]
    (folder / "Dockerfile").write_text("\n".join(steps) + "\n")
    return folder

"""`sglx base build`: make a base image from Debian packages with debootstrap, no registry.

The rootfs is debootstrapped into a scratch folder, trimmed, tarred and imported into the engine
with `docker import` semantics (Docker SDK `import_image_from_file`). Labels record where it came
from. Nothing is pulled from a container registry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from sglx.engine import docker_client
from sglx.errors import SglxError
from sglx.profile import Profile
from sglx.progress import Progress
from sglx.report import Result, Table
from sglx.util import run_streaming, scratch_dir

DEBOOTSTRAP_TIMEOUT_S = 1800
# Emptied in the rootfs: package caches and manuals (licences in usr/share/doc stay).
TRIM = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/man", "usr/share/info")


def build_base(
    profile: Profile, *, tag: str | None, mirror: str | None, progress: Progress
) -> Result:
    spec = profile.base.build
    if profile.base.source != "build" or spec is None:
        raise SglxError(
            f"the {profile.arch} base ({profile.base.ref}) is not built by sglx",
            hint=profile.base.obtain,
            code="usage",
        )
    if os.geteuid() != 0:
        raise SglxError(
            "debootstrap needs root", hint="run as root (or with sudo)", code="environment"
        )
    if shutil.which("debootstrap") is None:
        raise SglxError(
            "debootstrap is not installed",
            hint="apt-get install -y debootstrap (make setup does it)",
            code="environment",
        )
    client = docker_client()
    ref = tag or profile.base.ref
    repository, _, version = ref.partition(":")
    source = mirror or spec.mirror
    with scratch_dir("sglx-base-") as scratch:
        rootfs = scratch / "rootfs"
        argv = ["debootstrap", f"--variant={spec.variant}"]
        if spec.packages:
            argv.append(f"--include={','.join(spec.packages)}")
        argv += [spec.suite, str(rootfs), source]
        progress(f"debootstrap {spec.suite} from {source} ({len(spec.packages)} extra packages)")
        run_streaming(
            argv,
            on_line=lambda line: progress(line) if line.startswith("I: ") else None,
            timeout=DEBOOTSTRAP_TIMEOUT_S,
            what=f"debootstrap of {spec.suite}",
            hint=f"check that {source} answers (pass --mirror for a local Debian mirror)",
        )
        for rel in TRIM:
            _empty_dir(rootfs / rel)
        archive = scratch / "rootfs.tar"
        progress("packing the rootfs")
        subprocess.run(
            ["tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(archive), "."],
            check=True,
        )
        progress(f"importing as {ref}")
        changes = [
            "ENV LANG=C.UTF-8",
            'CMD ["/bin/bash"]',
            *(f'LABEL {key}="{value}"' for key, value in _labels(profile, source).items()),
        ]
        client.api.import_image_from_file(
            str(archive), repository=repository, tag=version or "latest", changes=changes
        )
    image = client.images.get(ref)
    size_mb = image.attrs["Size"] / 1e6
    table = Table(("tag", "image id", "size"), ((ref, image.id, f"{size_mb:.0f} MB"),))
    return Result(
        command=("base", "build"),
        data={"tag": ref, "id": image.id, "size_bytes": image.attrs["Size"], "mirror": source},
        tables=(table,),
    )


def _labels(profile: Profile, mirror: str) -> dict[str, str]:
    spec = profile.base.build
    if spec is None:  # build_base checked it; keeps the type checker honest
        return {}
    return {
        "org.opencontainers.image.title": f"sglx {profile.arch} base",
        "org.opencontainers.image.description": (
            f"Debian {spec.suite} ({spec.variant}) made by sglx base build"
        ),
        "org.opencontainers.image.base.name": f"debian:{spec.suite} (debootstrap)",
        "io.sglx.arch": profile.arch,
        "io.sglx.base.mirror": mirror,
        "io.sglx.base.packages": " ".join(spec.packages),
    }


def _empty_dir(path: Path) -> None:
    if path.is_dir():
        for child in path.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()

"""Base images, from no registry: `sglx base build` and `sglx base load`.

`build` debootstraps a Debian rootfs into a scratch folder, trims it, tars it and imports it
into the engine (Docker SDK `import_image_from_file`), with labels saying where it came from.
`load` brings in a vendor base carried into the site as a tar (`docker save` output or an OCI
layout), after checking its sha256.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import IO

from sglx.engine import docker_client
from sglx.errors import SglxError
from sglx.profile import Profile
from sglx.progress import Progress
from sglx.report import Result, Table
from sglx.util import run_streaming, scratch_dir, sha256_file

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


def ensure_base(profile: Profile, *, mirror: str | None, progress: Progress) -> Result:
    """The profile's base is in the engine: built now if sglx builds it, else how to get it."""
    from docker.errors import ImageNotFound

    client = docker_client()
    try:
        image = client.images.get(profile.base.ref)
    except ImageNotFound:
        if profile.base.source == "build":
            return build_base(profile, tag=None, mirror=mirror, progress=progress)
        raise SglxError(
            f"the {profile.arch} base {profile.base.ref} is not in the engine",
            hint=profile.base.obtain,
            code="base_missing",
        ) from None
    return Result(
        command=("base", "ensure"),
        data={"tag": profile.base.ref, "id": image.id},
        lines=(f"{profile.base.ref} is present ({image.id[:19]})",),
    )


# --------------------------------------------------------------------------------------------
# sglx base load
# --------------------------------------------------------------------------------------------


def load_base(
    archive: Path,
    *,
    sha256: str | None,
    tag: str | None,
    profile: Profile | None,
    progress: Progress,
) -> Result:
    """Load a base carried in as a docker-archive or OCI-layout tar, checksum verified."""
    if not archive.is_file():
        raise SglxError(
            f"{archive}: no such file",
            code="usage",
            hint="pass the tar made on the connected side with `docker save`",
        )
    expected = _expected_sha256(archive, sha256)
    progress(f"verifying sha256 of {archive.name} ({archive.stat().st_size / 1e9:.2f} GB)")
    actual = sha256_file(archive)
    if actual != expected:
        raise SglxError(
            f"{archive}: sha256 {actual} does not match the expected {expected}",
            hint="the file is damaged or not the one that was checksummed: copy it "
            "again from the connected side",
            code="checksum_mismatch",
        )
    client = docker_client()
    with scratch_dir("sglx-load-") as scratch:
        loadable = _as_docker_archive(archive, scratch, tag)
        progress(f"loading {archive.name} into the engine")
        with loadable.open("rb") as handle:
            images = client.images.load(handle)
    if not images:
        raise SglxError(
            f"{archive}: the engine loaded no image from it",
            code="usage",
            hint="check that it is a `docker save` (or OCI layout) archive",
        )
    image = images[0]
    if tag:
        repository, _, version = tag.partition(":")
        image.tag(repository, version or "latest")
    if profile is not None and profile.base.digest and image.id != profile.base.digest:
        raise SglxError(
            f"loaded image {image.id} is not the base the {profile.arch} profile "
            f"pins ({profile.base.digest})",
            code="base_mismatch",
            hint="carry in the archive of the pinned base image",
        )
    client_image = client.images.get(image.id)
    tags = ", ".join(client_image.tags) or "(untagged)"
    return Result(
        command=("base", "load"),
        data={"id": image.id, "tags": client_image.tags, "sha256": actual},
        tables=(
            Table(
                ("image id", "tags", "size"),
                ((image.id, tags, f"{client_image.attrs['Size'] / 1e9:.2f} GB"),),
            ),
        ),
    )


def _expected_sha256(archive: Path, given: str | None) -> str:
    if given:
        return given.lower().removeprefix("sha256:")
    sidecar = archive.with_name(archive.name + ".sha256")
    if sidecar.is_file():
        return sidecar.read_text().split()[0].lower()
    raise SglxError(
        f"no checksum for {archive}: pass --sha256 HEX or put {sidecar.name} next to it",
        hint=f"on the connected side: sha256sum {archive.name} > {sidecar.name}",
        code="checksum_missing",
    )


def _as_docker_archive(archive: Path, scratch: Path, tag: str | None) -> Path:
    """`archive` itself if it is a docker-archive; an OCI layout gets the manifest.json the
    classic `docker load` reads, pointing at the OCI blobs (copied once, in a scratch file)."""
    with tarfile.open(archive) as tar:
        names = set(tar.getnames())
        if "manifest.json" in names or "./manifest.json" in names:
            return archive
        if not ({"index.json", "./index.json"} & names):
            raise SglxError(
                f"{archive}: neither a docker-archive (manifest.json) nor an OCI "
                "layout (index.json)",
                code="usage",
                hint="make it with `docker save -o FILE IMAGE`",
            )
        prefix = "./" if "./index.json" in names else ""
        index = json.load(_member(tar, f"{prefix}index.json"))
        descriptor = index["manifests"][0]
        ref = tag or descriptor.get("annotations", {}).get("org.opencontainers.image.ref.name")
        manifest = json.load(_member(tar, _blob(prefix, descriptor)))
        docker_manifest = [
            {
                "Config": _blob(prefix, manifest["config"]),
                "RepoTags": [ref] if ref and ":" in ref else [],
                "Layers": [_blob(prefix, layer) for layer in manifest["layers"]],
            }
        ]
        out = scratch / "docker-archive.tar"
        with tarfile.open(out, "w") as converted:
            for member in tar.getmembers():
                converted.addfile(member, tar.extractfile(member) if member.isfile() else None)
            data = json.dumps(docker_manifest).encode()
            info = tarfile.TarInfo("manifest.json")
            info.size = len(data)
            converted.addfile(info, io.BytesIO(data))
    return out


def _blob(prefix: str, descriptor: dict[str, str]) -> str:
    """Where an OCI layout keeps the blob a descriptor names."""
    return f"{prefix}blobs/sha256/{descriptor['digest'].split(':')[1]}"


def _member(tar: tarfile.TarFile, name: str) -> IO[bytes]:
    handle = tar.extractfile(name)
    if handle is None:
        raise SglxError(f"{name} is not a file in the archive", code="usage")
    return handle

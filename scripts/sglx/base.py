"""Base images, from no registry: `sglx base build` and `sglx base load`.

`build` debootstraps a Debian rootfs into a scratch folder, trims it, tars it and imports it
into the engine (Docker SDK `import_image_from_file`), with labels saying where it came from.
`load` brings in a vendor base carried into the site as a tar (`docker save` output or an OCI
layout), after checking its sha256 and everything in it (`sglx.base_archive`) before the engine
sees it, and tags it only once it is verified.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sglx import image_labels
from sglx.base_archive import (
    ImageArchive,
    docker_archive_stream,
    expected_sha256,
    inspect_archive,
)
from sglx.engine import docker_client, image_ids
from sglx.image_reference import check_reference, split_reference
from sglx.progress import Progress
from sglx_core.errors import SglxError
from sglx_core.hashing import sha256_file
from sglx_core.processes import run_streaming
from sglx_core.profile import Profile
from sglx_core.report import Result, Table
from sglx_core.scratch import scratch_dir

T = TypeVar("T")
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
        image_labels.BASE_NAME: f"debian:{spec.suite} (debootstrap)",
        image_labels.ARCH: profile.arch,
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
    """Load a base carried in as a docker-archive or OCI-layout tar.

    Everything that can be checked without the engine is checked first: the tag, the sha256,
    the archive's members and manifest, and the pinned digest (the id the image will get). The
    engine then loads exactly the checked members with no tags; the loaded id is compared with
    the pin, what does not match is removed again, and only then is the image tagged.
    """
    if not archive.is_file():
        raise SglxError(
            f"{archive}: no such file",
            code="usage",
            hint="pass the tar made on the connected side with `docker save`",
        )
    if tag is not None:
        check_reference(tag, "--tag")
    expected = expected_sha256(archive, sha256)
    progress(f"verifying sha256 of {archive.name} ({archive.stat().st_size / 1e9:.2f} GB)")
    actual = sha256_file(archive)
    if actual != expected:
        raise SglxError(
            f"{archive}: sha256 {actual} does not match the expected {expected}",
            hint="the file is damaged or not the one that was checksummed: copy it "
            "again from the connected side",
            code="checksum_mismatch",
        )
    progress(f"checking the members and manifest of {archive.name}")
    info = inspect_archive(archive, tag=tag)
    pinned = profile.base.digest if profile is not None else None
    if profile is not None and pinned and info.image_id != pinned:
        raise _not_the_pinned_base(f"{archive} holds image {info.image_id}", profile)
    client = docker_client()
    present = _image_ids(client)
    progress(f"loading {archive.name} ({info.kind}) into the engine")
    image = _load(client, info)
    # The classic store and podman name the image by its config digest, the containerd store
    # by its manifest's (sglx.image_identity): the pin holds when the engine names either.
    if profile is not None and pinned and image.id not in (pinned, info.manifest_digest):
        removed = _remove_unless_present_before(client, image.id, present)
        raise _not_the_pinned_base(f"loaded image {image.id}{removed}", profile)
    tags = (tag,) if tag else info.repo_tags
    for ref in tags:
        repository, version = split_reference(ref)
        _engine_call(partial(image.tag, repository, version), f"tagging {image.id} as {ref}")
    loaded = _engine_call(lambda: client.images.get(image.id), f"reading back {image.id}")
    return Result(
        command=("base", "load"),
        data={
            "id": loaded.id,
            "tags": loaded.tags,
            "sha256": actual,
            "kind": info.kind,
            "predicted_id": info.image_id,
            "predicted_manifest_digest": info.manifest_digest,
        },
        tables=(
            Table(
                ("image id", "tags", "size"),
                (
                    (
                        loaded.id,
                        ", ".join(loaded.tags) or "(untagged)",
                        f"{loaded.attrs['Size'] / 1e9:.2f} GB",
                    ),
                ),
            ),
        ),
    )


def _not_the_pinned_base(what: str, profile: Profile) -> SglxError:
    return SglxError(
        f"{what}, not the base the {profile.arch} profile pins ({profile.base.digest})",
        code="base_mismatch",
        hint="carry in the archive of the pinned base image",
    )


def _engine_call(call: Callable[[], T], what: str) -> T:
    """`call()`, with an engine failure turned into an error that says what was being done."""
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    try:
        return call()
    except (DockerException, RequestException) as exc:
        detail = getattr(exc, "explanation", None) or str(exc)
        raise SglxError(
            f"the engine failed {what}: {str(detail)[:2000]}",
            hint="check the engine (docker info, free disk with docker system df) and that "
            "the archive is the `docker save` of the base; rerun with -v for details",
            code="engine_failed",
        ) from None


def _image_ids(client: Any) -> set[str]:
    return _engine_call(lambda: image_ids(client), "listing images")


def _load(client: Any, info: ImageArchive) -> Any:
    """Load the checked archive, untagged; the one image it made."""

    def load() -> Any:
        with docker_archive_stream(info) as chunks:
            return client.images.load(chunks)

    images = _engine_call(load, f"loading {info.path.name}")
    if len(images) != 1:
        raise SglxError(
            f"{info.path}: the engine loaded {len(images)} images from it, not one",
            code="archive_invalid",
            hint="check that it is the `docker save` (or OCI layout) archive of one image",
        )
    return images[0]


def _remove_unless_present_before(client: Any, image_id: str, present: set[str]) -> str:
    """Remove an image this load made; the words to add to the error about it."""
    if image_id in present:
        return " (it was in the engine before; left as it was)"
    try:
        _engine_call(lambda: client.images.remove(image_id, force=True), f"removing {image_id}")
    except SglxError as exc:
        return f" (could not remove it again: {exc.message}; remove it with docker rmi)"
    return " (removed again)"

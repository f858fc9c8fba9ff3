"""What `sglx scan --bundle DIR` scans in a bundle folder. PROVISIONAL: the bundle format is not
defined yet (see docs/reference/scan.md); today a bundle folder is read as:

- every `*.tar` that is a `docker save` archive (it has a `manifest.json`): each image in it is
  rebuilt from its layers, whiteouts applied, and scanned like `--image`, with LD_LIBRARY_PATH
  from the image config in the archive;
- `wheelhouse/*.whl`: the wheels are unzipped together into one site-packages folder, as pip
  would install them (torch finds the CUDA/ROCm wheels through `$ORIGIN/../../nvidia/...`
  RUNPATHs, so wheels scanned one by one would not resolve). When the bundle holds exactly one
  image, the folder is laid into that image's root and system libraries resolve there; otherwise
  against this machine's `/` (said in the report). Only `forbidden` and `host_provided` rules
  apply to the wheelhouse: the image rules are checked on the image.
Nothing in the engine is touched: archives are read directly.
"""

from __future__ import annotations

import json
import tarfile
import uuid
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sglx.errors import SglxError
from sglx.progress import Progress
from sglx.scan.analysis import Target
from sglx.scan.image import parse_env
from sglx.scan.layers import RootWriter, clean_name

WHEELHOUSE = "wheelhouse"
# Where the wheels go inside an image root: a folder no image has.
WHEELHOUSE_VPATH = "/.sglx-scan/wheelhouse/site-packages"


@dataclass(frozen=True)
class ArchiveImage:
    archive: Path
    index: int
    tags: tuple[str, ...]
    config: str
    layers: tuple[str, ...]

    @property
    def label(self) -> str:
        tag = self.tags[0] if self.tags else f"image {self.index}"
        return f"{self.archive.name}[{tag}]"


def bundle_targets(bundle: Path, scratch: Path, progress: Progress) -> list[Target]:
    """Unpack what the bundle holds into `scratch` and say what to scan."""
    if not bundle.is_dir():
        raise SglxError(
            f"bundle folder {bundle} does not exist or is not a folder",
            hint="pass the folder that holds the image archives (*.tar) and wheelhouse/",
            code="usage",
        )
    targets: list[Target] = []
    skipped: list[str] = []
    archives = sorted(
        p for p in bundle.rglob("*.tar") if WHEELHOUSE not in p.relative_to(bundle).parts
    )
    for archive in archives:
        images = read_manifest(archive)
        if images is None:
            skipped.append(archive.name)
            continue
        for image in images:
            root = scratch / f"image-{len(targets)}"
            env = unpack_archive_image(image, root, progress)
            targets.append(
                Target(
                    kind="image_archive",
                    label=image.label,
                    root=root,
                    ld_library_path=_ldlp(env),
                    env_source="the image config in the archive",
                )
            )
    wheels = sorted((bundle / WHEELHOUSE).glob("*.whl"))
    if wheels:
        targets.append(_wheelhouse_target(wheels, targets, scratch, progress))
    if not targets:
        raise SglxError(
            f"nothing to scan in {bundle}: no docker-archive *.tar and no {WHEELHOUSE}/*.whl"
            + (f" (not docker archives: {', '.join(skipped)})" if skipped else ""),
            hint="a bundle holds `docker save` archives and a wheelhouse/ of wheels",
            code="usage",
        )
    if skipped:
        note = f"skipped, not docker archives: {', '.join(skipped)}"
        targets[0] = replace(targets[0], notes=(*targets[0].notes, note))
    return targets


def read_manifest(archive: Path) -> list[ArchiveImage] | None:
    """The images of a `docker save` archive, None if the tar is not one."""
    try:
        with tarfile.open(archive, "r:") as tar:
            try:
                member = tar.getmember("manifest.json")
            except KeyError:
                return None
            handle = tar.extractfile(member)
            manifest = json.load(handle) if handle is not None else None
    except (tarfile.TarError, OSError, json.JSONDecodeError) as exc:
        raise SglxError(
            f"{archive}: unreadable image archive ({exc})",
            hint="re-create it with `docker save -o FILE IMAGE`",
            code="usage",
        ) from None
    if not isinstance(manifest, list):
        raise SglxError(f"{archive}: manifest.json is not a list", code="usage")
    return [
        ArchiveImage(
            archive=archive,
            index=i,
            tags=tuple(entry.get("RepoTags") or ()),
            config=str(entry["Config"]),
            layers=tuple(str(layer) for layer in entry["Layers"]),
        )
        for i, entry in enumerate(manifest)
    ]


def unpack_archive_image(image: ArchiveImage, root: Path, progress: Progress) -> dict[str, str]:
    """Apply the image's layers in order into `root`; return the config's environment."""
    progress(f"unpacking {image.label}: {len(image.layers)} layers")
    writer = RootWriter(root, progress)
    with tarfile.open(image.archive, "r:") as tar:
        config = _json_member(tar, image.config, image.archive)
        for layer in image.layers:
            with _member(tar, layer, image.archive) as stream:
                try:
                    writer.apply(stream, whiteouts=True)
                except ValueError as exc:
                    raise SglxError(
                        f"{image.archive}: layer {layer}: {exc}",
                        hint="only uncompressed and gzip layers are read; re-save the image "
                        "with `docker save`",
                        code="usage",
                    ) from None
    return parse_env(config)


def _json_member(tar: tarfile.TarFile, name: str, archive: Path) -> dict[str, Any]:
    with _member(tar, name, archive) as handle:
        data = json.load(handle)
    if not isinstance(data, dict):
        raise SglxError(f"{archive}: {name} is not a JSON object", code="usage")
    return data


@contextmanager
def _member(tar: tarfile.TarFile, name: str, archive: Path) -> Iterator[Any]:
    try:
        handle = tar.extractfile(name)
    except KeyError:
        handle = None
    if handle is None:
        raise SglxError(
            f"{archive}: manifest.json names {name}, which is not in the archive",
            hint="the archive is truncated or hand-made; re-create it with `docker save`",
            code="usage",
        )
    with handle:
        yield handle


def _wheelhouse_target(
    wheels: list[Path], images: list[Target], scratch: Path, progress: Progress
) -> Target:
    notes = [f"{len(wheels)} wheels unpacked together into one site-packages folder"]
    if len(images) == 1:
        base = images[0]
        # A fresh top-level folder of the unpacked image: nothing in the image can redirect it.
        vpath = f"/.sglx-scan-{uuid.uuid4().hex[:8]}/site-packages"
        root, ldlp, env_source = base.root, base.ld_library_path, base.env_source
        site = root / vpath.lstrip("/")
        notes.append(f"laid into the root of {base.label}: system libraries resolve there")
    else:
        root, ldlp, env_source = Path("/"), (), "none"
        site = scratch / "wheelhouse" / "site-packages"
        why = "no image archive" if not images else f"{len(images)} images"
        notes.append(
            f"{why} in the bundle: system libraries resolve against this machine's /, "
            "not the site's image"
        )
    progress(f"unzipping {len(wheels)} wheels")
    for wheel in wheels:
        unzip_wheel(wheel, site)
    subtree = vpath if len(images) == 1 else str(site.resolve())
    return Target(
        kind="wheelhouse",
        label=WHEELHOUSE,
        root=root,
        subtrees=(subtree,),
        ld_library_path=ldlp,
        env_source=env_source,
        image_rules=False,
        notes=tuple(notes),
    )


def unzip_wheel(wheel: Path, site: Path) -> None:
    """Install-like unpack: `X.data/purelib` and `X.data/platlib` go to the site root."""
    site.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                vpath = clean_name(info.filename)
                if vpath is None or info.is_dir():
                    continue
                parts = vpath.strip("/").split("/")
                if (
                    len(parts) > 2
                    and parts[0].endswith(".data")
                    and parts[1]
                    in (
                        "purelib",
                        "platlib",
                    )
                ):
                    parts = parts[2:]
                target = site.joinpath(*parts)
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, target.open("wb") as out:
                    while chunk := source.read(1 << 20):
                        out.write(chunk)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SglxError(
            f"{wheel}: unreadable wheel ({exc})", hint="re-download or rebuild it", code="usage"
        ) from None


def _ldlp(env: dict[str, str]) -> tuple[str, ...]:
    value = env.get("LD_LIBRARY_PATH")
    return (value,) if value else ()

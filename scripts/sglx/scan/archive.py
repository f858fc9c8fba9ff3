"""A `docker save` archive as a scan target: a plain file, or chunk files read in order as one
stream (never reassembled on disk), each image in it rebuilt from its layers, whiteouts applied,
and scanned like `--image`, with LD_LIBRARY_PATH from the image config in the archive.

The caller describes the archive with a `ChunkedArchive`: its chunks in order, the size they
must add up to, and wheels to lay into its first image. Scan knows no folder layout: a bundle's
(`image/image.tar.NNN`, `wheelhouse/`) is `sglx.bundle.scan_target`'s to translate, and a user
gives a saved file or its pieces with `sglx scan --archive FILE...`.

Wheels are unzipped together into one site-packages folder at the venv path the image uses (the
caller's `site`), as pip would install them, so the profile's `optional_files` paths match there
too (torch finds the CUDA/ROCm wheels through `$ORIGIN/../../nvidia/...` RUNPATHs, so wheels
scanned one by one would not resolve). The folder is laid into the image's root, so system
libraries resolve there. Only `forbidden` and `host_provided` rules apply to the wheels: the
image rules are checked on the image. Nothing in the engine is touched; the chunks' hashes are
the caller's to check (`sglx bundle verify` does for a bundle).
"""

from __future__ import annotations

import tarfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglx.progress import Progress
from sglx.scan.analysis import Target
from sglx.scan.chunked import ChunkedReader
from sglx.scan.image import parse_env
from sglx.scan.inventory import names_only
from sglx.scan.layers import RootWriter, TooLarge, clean_name
from sglx_core.errors import SglxError
from sglx_core.untrusted import parse_json, tar_member_bytes, tar_regular_member

DEFAULT_SITE = "/opt/sglx/venv/lib/python3.11/site-packages"
"""Where wheels go when the caller names no venv (the cpu image's)."""
MAX_ARCHIVE_JSON = 16 << 20
"""Largest manifest.json or image config read from an archive (real ones are a few KiB)."""
_RESAVE = "the archive is damaged or hand-made; re-create it with `docker save`"


@dataclass(frozen=True)
class ChunkedArchive:
    """A `docker save` archive as the caller keeps it: `chunks` read in this order are the
    archive (one file is an archive of one chunk). `archive` names it in labels and messages;
    it need not exist. `size`, when given, is what the chunks must add up to, checked before a
    byte is read: a chunk cut short, grown or missing is named, not met as a damaged tar
    half-way. `wheels` are laid into the first image at `site` (a venv's site-packages) and
    scanned as one more target labelled `wheels_label`. `fix` is the hint when the pieces are
    missing or do not add up: the caller knows how its pieces are re-made."""

    archive: Path
    chunks: tuple[Path, ...]
    size: int | None = None
    wheels: tuple[Path, ...] = ()
    site: str = DEFAULT_SITE
    wheels_label: str = "wheels"
    fix: str = "re-create the archive with `docker save -o FILE IMAGE`"


def chunked_targets(
    spec: ChunkedArchive,
    scratch: Path,
    progress: Progress,
    keep_names_only: Callable[[str], bool] = names_only,
) -> list[Target]:
    """Check the pieces `spec` names, unpack its images into `scratch`, lay its wheels into the
    first one, and say what to scan."""
    _check_pieces(spec)
    targets = _image_targets(spec, scratch, progress, keep_names_only)
    if spec.wheels:
        targets.append(_wheels_target(spec, targets[0], progress))
    return targets


def _check_pieces(spec: ChunkedArchive) -> None:
    if not spec.chunks:
        raise SglxError(f"{spec.archive}: no chunks given", hint=spec.fix, code="usage")
    missing = [str(c) for c in spec.chunks if not c.is_file()]
    missing += [str(w) for w in spec.wheels if not w.is_file()]
    if missing:
        raise SglxError(
            f"{spec.archive}: missing or not regular files: {', '.join(missing)}",
            hint=spec.fix,
            code="usage",
        )
    if spec.size is not None:
        held = sum(c.stat().st_size for c in spec.chunks)
        if held != spec.size:
            raise SglxError(
                f"{spec.archive}: its {len(spec.chunks)} chunks hold {held} bytes, not the "
                f"{spec.size} it was written with: a chunk is cut short, grown or missing",
                hint=spec.fix,
                code="corrupt",
            )


@dataclass(frozen=True)
class ArchiveImage:
    archive: Path
    index: int
    tags: tuple[str, ...]
    config: str
    layers: tuple[str, ...]
    chunks: tuple[Path, ...] = ()

    def open(self) -> tarfile.TarFile:
        return open_archive(self.archive, self.chunks)

    @property
    def label(self) -> str:
        tag = self.tags[0] if self.tags else f"image {self.index}"
        return f"{self.archive.name}[{tag}]"


def _image_targets(
    spec: ChunkedArchive,
    scratch: Path,
    progress: Progress,
    keep_names_only: Callable[[str], bool],
) -> list[Target]:
    """Unpack the images of the archive (read from its chunks) into `scratch`; files
    `keep_names_only` picks are kept as names (see layers.RootWriter)."""
    targets: list[Target] = []
    for image in read_manifest(spec.archive, spec.chunks) or ():
        root = scratch / f"image-{len(targets)}"
        writer = RootWriter(root, progress, names_only=keep_names_only)
        env = unpack_archive_image(image, writer, progress)
        targets.append(
            Target(
                kind="image_archive",
                label=image.label,
                root=root,
                ld_library_path=_ldlp(env),
                env_source="the image config in the archive",
                placeholders=writer.placeholders,
            )
        )
    if not targets:
        read = f" (read from its {len(spec.chunks)} chunks)" if len(spec.chunks) > 1 else ""
        raise SglxError(
            f"{spec.archive}{read} is not a docker-archive: it has no manifest.json",
            hint=spec.fix,
            code="usage",
        )
    return targets


def open_archive(archive: Path, chunks: tuple[Path, ...] = ()) -> tarfile.TarFile:
    """The archive as a tar: the file itself, or its chunks read in order as one stream."""
    if chunks:
        return tarfile.open(fileobj=ChunkedReader(chunks), mode="r:")
    return tarfile.open(archive, "r:")


def read_manifest(archive: Path, chunks: tuple[Path, ...] = ()) -> list[ArchiveImage] | None:
    """The images of a `docker save` archive (a file, or its chunks), None if it is not one."""
    try:
        with open_archive(archive, chunks) as tar:
            try:
                tar.getmember("manifest.json")
            except KeyError:
                return None
            manifest = _json_member(tar, "manifest.json", archive, "'manifest.json' member")
    except (tarfile.TarError, OSError) as exc:
        raise SglxError(
            f"{archive}: unreadable image archive ({exc})",
            hint="re-create it with `docker save -o FILE IMAGE`",
            code="usage",
        ) from None
    if not isinstance(manifest, list):
        raise _malformed(f"{archive}: manifest.json is {_a(manifest)}, not a list of images")
    return [_archive_image(archive, i, entry, chunks) for i, entry in enumerate(manifest)]


def _archive_image(archive: Path, index: int, entry: Any, chunks: tuple[Path, ...]) -> ArchiveImage:
    """One entry of manifest.json, every field checked: it names the members read next."""
    where = f"{archive}: manifest.json entry {index}"
    if not isinstance(entry, dict):
        raise _malformed(f"{where} is {_a(entry)}, not an object")
    config = entry.get("Config")
    if not isinstance(config, str) or not config:
        raise _malformed(f"{where}: 'Config' is {_a(config)}, not the name of the config member")
    layers = entry.get("Layers")
    if not isinstance(layers, list) or not all(isinstance(x, str) and x for x in layers):
        raise _malformed(f"{where}: 'Layers' is {_a(layers)}, not a list of layer member names")
    tags = entry.get("RepoTags") or []
    if not isinstance(tags, list) or not all(isinstance(x, str) for x in tags):
        raise _malformed(f"{where}: 'RepoTags' is {_a(tags)}, not a list of image names")
    return ArchiveImage(
        archive=archive,
        index=index,
        tags=tuple(tags),
        config=config,
        layers=tuple(layers),
        chunks=chunks,
    )


def _a(value: Any) -> str:
    """What a JSON value is, in words, for a message."""
    if value is None:
        return "missing or null"
    if isinstance(value, list) and value:
        wrong = next((x for x in value if not isinstance(x, str) or not x), None)
        return "a list" if wrong is None else f"a list holding {_a(wrong)}"
    kinds = {dict: "an object", list: "an empty list", str: "a string", bool: "a boolean"}
    return next((w for t, w in kinds.items() if isinstance(value, t)), "a number")


def _malformed(message: str) -> SglxError:
    return SglxError(message, hint=_RESAVE, code="corrupt")


def unpack_archive_image(
    image: ArchiveImage, writer: RootWriter, progress: Progress
) -> dict[str, str]:
    """Apply the image's layers in order through `writer`; return the config's environment."""
    progress(f"unpacking {image.label}: {len(image.layers)} layers")
    with image.open() as tar:
        what = f"config member '{image.config}'"
        config = _json_member(tar, image.config, image.archive, what)
        if not isinstance(config, dict):
            raise _malformed(f"{image.archive}: the {what} is {_a(config)}, not an object")
        try:
            env = parse_env(config)
        except ValueError as exc:
            raise _malformed(f"{image.archive}: the {what}: {exc}") from None
        for layer in image.layers:
            with _member(tar, layer, image.archive) as stream:
                try:
                    writer.apply(stream, whiteouts=True)
                except TooLarge as exc:
                    raise SglxError(
                        f"{image.archive}: layer {layer} {exc}",
                        hint="the archive is damaged or built to exhaust the scanning machine; "
                        "do not use it",
                        code="too_large",
                    ) from None
                except ValueError as exc:
                    raise SglxError(
                        f"{image.archive}: layer {layer}: {exc}",
                        hint="only uncompressed, gzip, bzip2 and xz layers are read; re-save "
                        "the image with `docker save`",
                        code="usage",
                    ) from None
    return env


def _json_member(tar: tarfile.TarFile, name: str, archive: Path, what: str) -> Any:
    """A JSON member of the archive, read bounded and parsed by the untrusted-input rules."""
    raw = tar_member_bytes(tar, name, max_bytes=MAX_ARCHIVE_JSON)
    if raw is None:
        raise SglxError(
            f"{archive}: {name} is not a file in the archive (missing, or a link that leads to "
            "no file)",
            hint="the archive is truncated or hand-made; re-create it with `docker save`",
            code="usage",
        )
    if len(raw) > MAX_ARCHIVE_JSON:
        raise SglxError(
            f"{archive}: the {what} is larger than {MAX_ARCHIVE_JSON >> 20} MiB; no real one is",
            hint=_RESAVE,
            code="too_large",
        )
    return parse_json(raw, path=archive, what=what, hint=_RESAVE)


@contextmanager
def _member(tar: tarfile.TarFile, name: str, archive: Path) -> Iterator[Any]:
    member = tar_regular_member(tar, name)
    handle = None if member is None else tar.extractfile(member)
    if handle is None:
        raise SglxError(
            f"{archive}: manifest.json names {name}, which is not a file in the archive",
            hint="the archive is truncated or hand-made; re-create it with `docker save`",
            code="usage",
        )
    with handle:
        yield handle


def _wheels_target(spec: ChunkedArchive, image: Target, progress: Progress) -> Target:
    """The wheels unzipped where the image's venv has its site-packages, inside its root."""
    wheels, site = spec.wheels, spec.site
    notes = (
        f"{len(wheels)} wheels unpacked together into {site} of {image.label}: system "
        "libraries resolve there",
    )
    progress(f"unzipping {len(wheels)} wheels into {site}")
    writer = RootWriter(image.root, progress)
    for wheel in wheels:
        unzip_wheel(wheel, writer, site)
    return Target(
        kind="wheelhouse",
        label=spec.wheels_label,
        root=image.root,
        subtrees=(site,),
        ld_library_path=image.ld_library_path,
        env_source=image.env_source,
        image_rules=False,
        notes=notes,
        placeholders=image.placeholders,
    )


def unzip_wheel(wheel: Path, writer: RootWriter, site: str) -> None:
    """Install-like unpack into the virtual folder `site` of `writer`'s root:
    `X.data/purelib` and `X.data/platlib` go to the site root. Every file is written by
    `writer`, so no link of the image (`site-packages/x -> /host/dir`) leads a wheel's file
    out of the scratch root: links are followed inside it, as in the image."""
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
                    and parts[1] in ("purelib", "platlib")
                ):
                    parts = parts[2:]
                with archive.open(info) as source:
                    writer.add_file("/".join((site.rstrip("/"), *parts)), source)
    except (zipfile.BadZipFile, OSError) as exc:
        raise SglxError(
            f"{wheel}: unreadable wheel ({exc})", hint="re-download or rebuild it", code="usage"
        ) from None


def _ldlp(env: dict[str, str]) -> tuple[str, ...]:
    value = env.get("LD_LIBRARY_PATH")
    return (value,) if value else ()

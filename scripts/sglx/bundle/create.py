"""`sglx bundle create`: write one bundle folder for an arch, staged and renamed last.

The `docker save` stream of the image goes straight into hashed chunks (no full-size temporary
file, memory bounded by one block); wheels, weights and the Ansible content (collected and
checked before anything is written, by `ansible_content`) are hashed while they are copied; the
scan report, versions and labels, `install.sh`, the attestations of every file (`--attest-key`:
sglx.bundle.attestations), `bundle.json` and `SHA256SUMS` are written last, then the optional
signature, then the staging folder is renamed to its final name. An
interrupted create leaves only a hidden `.NAME.partial-*` folder, which the next create of the
same name removes.

With `--since PREVIOUS` the bundle is a delta (sglx.bundle.delta): the save stream goes through
`save_stream.SaveFilter`, which leaves out the `layer.tar` of every layer the previous bundle's
image holds, and bundle.json names the parent and every layer. Every bundle records its layers.
With `--exclude-base` (sglx.bundle.base_layers) the layers of the image's base are left out the
same way, and bundle.json names the base.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from sglx import __version__, image_labels
from sglx.bundle import ansible_content, install_sh, layout
from sglx.bundle.bundle_tar import write_tar
from sglx.bundle.chunks import ChunkWriter
from sglx.bundle.delta import Bundle, read_bundle, shared
from sglx.bundle.hashed_files import copy_hashed, require_space, write_hashed
from sglx.bundle.manifest import (
    BaseRecord,
    BundleManifest,
    FileEntry,
    ImageRecord,
    Kind,
    ParentRecord,
    Slot,
    TunedRecord,
    check_weights_name,
    dump,
    render_sums,
    sha256_bytes,
)
from sglx.bundle.save_stream import SaveFilter
from sglx.bundle.signing import check_key, sign
from sglx.bundle.tuned_files import copy_tuned
from sglx.bundle.versions_document import versions
from sglx.bundle.weights_plan import WeightsPlan, folder_name, plan_weights
from sglx.engine import docker_client
from sglx.image_reference import check_reference
from sglx.progress import Progress
from sglx.run_spec import run_spec
from sglx_core import tuned
from sglx_core.errors import SglxError
from sglx_core.profile import Profile
from sglx_core.profile.resolved import profile_digest, resolved_text
from sglx_core.report import Finding, Result, Table
from sglx_core.sizes import human_bytes

SAVE_BLOCK = 4 << 20


@dataclass(frozen=True)
class CreateOptions:
    image: str | None = None
    out: Path | None = None
    chunk_size: int = layout.DEFAULT_CHUNK_SIZE
    sign_key: Path | None = None
    as_tar: bool = False
    wheelhouse: Path | None = None
    weights_outside: Path | None = None
    models_root: Path | None = None  # the weights store of an image built with them outside
    scan: bool = True
    control_wheels: Path | None = None
    since: Path | None = None  # the previous bundle (folder or bundle.json): write a delta
    exclude_base: bool = False  # leave out the base image's layers (a site loads the base)
    tuned: Path | None = None  # a tuned set (sglx tuned capture) carried at tuned/
    vex: Path | None = None  # VEX statements (OpenVEX or CycloneDX VEX) carried at meta/vex.json
    attest_key: Path | None = None  # the site's P-256 key: SLSA provenance, scan, in-toto layout


@dataclass(frozen=True)
class Layers:
    """The image's layers (engine diff ids); for a delta the parent, for --exclude-base the
    base, and what to leave out."""

    diff_ids: tuple[str, ...]
    parent: Bundle | None = None
    drop: frozenset[str] = frozenset()  # chain ids whose layer.tar the archive leaves out
    base: BaseRecord | None = None

    def record(self) -> ParentRecord | None:
        if self.parent is None:
            return None
        image = self.parent.manifest.image
        return ParentRecord(
            digest=self.parent.digest,
            bundle=self.parent.name,
            image_ref=image.ref,
            image_id=image.id,
        )


def create_bundle(profile: Profile, options: CreateOptions, progress: Progress) -> Result:
    started = dt.datetime.now(dt.UTC)
    ref = options.image or f"sglx/{profile.arch}:latest"
    _check_names(ref, options)
    attest_key = None
    if options.attest_key is not None:
        from sglx.attest.keys import load_signing_key

        attest_key = load_signing_key(options.attest_key)  # refused now, before the save
    client = docker_client()
    image = _image(client, ref, profile)
    layers = _layers(image, ref, profile, options.since, client if options.exclude_base else None)
    out = options.out or Path(f"sglx-bundle-{profile.arch}-{image.id.split(':')[1][:12]}")
    out = out.absolute()
    if out.exists():
        raise SglxError(
            f"{out} already exists",
            hint="remove it, or pass another --out DIR (a bundle is never overwritten)",
            code="usage",
            path=str(out),
        )
    tar_path = out.with_name(out.name + ".tar")
    if options.as_tar and tar_path.exists():
        raise SglxError(f"{tar_path} already exists", hint="remove it first", code="usage")
    # A tuned set is checked for the arch before anything is written: refused, nothing made.
    tuned_set = None if options.tuned is None else tuned.load(options.tuned, profile)
    if options.vex is not None:
        from sglx.audit import vex

        vex.read(options.vex)  # refused now, before the save, if it is not VEX
    lock, wheels = _wheel_sources(profile, options.wheelhouse)
    weights = plan_weights(
        image, ref, profile, options.weights_outside, options.models_root, layers.parent
    )
    ansible = ansible_content.collect(profile, control_wheels=options.control_wheels)
    size = int(image.attrs.get("Size") or 0)
    carried = [*wheels, *(weights.sources if weights is not None else [])]
    extra = sum(p.stat().st_size for p in carried) + ansible.size
    total = size + extra
    require_space({out: total * (2 if options.as_tar else 1)}, f"a bundle of {ref}")
    for stale in out.parent.glob(f".{out.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    stage = out.parent / f".{out.name}.partial-{uuid.uuid4().hex[:8]}"
    stage.mkdir(parents=True)
    try:
        entries, record, scan_result = _fill(
            client, stage, profile, ref, image, layers, options, lock, wheels, weights, progress
        )
        progress(f"copying the Ansible content ({len(ansible.items)} files)")
        entries += ansible_content.write(ansible, stage)
        entries += copy_tuned(tuned_set, stage, progress)
        tuned_record = None if tuned_set is None else TunedRecord(digest=tuned_set.digest)
        if attest_key is not None:
            from sglx.bundle import attestations

            progress("attesting every file: SLSA provenance, the scan's result, in-toto layout")
            parameters = _parameters(profile, options)
            facts = attestations.BuildFacts(record, image.labels or {}, parameters, started)
            entries += attestations.write(stage, entries, facts, scan_result, attest_key)
        manifest = _finish(
            stage, profile, record, entries, options, weights, ansible.slot(), tuned_record
        )
        stage.rename(out)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if options.as_tar:
        progress(f"writing {tar_path.name}")
        write_tar(out, tar_path)
    return _result(out, tar_path if options.as_tar else None, manifest, scan_result)


def _check_names(ref: str, options: CreateOptions) -> None:
    """The inputs that cost nothing to check, checked before the engine is asked anything:
    what would otherwise fail only when the manifest is written, after `docker save`."""
    check_reference(ref, "--image")
    if options.weights_outside is not None:
        check_weights_name(
            folder_name(options.weights_outside), f"--weights-outside {options.weights_outside}"
        )
    if options.sign_key is not None:
        check_key(options.sign_key)


def _image(client: Any, ref: str, profile: Profile) -> Any:
    from docker.errors import ImageNotFound

    try:
        image = client.images.get(ref)
    except ImageNotFound:
        raise SglxError(
            f"no image '{ref}' in the local Docker engine",
            hint=f"build it with `sglx image build --arch {profile.arch}` (or `make image`), "
            "or pass --image REF",
            code="usage",
        ) from None
    arch = (image.labels or {}).get(image_labels.ARCH)
    if arch is not None and arch != profile.arch:
        raise SglxError(
            f"image '{ref}' was built for arch {arch}, not {profile.arch}",
            hint=f"pass --arch {arch}, or the image of arch {profile.arch}",
            code="usage",
        )
    check_profile_digest(ref, image.labels or {}, profile)
    return image


def check_profile_digest(ref: str, labels: dict[str, str], profile: Profile) -> None:
    """The bundle carries the profile it renders its run spec, install.sh and Ansible vars
    from (meta/arch.yaml): it must be the one baked into the image, whose digest the image's
    label records. An image without the label (not built by `sglx image build`) is not
    checked."""
    baked = labels.get(image_labels.PROFILE_DIGEST)
    here = profile_digest(profile)
    if baked is not None and baked != here:
        raise SglxError(
            f"image '{ref}' was built with another {profile.arch} profile: its label "
            f"{image_labels.PROFILE_DIGEST} is {baked}, the profile here resolves to {here}",
            hint="rebuild the image from this checkout "
            f"(`sglx image build --arch {profile.arch}`), or create the bundle from the "
            "checkout the image was built from",
            code="usage",
        )


def _layers(
    image: Any, ref: str, profile: Profile, since: Path | None, base_client: Any | None = None
) -> Layers:
    """The image's layers; with --since the previous bundle, with --exclude-base (a
    `base_client` to ask for the base) the base, and which layers to leave out: those the
    previous bundle's image or the base holds, except one whose bytes a carried layer shares
    (`docker save` links the second copy to the first, which must then be there)."""
    diff_ids = tuple(str(d) for d in ((image.attrs.get("RootFS") or {}).get("Layers") or []))
    base = None
    if base_client is not None:
        from sglx.bundle.base_layers import find_base

        base = find_base(base_client, image, ref, diff_ids, profile)
    if since is None:
        return _dropping(Layers(diff_ids, base=base), set(range(base.layers if base else 0)))
    previous = read_bundle(since, "--since")
    before = previous.manifest
    if before.arch != profile.arch:
        raise SglxError(
            f"--since {since} is a bundle of arch {before.arch}, this one is of {profile.arch}",
            hint=f"pass the previous bundle of arch {profile.arch}",
            code="usage",
        )
    if before.image.id == image.id:
        raise SglxError(
            f"--since {since} already carries image {image.id} ({ref}): a delta would hold nothing",
            hint="build the new image first, or install the previous bundle as it is",
            code="usage",
        )
    held = shared(diff_ids, previous)
    if not held:
        raise SglxError(
            f"image {ref} shares no layer with the image of --since {since} ({before.image.ref})",
            hint="create a full bundle (without --since): a delta would carry every layer",
            code="usage",
        )
    return _dropping(
        Layers(diff_ids, previous, base=base), {*held, *range(base.layers if base else 0)}
    )


def _dropping(layers: Layers, held: set[int]) -> Layers:
    """`layers` leaving out the `held` ones but those whose bytes a carried layer shares."""
    from sglx.bundle.layers import chain_ids

    diff_ids = layers.diff_ids
    chains = chain_ids(diff_ids)
    carried = {diff_ids[i] for i in range(len(diff_ids)) if i not in held}
    drop = frozenset(chains[i] for i in held if diff_ids[i] not in carried)
    return replace(layers, drop=drop)


def _wheel_sources(profile: Profile, folder: Path | None) -> tuple[Path | None, list[Path]]:
    if folder is None:
        return None, []
    from sglx.wheels import lockfile
    from sglx.wheels.steps import load_lock, lock_path

    lock = load_lock(profile)
    missing = [w.filename for w in lock.wheels if not (folder / w.filename).is_file()]
    if missing:
        raise SglxError(
            f"--wheelhouse {folder} lacks {len(missing)} locked wheels, e.g. {missing[0]}",
            hint=f"fetch them with `sglx wheels fetch --arch {profile.arch} --dest {folder}`",
            code="usage",
            path=str(folder),
        )
    del lockfile
    return lock_path(profile.arch), [folder / w.filename for w in lock.wheels]


def _fill(
    client: Any,
    stage: Path,
    profile: Profile,
    ref: str,
    image: Any,
    layers: Layers,
    options: CreateOptions,
    lock: Path | None,
    wheels: list[Path],
    weights: WeightsPlan | None,
    progress: Progress,
) -> tuple[list[FileEntry], ImageRecord, Result | None]:
    entries: list[FileEntry] = []

    def add(path: str, size: int, sha256: str, kind: Kind) -> None:
        entries.append(FileEntry(path=path, size=size, sha256=sha256, kind=kind))

    progress(f"saving {ref} into chunks of {human_bytes(options.chunk_size)}")
    if layers.parent is not None:
        progress(
            f"a delta over {layers.parent.name}: leaving out the {len(layers.drop)} layers its "
            "image holds"
        )
    if layers.base is not None:
        progress(f"leaving out the {layers.base.layers} layers of its base {layers.base.ref}")
    stream = SaveFilter(image.id, layers.diff_ids, layers.drop)
    written = ChunkWriter(stage, options.chunk_size).write_all(
        stream.run(_save_stream(client, ref, progress))
    )
    entries_of_layers = stream.recorded()
    if entries_of_layers is None or stream.identity is None:
        # Without its layers and digests the bundle could not be installed where the engine
        # names images by their manifest, nor be a delta's parent.
        raise SglxError(
            f"the image archive of {ref} could not be read as it was saved: {stream.problem}",
            hint="report the engine's `docker version` and `docker info`; a bundle needs the "
            "archive's config, manifest and layers",
            code="environment",
        )
    if stream.unidentified:
        progress(
            f"{len(stream.unidentified)} layer folders could not be named before their bytes "
            "came: carried whole"
        )
    base = layers.base
    if base is not None and all(x.carried for x in (entries_of_layers or ())[: base.layers]):
        raise SglxError(
            f"--exclude-base: none of the {base.layers} layers of the base {base.ref} could be "
            "left out of the docker save stream (a layer it carries repeats their bytes, or "
            "the stream did not name their folders)",
            hint="create the bundle without --exclude-base",
            code="environment",
        )
    if layers.drop and all(layer.carried for layer in entries_of_layers):
        raise SglxError(
            f"none of the {len(layers.drop)} layers {ref} shares with --since or its base could "
            "be told apart in the docker save stream, so the bundle would carry them all",
            hint="create a full bundle (without --since or --exclude-base): a delta needs the "
            "layers saved uncompressed (Docker 20.10's archive, the classic store's OCI layout, "
            "or layers the containerd store loaded from either), not the containerd store's "
            "own compressed builds",
            code="environment",
        )
    for chunk in written.chunks:
        add(chunk.path, chunk.size, chunk.sha256, "image-chunk")
    progress(f"image archive: {human_bytes(written.size)} in {len(written.chunks)} chunks")
    record = ImageRecord(
        ref=ref,
        id=stream.identity.config_digest,
        manifest_digest=stream.identity.manifest_digest,
        archive=layout.IMAGE_ARCHIVE,
        size=written.size,
        chunk_size=options.chunk_size,
        chunks=tuple(c.path for c in written.chunks),
        layers=entries_of_layers,
        parent=layers.record(),
        base=layers.base,
    )
    scan_result = None
    if options.scan:
        from sglx.bundle.scan_step import scan_bundle_image

        scan_result, documents = scan_bundle_image(client, stage, profile, ref, record, progress)
        for meta in documents:
            copied = write_hashed(stage / meta.path, meta.text.encode())
            add(meta.path, copied.size, copied.sha256, "meta")
    if options.vex is not None:
        copied = copy_hashed(options.vex, stage / layout.VEX)
        add(layout.VEX, copied.size, copied.sha256, "meta")
    labels = dict(sorted((image.labels or {}).items()))
    for path, document in (
        (layout.VERSIONS, versions(profile, labels)),
        (layout.LABELS, labels),
        (layout.RUN_SPEC, run_spec(profile).to_json()),
    ):
        copied = write_hashed(stage / path, (json.dumps(document, indent=2) + "\n").encode())
        add(path, copied.size, copied.sha256, "meta")
    # The profile the image was built with (checked against its label in _image): what the
    # install, the Ansible vars and the host checks of this bundle read, not a checkout's.
    copied = write_hashed(stage / layout.PROFILE, resolved_text(profile).encode())
    add(layout.PROFILE, copied.size, copied.sha256, "meta")
    if lock is not None:
        progress(f"copying {len(wheels)} wheels")
        copied = copy_hashed(lock, stage / layout.WHEEL_LOCK)
        add(layout.WHEEL_LOCK, copied.size, copied.sha256, "lock")
        for wheel in wheels:
            path = f"{layout.WHEELHOUSE}/{wheel.name}"
            copied = copy_hashed(wheel, stage / path)
            add(path, copied.size, copied.sha256, "wheel")
    if weights is not None and weights.carried:
        progress(f"copying {len(weights.sources)} weight files of {weights.record.name}")
        for file, stored in zip(weights.sources, weights.stored, strict=True):
            path = f"{weights.record.path}/{stored.name}"
            copied = copy_hashed(file, stage / path)
            if (copied.size, copied.sha256) != (stored.size, stored.sha256):
                raise SglxError(
                    f"{file} does not match its weights manifest (size or sha256)",
                    hint="convert the weights again (`sglx weights convert`), or check them "
                    "with `sglx weights verify`",
                    code="usage",
                    path=str(file),
                )
            add(path, copied.size, copied.sha256, "weights")
    elif weights is not None:
        progress(
            f"the weights {weights.record.digest} are the parent's: named, not carried (a host "
            "has them in its weights store)"
        )
    script = install_sh.render(
        profile,
        version=__version__,
        image_ref=ref,
        image_id=record.id,
        chunks=record.chunks,
        weights=None if weights is None else weights.record,
        weights_files=() if weights is None else weights.stored,
        image=record,
    )
    copied = write_hashed(stage / layout.INSTALL_SH, script.encode())
    (stage / layout.INSTALL_SH).chmod(0o755)
    add(layout.INSTALL_SH, copied.size, copied.sha256, "install")
    return entries, record, scan_result


def _save_stream(client: Any, ref: str, progress: Progress) -> Iterator[bytes]:
    from docker.errors import APIError

    try:
        yield from client.api.get_image(ref, chunk_size=SAVE_BLOCK)
    except APIError as exc:
        raise SglxError(
            f"docker save of {ref} failed: {exc.explanation}",
            hint="check the engine with `docker info` and its free space",
            code="environment",
        ) from None


def _parameters(profile: Profile, options: CreateOptions) -> dict[str, Any]:
    """The provenance's external parameters: what a rebuild of this bundle would pass."""
    return {
        "arch": profile.arch,
        "chunkSize": options.chunk_size,
        "since": "" if options.since is None else options.since.name,
        "excludeBase": options.exclude_base,
        "wheelhouse": options.wheelhouse is not None,
        "weightsOutside": options.weights_outside is not None,
        "tuned": options.tuned is not None,
        "vex": options.vex is not None,
        "scan": options.scan,
    }


def _finish(
    stage: Path,
    profile: Profile,
    record: ImageRecord,
    entries: list[FileEntry],
    options: CreateOptions,
    weights: WeightsPlan | None,
    ansible: Slot,
    tuned_record: TunedRecord | None = None,
) -> BundleManifest:
    weights_record = None if weights is None else weights.record
    manifest = BundleManifest(
        arch=profile.arch,
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        sglx_version=__version__,
        image=record,
        weights=weights_record,
        tuned=tuned_record,
        wheelhouse=Slot(
            included=options.wheelhouse is not None,
            path=layout.WHEELHOUSE if options.wheelhouse is not None else None,
            note="" if options.wheelhouse else "the image holds the packages (use --wheelhouse)",
        ),
        ansible=ansible,
        files=tuple(sorted(entries, key=lambda e: e.path)),
    )
    raw = dump(manifest)
    (stage / layout.MANIFEST).write_bytes(raw)
    sig_sha = None
    if options.sign_key is not None:
        signature = sign(stage / layout.MANIFEST, options.sign_key)
        sig_sha = sha256_bytes(signature.read_bytes())
    (stage / layout.SUMS).write_text(render_sums(manifest, sha256_bytes(raw), sig_sha))
    return manifest


def _result(
    out: Path, tar_path: Path | None, manifest: BundleManifest, scan: Result | None
) -> Result:
    rows = tuple(
        (
            kind,
            str(sum(1 for e in manifest.files if e.kind == kind)),
            human_bytes(sum(e.size for e in manifest.files if e.kind == kind)),
        )
        for kind in sorted({e.kind for e in manifest.files})
    )
    findings: tuple[Finding, ...] = ()
    if scan is not None and scan.findings:
        findings = tuple(
            Finding(f.code, f"image scan: {f.message}", f.path, f.hint) for f in scan.findings
        )
    data = {
        "path": str(out),
        "tar": None if tar_path is None else str(tar_path),
        "arch": manifest.arch,
        "image": manifest.image.model_dump(mode="json"),
        "files": len(manifest.files),
        "bytes": sum(e.size for e in manifest.files),
        "signed": (out / layout.SIGNATURE).is_file(),
        "scan": None if scan is None else scan.status,
    }
    lines = [f"bundle written to {out}"]
    layers = manifest.image.layers or ()
    if manifest.image.parent is not None:
        from sglx.bundle.delta import describe

        taken = manifest.image.from_parent()
        lines.append(
            f"{describe(manifest.image)}: carries {len(layers) - len(taken)} of its "
            f"{len(layers)} layers ({human_bytes(sum(x.size for x in layers if x.carried))}), "
            f"takes {len(taken)} ({human_bytes(sum(x.size for x in taken))}) from it; install "
            "that bundle first"
        )
    if manifest.image.base is not None:
        from sglx.bundle.base_layers import describe as describe_base

        left = manifest.image.from_base()
        lines.append(
            f"leaves out the {len(left)} layers ({human_bytes(sum(x.size for x in left))}) of "
            f"{describe_base(manifest.image.base)}: a site loads that base first "
            "(`sglx base load FILE`)"
        )
    if tar_path is not None:
        script = install_sh.beside_tar(tar_path)
        lines += [
            f"tar written to {tar_path}, with {script.name} beside it (sh {script.name} "
            f"{tar_path.name}: checks and unpacks the tar without Python)"
        ]
    return Result(
        ("bundle", "create"),
        data=data,
        tables=(Table(("kind", "files", "size"), rows, title=f"bundle of {manifest.image.ref}"),),
        lines=tuple(lines),
        findings=findings,
    )

"""`sglx bundle install`: verify, load the image, install wheels, place weights; resumable.

Each step asks first whether its work is already done, from the truth where there is one
(the engine has the image id; the weights folder's manifest has the digest) and from the
install record (`record.py`) for the files verified before. A re-run after a kill anywhere
redoes only the step that was cut short; `--full` forgets the record and redoes everything.
Free space is checked for every step that will write, before the first one writes. A delta
(bundle.json's image.parent) is refused before that, and before anything is hashed or loaded,
when the engine lacks a layer it takes from its parent (sglx.bundle.delta); a bundle without
its base's layers (image.base), when the engine lacks the base's (sglx.bundle.base_layers).

Last, it prints the `docker run` line of the bundle's run spec and creates the node-local JIT
cache folder that line mounts (`<--jit-root>/<image id hex>`, owned by the container's uid,
mode 0700: sglx.run_spec.make_jit_folder), as install.sh and the sglang_service role do.
"""

from __future__ import annotations

import os
import shlex
import shutil
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglx.bundle import layout
from sglx.bundle.carried_spec import CarriedSpec, own_roots, read_carried_spec
from sglx.bundle.chunks import iter_blocks
from sglx.bundle.delta import engine_missing, refusal
from sglx.bundle.given import bundle_folder
from sglx.bundle.hashed_files import copy_hashed, require_space
from sglx.bundle.image_archive import layer_findings
from sglx.bundle.manifest import BundleManifest, parse, sha256_bytes
from sglx.bundle.record import InstallRecord
from sglx.bundle.run_line import start_site
from sglx.bundle.scan_report import not_scanned, report_findings
from sglx.bundle.signing import site_weights_signer
from sglx.bundle.verify import SignaturePolicy, check_files, read_manifest_bytes
from sglx.bundle.weights_store import (
    admit,
    carried_digest,
    models_root,
    place_in_store,
    store_entry,
)
from sglx.bundle.wheelhouse_install import install_wheelhouse, lock_sha, venv_installed
from sglx.engine import docker_client
from sglx.image_identity import engine_of, held_id
from sglx.progress import Progress
from sglx_core.engines import Engine
from sglx_core.errors import SglxError
from sglx_core.jit_cache import ROOT_ENV
from sglx_core.output_files import atomic_write_text, make_folders
from sglx_core.report import Finding, Result, Table
from sglx_core.sizes import human_bytes

if TYPE_CHECKING:
    from sglx.run_spec import RunSpec, Site

STATE_MARGIN = 1 << 20


@dataclass(frozen=True)
class InstallOptions:
    state: Path
    venv: Path | None = None
    weights_dir: Path | None = None
    full: bool = False
    signature: SignaturePolicy = field(default_factory=SignaturePolicy)
    jobs: int = 1
    # The JIT cache folders' root; None = $SGLX_JIT_ROOT, else the run spec's host_root.
    jit_root: Path | None = None
    # The weights store's root; None = $SGLX_MODELS_ROOT, else the run spec's models_root.
    models_root: Path | None = None
    # Replace a store entry that holds other bytes (never done unasked).
    replace_weights: bool = False
    # Install a bundle that carries no scan report (or one with findings) without a finding.
    no_scan: bool = False
    # The key the weights must be signed with (OMS); None = $SGLX_WEIGHTS_SIGNER, else the
    # site's file (sglx.bundle.signing.site_weights_signer), else no signature asked.
    weights_signer: Path | None = None
    # Where to write the server's podman Quadlet unit (sglx.quadlet); None = not written.
    quadlet: Path | None = None


@dataclass
class Steps:
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(self, name: str, status: str, detail: str, started: float) -> None:
        seconds = round(time.monotonic() - started, 3)
        self.rows[name] = {"status": status, "detail": detail, "seconds": seconds}


def install_bundle(path: Path, options: InstallOptions, progress: Progress) -> Result:
    try:
        with bundle_folder(path, progress) as folder:
            return _install(folder, options, progress)
    except SglxError as exc:
        if exc.code != "bundle_tar_unsafe":
            raise
        finding = Finding(exc.code, exc.message, None, exc.hint)
        return Result(("bundle", "install"), data={"installed": False}, findings=(finding,))


def _install(bundle: Path, options: InstallOptions, progress: Progress) -> Result:
    steps = Steps()
    _outputs_outside(bundle, options)
    raw = read_manifest_bytes(bundle)
    client = docker_client()
    spec = read_carried_spec(bundle)
    plan = _plan(bundle, raw, spec, client, options)
    started = time.monotonic()
    make_folders(options.state, label="state folder (--state)")
    record = InstallRecord.load(options.state, sha256_bytes(raw), fresh=options.full)
    check = check_files(
        bundle,
        threads=options.jobs,
        progress=progress,
        signature=options.signature,
        already_verified=record.is_verified,
        on_verified=record.mark_verified,
    )
    record.save()
    manifest = check.manifest
    findings = list(check.findings)
    if manifest is not None and not findings:
        missing = not_scanned("and install does not scan", "install with --no-scan")
        findings += [] if options.no_scan else report_findings(bundle, missing=missing)
    if manifest is not None and not findings:
        findings += layer_findings(bundle, manifest)
    if findings or manifest is None or plan is None:
        return Result(
            ("bundle", "install"),
            data={"installed": False, "bundle": str(bundle)},
            findings=tuple(findings),
            lines=("nothing was installed: the bundle did not verify",),
        )
    status = "done" if check.hashed else "skipped"
    detail = (
        f"{check.hashed} files hashed ({human_bytes(check.hashed_bytes)}), {check.reused} "
        "unchanged since verified"
    )
    steps.add("verify", status, detail, started)
    weights_target, weights_done = plan.weights, plan.weights_done
    stored = plan.store_root is not None
    venv_done = options.venv is not None and venv_installed(record, options.venv, manifest)

    started = time.monotonic()
    held = plan.held
    if held is not None:
        steps.add("image", "skipped", f"the engine already has {manifest.image.id}", started)
    else:
        held = _load(client, bundle, manifest, progress, plan.engine)
        steps.add("image", "done", f"loaded {manifest.image.ref} ({manifest.image.id})", started)
    _tag(client, manifest, held)
    record.image_loaded(bundle, manifest)

    started = time.monotonic()
    if options.venv is None:
        steps.add("venv", "not asked", "no --venv", started)
    elif venv_done:
        steps.add("venv", "skipped", f"{options.venv} already holds the locked wheels", started)
    else:
        install_wheelhouse(bundle, options.venv, progress)
        record.step_done("venv", {"path": str(options.venv.absolute()), "lock": lock_sha(manifest)})
        steps.add("venv", "done", f"installed the wheelhouse into {options.venv}", started)

    started = time.monotonic()
    if weights_target is None:
        why = "the weights are in the image" if manifest.weights is None else "no --weights-dir"
        steps.add("weights", "not asked", why, started)
    elif weights_done:
        steps.add("weights", "skipped", f"{weights_target} already holds them", started)
    elif stored:
        place_in_store(bundle, manifest, weights_target, plan.store_problem, progress)
        steps.add("weights", "done", f"placed in the weights store at {weights_target}", started)
    else:
        _place_weights(bundle, manifest, weights_target, progress)
        steps.add("weights", "done", f"placed at {weights_target}", started)
    if weights_target is not None and manifest.weights is not None:
        record.step_done(
            "weights", {"path": str(weights_target), "digest": manifest.weights.digest}
        )
    record.finish()
    result = _result(
        bundle, spec, manifest, steps, weights_target, options.jit_root, plan.store_root,
        cli=plan.engine.cli, bundle_digest=record.digest, quadlet=options.quadlet,
    )  # fmt: skip
    return _with_record(result, record)


def _outputs_outside(bundle: Path, options: InstallOptions) -> None:
    """Refuse, before anything is written, an output folder inside the bundle: a record, venv
    or weights written there are files bundle.json does not list, so the next verify fails."""
    root = _resolved(bundle)
    for what, path in (
        ("state folder (--state)", options.state),
        ("venv (--venv)", options.venv),
        ("weights folder (--weights-dir)", options.weights_dir),
        ("weights store (--models-root)", options.models_root),
        ("JIT cache root (--jit-root)", options.jit_root),
        ("Quadlet folder (--quadlet)", options.quadlet),
    ):
        if path is None:
            continue
        target = _resolved(path)
        if target == root or root in target.parents:
            raise SglxError(
                f"the {what} {path} is inside the bundle {bundle}",
                hint="choose a folder outside the bundle: a bundle holds exactly the files "
                "bundle.json lists, and anything written into it fails the next verify",
                code="usage",
                path=str(path),
            )


def _resolved(path: Path) -> Path:
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # a link loop: compare the path as written
        return path.absolute()


@dataclass(frozen=True)
class Plan:
    """What install will write, known before anything is written (or verified)."""

    engine: Engine
    held: str | None  # the id the engine holds the bundle's image under (None: to be loaded)
    weights: Path | None
    weights_done: bool
    # The weights store's root when the weights go there (not --weights-dir), and why the
    # entry there is not the weights' (None: it is, checked file by file).
    store_root: Path | None = None
    store_problem: str | None = None


def _plan(
    bundle: Path, raw: bytes, spec: CarriedSpec, client: Any, options: InstallOptions
) -> Plan | None:
    """Check the asked steps and the free space for them; None when bundle.json does not
    parse (the file check then reports why)."""
    try:
        manifest = parse(raw, str(bundle / layout.MANIFEST))
    except SglxError:
        return None
    _check_asked(manifest, options)
    engine = engine_of(client)
    held = held_id(client, manifest.image.id, manifest.image.manifest_digest)
    has_image = held is not None
    if not has_image:
        _check_engine(engine, manifest)
    # A delta loads only where the engine holds the layers it takes from its parent, and a
    # bundle without its base's layers only where it holds the base's: refused before anything
    # is hashed, written or loaded, naming the bundle to install or the base to load first.
    missing = [] if has_image else engine_missing(client, manifest.image)
    if missing:
        raise refusal(manifest.image, missing)
    _jit_root_trusted(spec, options)
    target = _weights_target(manifest, options)
    carried_digest(bundle, manifest)
    weights_done = target is not None and _weights_placed(target, manifest)
    store_root, store_problem = None, None
    if target is None and manifest.weights is not None:
        store_root = models_root(spec, options.models_root)
    if store_root is not None:
        target, store_problem = store_entry(
            store_root, manifest, options.jobs, replace=options.replace_weights
        )
        weights_done = store_problem is None
    signer = options.weights_signer or site_weights_signer()
    if signer is not None and target is not None and manifest.weights is not None:
        weights = manifest.weights
        source = bundle / weights.path if weights.carried and weights.path else target
        admit(source, manifest, signer)
    needs: dict[Path, int] = {options.state: STATE_MARGIN}
    if not has_image:
        root = Path(str(client.info().get("DockerRootDir") or ""))
        if root.is_absolute() and root.exists():
            needs[root] = manifest.image.size
    if target is not None and not weights_done and manifest.weights is not None:
        needs[target.parent] = needs.get(target.parent, 0) + manifest.weights.size
    if options.venv is not None:
        wheels = sum(e.size for e in manifest.files if e.kind == "wheel")
        needs[options.venv] = needs.get(options.venv, 0) + 3 * wheels
    require_space(needs, "installing the bundle")
    return Plan(engine, held, target, weights_done, store_root, store_problem)


def _jit_root_trusted(spec: CarriedSpec, options: InstallOptions) -> None:
    """Refuse a run spec whose JIT cache root is not this sglx's own for the arch, unless the
    site names the root (--jit-root, $SGLX_JIT_ROOT): install creates and chowns a folder there
    as root, and a bundle does not choose where."""
    if options.jit_root is not None or os.environ.get(ROOT_ENV):
        return
    cache = spec.get("jit_cache")
    named = cache.get("host_root") if isinstance(cache, dict) else None
    if named is None:
        return
    arch = spec.get("arch")
    own = own_roots(arch)
    trusted = None if own is None else own.jit
    if named != trusted:
        raise SglxError(
            f"the bundle's {layout.RUN_SPEC} names the JIT cache root {named!r}, but this sglx's "
            f"profile of arch {arch!r} names {trusted!r}: a bundle does not choose where install "
            "writes as root; nothing was written",
            hint=f"pass --jit-root {named} (or set {ROOT_ENV}) if the site means that folder",
            code="usage",
            path=str(spec.path),
        )


def _check_asked(manifest: BundleManifest, options: InstallOptions) -> None:
    if options.venv is not None and not manifest.wheelhouse.included:
        raise SglxError(
            "--venv: this bundle has no wheelhouse",
            hint="create the bundle with `sglx bundle create --wheelhouse DIR`, or drop --venv "
            "(the image holds the packages)",
            code="usage",
        )
    if options.venv is not None and layout.WHEEL_LOCK not in manifest.by_path():
        raise SglxError(
            f"--venv: this bundle's wheelhouse has no {layout.WHEEL_LOCK}",
            hint="create the bundle again with `sglx bundle create --wheelhouse DIR`",
            code="usage",
        )
    if options.weights_dir is not None and manifest.weights is None:
        raise SglxError(
            "--weights-dir: this bundle carries no weights beside the image (they are baked in)",
            hint="drop --weights-dir",
            code="usage",
        )
    weights = manifest.weights
    if options.weights_dir is not None and weights is not None and not weights.carried:
        raise SglxError(
            "--weights-dir: this bundle does not carry its weights (a delta naming its "
            "parent's, which the weights store holds)",
            hint="drop --weights-dir: install places and checks weights in the store "
            "(--models-root)",
            code="usage",
        )


def _tag(client: Any, manifest: BundleManifest, held: str) -> None:
    """Point the bundle's reference, which the start line runs, at its image: an archive saved
    through podman's API carries no tag, and another image may hold it."""
    from docker.errors import APIError
    from docker.utils import parse_repository_tag

    repository, tag = parse_repository_tag(manifest.image.ref)
    try:
        if not client.images.get(held).tag(repository, tag):
            raise APIError("the engine did not tag it")
    except APIError as exc:
        raise SglxError(
            f"cannot tag image {held} as {manifest.image.ref}: {exc}",
            hint="check the engine with `docker info`",
            code="environment",
        ) from None


def _check_engine(engine: Engine, manifest: BundleManifest) -> None:
    """Refused before the load: a bundle that names its image by the config digest only, on
    an engine that names images by their manifest (it would load and then not find it); an
    archive without some layers, on podman (it loads only whole archives)."""
    if manifest.image.referenced() and engine.product == "podman":
        raise SglxError(
            "this bundle leaves out layers the engine already holds (a delta, or "
            f"--exclude-base), and podman loads only whole archives ({engine.describe()}): "
            "nothing was loaded",
            hint="install the full bundle (create it without --since and --exclude-base)",
            code="environment",
        )
    if manifest.image.manifest_digest is None and engine.containerd_store:
        raise SglxError(
            f"this bundle names its image by its config digest only ({manifest.image.id}), "
            f"which the engine ({engine.describe()}) does not report: it would load the image "
            "and then not find it",
            hint="re-create the bundle with this sglx (its bundles record the manifest digest "
            "too), or install on an engine with the classic image store",
            code="environment",
        )


def _load(
    client: Any, bundle: Path, manifest: BundleManifest, progress: Progress, engine: Engine
) -> str:
    """Load the bundle's image; the id the engine holds it under."""
    from docker.errors import APIError

    chunks = [bundle / c for c in manifest.image.chunks]
    progress(
        f"loading {manifest.image.ref}: {human_bytes(manifest.image.size)} from "
        f"{len(chunks)} chunks, streamed"
    )
    try:
        for message in client.api.load_image(iter_blocks(chunks)):
            if isinstance(message, dict) and message.get("error"):
                raise SglxError(
                    f"docker load of {manifest.image.ref} failed: {message['error']}",
                    hint="check the engine with `docker info` and its free space",
                    code="environment",
                )
    except APIError as exc:
        raise SglxError(
            f"docker load of {manifest.image.ref} failed: {exc.explanation}",
            hint="check the engine with `docker info` and its free space",
            code="environment",
        ) from None
    image = manifest.image
    held = held_id(client, image.id, image.manifest_digest)
    if held is None:
        raise SglxError(
            f"after docker load the engine ({engine.describe()}) names the image by "
            f"neither its config digest {image.id} nor its manifest digest "
            f"{image.manifest_digest or '(not recorded)'}",
            hint="the bundle verified, so the engine loaded it under another id: report "
            "`docker version` and `docker info` with this message",
            code="environment",
        )
    return held


def _weights_target(manifest: BundleManifest, options: InstallOptions) -> Path | None:
    """The folder the weights go to: `--weights-dir`/`weights.name`, refused (before anything
    is written) unless it is a new or replaceable folder strictly inside `--weights-dir`.

    Install renames the target aside and removes it, so a name of `.` would remove the whole
    weights folder with every other model in it. The manifest schema already allows only plain
    names; this is the check at the place that deletes, whatever admitted the name."""
    if options.weights_dir is None or manifest.weights is None:
        return None
    name = manifest.weights.name
    folder = options.weights_dir.absolute()
    target = folder / name
    plain = name not in ("", ".", "..") and not any(c in name for c in "/\\\0")
    if not plain or _resolved(target).parent != _resolved(folder):
        raise SglxError(
            f"bundle.json: weights.name {name!r} does not name a folder inside the weights "
            f"folder {folder}; installing would replace {_resolved(target) if plain else target}"
            " (nothing was written)",
            hint="weights.name must be one plain folder name; re-create the bundle, or remove "
            "a link of that name in --weights-dir that points elsewhere",
            code="bundle_manifest",
            path=str(target),
        )
    return target


def _weights_placed(target: Path, manifest: BundleManifest) -> bool:
    from sglx_core.weights_manifest import MANIFEST_NAME, manifest_digest

    if manifest.weights is None or not (target / MANIFEST_NAME).is_file():
        return False
    try:
        return manifest_digest(target) == manifest.weights.digest
    except SglxError:
        return False


def _place_weights(
    bundle: Path, manifest: BundleManifest, target: Path, progress: Progress
) -> None:
    """Copy into a hidden staging folder beside `target`, check every hash, rename."""
    assert manifest.weights is not None and manifest.weights.path is not None
    prefix = manifest.weights.path + "/"
    files = [e for e in manifest.files if e.path.startswith(prefix)]
    make_folders(target.parent, label="weights folder (--weights-dir)")
    for stale in target.parent.glob(f".{target.name}.partial-*"):
        shutil.rmtree(stale, ignore_errors=True)
    staging = target.parent / f".{target.name}.partial-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    try:
        for number, entry in enumerate(files, start=1):
            copied = copy_hashed(bundle / entry.path, staging / entry.path[len(prefix) :])
            if copied.sha256 != entry.sha256:
                raise SglxError(
                    f"{entry.path} changed while it was being placed",
                    hint="run install again; do not edit the bundle while it installs",
                    code="environment",
                )
            progress(f"placed {number}/{len(files)} weight files ({entry.path})")
        old = None
        if target.exists():
            old = target.parent / f".{target.name}.old-{uuid.uuid4().hex[:8]}"
            target.rename(old)
        staging.rename(target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _result(
    bundle: Path,
    spec: CarriedSpec,
    manifest: BundleManifest,
    steps: Steps,
    weights: Path | None,
    jit_root: Path | None = None,
    store_root: Path | None = None,
    cli: str = "docker",
    bundle_digest: str | None = None,
    quadlet: Path | None = None,
) -> Result:
    """The report; the start line names the engine's CLI (`cli`: docker, or podman) and the
    bundle (`bundle_digest`, its install record's key) it came from. With `quadlet`, the same
    start as a podman Quadlet unit, written into that folder."""
    from sglx.run_spec import docker_run_words

    redone = [name for name, row in steps.rows.items() if row["status"] == "done"]
    found = start_site(spec, manifest, weights, jit_root, store_root, bundle_digest)
    run: list[str] = []
    why_not, jit, unit = "", None, None
    if isinstance(found, str):
        why_not = found + (" (and no Quadlet unit)" if quadlet is not None else "")
    else:
        run_spec, site, jit = found
        run = [cli, *docker_run_words(run_spec, site)[1:]]
        if quadlet is not None:
            unit = _write_quadlet(quadlet, run_spec, site)
    rows = tuple((name, row["status"], row["detail"]) for name, row in steps.rows.items())
    lines = [
        "nothing to do: every step was done before" if not redone else "installed",
        f"the JIT cache folder of this image: {jit} (owned by the container's uid, mode 0700)"
        if jit
        else "",
        "start the server with: " + shlex.join(run) if run else why_not,
        f"or under systemd, through podman's Quadlet: {unit} (systemctl daemon-reload, then "
        f"systemctl start {unit.stem})"
        if unit
        else "",
    ]
    return Result(
        ("bundle", "install"),
        data={
            "installed": True,
            "bundle": str(bundle),
            "image": manifest.image.id,
            "steps": steps.rows,
            "redone": redone,
            "docker_run": run,
            "quadlet": None if unit is None else str(unit),
            "jit_cache": jit,
        },
        tables=(Table(("step", "status", "detail"), rows, title=f"install of {bundle}"),),
        lines=tuple(line for line in lines if line),
    )


def _write_quadlet(folder: Path, spec: RunSpec, site: Site) -> Path:
    """The start as podman's Quadlet unit `<folder>/<container name>.container` (root-owned
    units are world-readable: 0644), written atomically."""
    from sglx.quadlet import quadlet_unit

    unit = folder / f"{site.name}.container"
    atomic_write_text(unit, quadlet_unit(spec, site), label="Quadlet unit", mode=0o644)
    return unit


def _with_record(result: Result, record: InstallRecord) -> Result:
    """The report with the install record (`data.record`) and, when the record said so before
    this run, who installed the bundle and when (`data.installed_before`)."""
    before = record.before
    lines = result.lines
    if before is not None and not result.data.get("redone"):
        said = f"already installed (by {before['door']} at {before['installed_at']})"
        lines = tuple(
            said + ": nothing to do" if line.startswith("nothing to do") else line for line in lines
        )
    data = {**result.data, "record": str(record.path), "installed_before": before}
    return replace(result, data=data, lines=lines)

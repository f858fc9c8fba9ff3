"""The `docker run` line `sglx bundle install` prints, and the podman Quadlet unit it writes on
request (sglx.quadlet): the bundle's own run spec (meta/run.json) with this host's group ids,
the weights' folder or store entry, and the JIT cache folder it mounts, created here."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from sglx.bundle import layout
from sglx.bundle.carried_spec import CarriedSpec
from sglx.bundle.manifest import BundleManifest
from sglx_core.errors import SglxError
from sglx_core.jit_cache import ROOT_ENV

if TYPE_CHECKING:
    from sglx.run_spec import RunSpec, Site


def docker_run_line(
    spec: CarriedSpec,
    manifest: BundleManifest,
    weights: Path | None,
    jit_root: Path | None = None,
    store_root: Path | None = None,
    bundle_digest: str | None = None,
) -> tuple[list[str], str, str | None]:
    """The `docker run` line of the bundle's own run spec (meta/run.json, written from the
    profile baked into its image), the groups by this host's GIDs where the profile says so,
    the image id and `bundle_digest` (of its bundle.json) in the server's environment, and the
    JIT cache folder it mounts, created here (None for a spec without one); or no line and the
    reason (a bundle older than meta/run.json, a group the host lacks)."""
    from sglx.run_spec import docker_run_words

    found = start_site(spec, manifest, weights, jit_root, store_root, bundle_digest)
    if isinstance(found, str):
        return [], found, None
    run, site, folder = found
    return docker_run_words(run, site), "", folder


def start_site(
    spec: CarriedSpec,
    manifest: BundleManifest,
    weights: Path | None,
    jit_root: Path | None = None,
    store_root: Path | None = None,
    bundle_digest: str | None = None,
) -> tuple[RunSpec, Site, str | None] | str:
    """The bundle's run spec and this host's part of the start (`docker_run_line` says what it
    holds), the JIT cache and device-init lock folders created here; or why there is none."""
    from sglx.run_spec import RunSpec, Site, host_gids, jit_folder, make_lock_folder

    if jit_root is None and (env := os.environ.get(ROOT_ENV)):
        jit_root = Path(env)
    if spec.data is None and spec.problem is None:
        return f"no start line: the bundle has no {layout.RUN_SPEC} (made by an older sglx)"
    try:
        if spec.problem is not None:
            raise spec.problem
        run = RunSpec.from_json(spec.data, str(spec.path))
        site = Site(
            image=manifest.image.ref,
            name=f"sglx-{run.arch}",
            model_dir=None if weights is None or store_root is not None else str(weights),
            gids=host_gids(run),
            image_id=manifest.image.id,
            jit_root=None if jit_root is None else str(jit_root.absolute()),
            # weights in the store: the run spec mounts their entry (sglx.run_spec.model_folder)
            weights_digest=None
            if store_root is None or manifest.weights is None
            else manifest.weights.digest,
            models_root=None if store_root is None else str(store_root),
            bundle_digest=bundle_digest,
        )
    except SglxError as exc:
        return f"no start line: {exc.message} ({exc.hint})" if exc.hint else exc.message
    folder = jit_folder(run, site)
    if folder is not None:
        from sglx.run_spec import make_jit_folder

        make_jit_folder(run, folder)
    make_lock_folder(run)
    return run, site, folder

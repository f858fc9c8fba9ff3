"""`sglx bundle install`'s weights step with the node-local weights store (sglx.weights.store).

A bundle's weights outside its image go to `<root>/<digest hex>`, the root being --models-root,
$SGLX_MODELS_ROOT or the run spec's (meta/run.json: the profile's weights.store). The entry is
checked file by file against the bundle's list (bundle.json weights.files, or its weights
files) and its manifest digest: a matching entry is kept (an image-only upgrade copies nothing,
a rollback finds it), one that does not match is placed again from the bundle. A delta that
names its parent's weights without carrying them is refused before anything is loaded when the
entry is missing or does not match, naming the parent bundle that carries them. A bundle made
before the store (no models_root in its run spec) keeps the older way: --weights-dir.
"""

from __future__ import annotations

from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.manifest import BundleManifest, weights_files
from sglx.progress import Progress
from sglx.weights import store
from sglx_core.errors import SglxError
from sglx_core.untrusted import read_json


def models_root(bundle: Path, given: Path | None) -> Path | None:
    """The store's root for this bundle; None for a bundle whose run spec names none."""
    default = None
    path = bundle / layout.RUN_SPEC
    if path.is_file():
        try:
            data = read_json(path, what="run spec", max_bytes=layout.MAX_META_BYTES)
        except SglxError:
            data = None
        value = data.get("models_root") if isinstance(data, dict) else None
        default = value if isinstance(value, str) and value.startswith("/") else None
    return store.root(given, default)


def store_entry(root: Path, manifest: BundleManifest, jobs: int) -> tuple[Path, str | None]:
    """The weights' entry under `root` and why it is not theirs (None: it is). Weights the
    bundle does not carry are refused here, before anything is written or loaded, unless their
    entry matches."""
    weights = manifest.weights
    assert weights is not None
    entry = store.entry(root, weights.digest)
    files = [store.StoredFile(f.name, f.size, f.sha256) for f in weights_files(manifest)]
    problem = store.problem(entry, files, weights.digest, jobs=jobs)
    if problem is not None and not weights.carried:
        parent = manifest.image.parent
        name = layout.shown(parent.bundle) if parent is not None else "its parent"
        raise SglxError(
            f"this bundle takes its weights ({weights.digest}) from this host's weights store, "
            f"where the bundle {name} put them: {entry} {problem}; nothing was loaded",
            hint=f"install the bundle {name} first (it carries them: `sglx bundle install "
            f"{name}` or `sh {name}/install.sh`), then this one; or pass --models-root ROOT of "
            "the store that holds them",
            code="weights_store",
            path=str(entry),
        )
    return entry, problem


def place_in_store(
    bundle: Path,
    manifest: BundleManifest,
    entry: Path,
    problem: str | None,
    progress: Progress,
) -> None:
    """Place the bundle's weights at `entry` (staged, every sha256 re-checked, renamed)."""
    weights = manifest.weights
    assert weights is not None and weights.path is not None
    if problem is not None and problem != "is not there":
        progress(f"the weights store's {entry} {problem}: placing it again")
    files = [store.StoredFile(f.name, f.size, f.sha256) for f in weights_files(manifest)]
    sources = [(bundle / weights.path / f.name, f) for f in files]
    store.place(entry, sources, progress)

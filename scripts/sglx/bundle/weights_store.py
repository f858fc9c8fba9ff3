"""`sglx bundle install`'s weights step with the node-local weights store (sglx.weights.store).

A bundle's weights outside its image go to `<root>/<digest hex>`, the root being --models-root,
$SGLX_MODELS_ROOT or the run spec's (meta/run.json: the profile's weights.store). The entry is
checked file by file against the bundle's list (bundle.json weights.files, or its weights
files) and its manifest digest: a matching entry is kept (an image-only upgrade copies nothing,
a rollback finds it). A delta that names its parent's weights without carrying them is refused
before anything is loaded when the entry is missing or does not match, naming the parent bundle
that carries them. A bundle made before the store (no models_root in its run spec) keeps the
older way: --weights-dir.

What a bundle claims is not where its bytes go (issue 37): the entry's name is the digest of
the manifest the bundle carries, computed here, and a bundle.json naming another digest is
refused naming both, so one bundle can never take another model's entry. An entry that is there
and holds other bytes is never replaced unless the operator asks (--replace-weights), and the
bundle's root for the store must be the one this sglx's profile of the arch names, unless the
site names one: a bundle does not choose where root writes.
"""

from __future__ import annotations

from pathlib import Path

from sglx.bundle import layout
from sglx.bundle.carried_spec import CarriedSpec, own_roots
from sglx.bundle.manifest import BundleManifest, weights_files
from sglx.progress import Progress
from sglx.weights import store
from sglx_core.errors import SglxError
from sglx_core.weights_manifest import manifest_digest

REPLACE_FLAG = "--replace-weights"


def models_root(spec: CarriedSpec, given: Path | None) -> Path | None:
    """The store's root for this bundle; None for a bundle whose run spec names none. A root
    the run spec names is taken only when it is this sglx's own for the arch (`own_roots`),
    or when the site names one (`given`, $SGLX_MODELS_ROOT)."""
    value = spec.get("models_root")
    default = value if isinstance(value, str) and value.startswith("/") else None
    root = store.root(given, default)
    if root is not None and default is not None and root == Path(default):
        arch = spec.get("arch")
        own = own_roots(arch)
        trusted = None if own is None else own.models
        if trusted is None or Path(trusted) != root:
            raise SglxError(
                f"the bundle's {layout.RUN_SPEC} names the weights store {default!r}, but this "
                f"sglx's profile of arch {arch!r} names {trusted!r}: a bundle does not choose "
                "where install writes as root; nothing was written",
                hint=f"pass --models-root {default} (or set SGLX_MODELS_ROOT) if the site "
                "means that folder, or use a bundle made for this sglx",
                code="usage",
                path=str(spec.path),
            )
    return root


def carried_digest(bundle: Path, manifest: BundleManifest) -> None:
    """Refuse carried weights whose own manifest is not the digest bundle.json names: the entry
    is named by the bytes, never by the claim."""
    weights = manifest.weights
    if weights is None or not weights.carried or weights.path is None:
        return
    found = manifest_digest(bundle / weights.path)
    if found != weights.digest:
        raise SglxError(
            f"bundle.json names the weights {weights.digest}, but the weights manifest the bundle "
            f"carries ({weights.path}/sglx-weights.json) is of {found}; nothing was written",
            hint="the bundle was altered after it was made: copy it again from its source, and "
            "require a signature (--allowed-signers) so an altered bundle is refused",
            code="corrupt",
            path=str(bundle / weights.path),
        )


def store_entry(
    root: Path, manifest: BundleManifest, jobs: int, replace: bool = False
) -> tuple[Path, str | None]:
    """The weights' entry under `root` and why it is not theirs (None: it is). Weights the
    bundle does not carry are refused here, before anything is written or loaded, unless their
    entry matches; an entry that is there with other bytes is refused unless `replace`."""
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
    if problem is not None and problem != "is not there" and not replace:
        raise SglxError(
            f"the weights store's entry {entry} {problem}; install never replaces an entry "
            "that holds other bytes, since every image that mounts it would serve them; "
            "nothing was written",
            hint=f"look at what changed there; to put the bundle's weights in its place, run "
            f"install again with {REPLACE_FLAG} (the bundle's bytes are checked first)",
            code="weights_store",
            path=str(entry),
        )
    return entry, problem


def admit(folder: Path, manifest: BundleManifest, signer: Path) -> None:
    """Refuse weights that `signer` (the site's weights signer) did not sign: `folder` holds
    them (the bundle's weights/NAME, or the store entry a delta takes them from), and its OMS
    signature (sglx-weights.sig, carried with them) must verify against the key."""
    from sglx.weights.signature import signature_findings

    weights = manifest.weights
    assert weights is not None
    findings = signature_findings(folder, signer)
    if findings:
        raise SglxError(
            f"the weights {weights.digest} are not admitted to the store: this site requires "
            f"them signed by {signer}, and {findings[0].message}; nothing was written",
            hint="ask the source side to sign the converted weights (`sglx weights sign DST "
            "--key KEY`) before `sglx image build` and `bundle create`, or check the site's "
            "--weights-signer / $SGLX_WEIGHTS_SIGNER",
            code="weights_unsigned",
            path=str(folder),
        )


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

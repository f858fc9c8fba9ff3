"""`sglx image prune`, and the deps-image replacement every `sglx image build` ends with.

What a build leaves in the engine (the classic builder of Docker 20.10, no BuildKit, rm=True):

- the serving image, tagged, and the per-step images of its stage, untagged ancestors of the
  tag (the layer cache of the next build: shared with the tag, they cost nothing extra);
- the deps image ``sglx/deps:<arch>-<key>`` (deps.py): the base with the venv, which the
  serving image is built on (so it costs nothing extra while that image is tagged). The next
  build on the same base and lock reuses it; once a new lock or base gives a new one, the build
  removes the older ones of its arch and base that no tagged image is built on;
- the weights payload image ``sglx/weights:<digest>`` (payload.py), tagged and kept so a
  rebuild need not import it again;
- after a rebuild that moved the tag, the previous serving image, untagged.

Builds before deps.py left two more kinds, which prune still finds: an untagged ``deps`` stage
labelled ``io.sglx.stage=deps`` (the wheelhouse copy and the venv, several GB) and the
wheelhouse payload ``sglx/wheelhouse:<arch>-<lock>``.

Prune removes deps images and stages and payload images that no tagged serving image was built
from, and untagged previous serving images. It never removes a tagged serving image, a base, or
an image a tagged serving image is built on, and never forces: an image a container uses is
reported and kept.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from sglx import image_labels
from sglx.engine import docker_client, read_image_file
from sglx.image.deps import DEPS_REPO
from sglx.image.render import MODEL_DIR
from sglx.progress import Progress
from sglx_core.profile.loader import profile_path
from sglx_core.report import Finding, Result, Table
from sglx_core.weights_manifest import MANIFEST_NAME

DEPS_STAGE = "deps"
# Set by `sglx image build` on the serving image only (the classic builder puts build labels
# on the last stage), so an image with it is a serving image, never a base or a deps stage.
WHEELHOUSE_REPO = "sglx/wheelhouse"  # builds before deps.py only
WEIGHTS_REPO = "sglx/weights"
NO_TAG = "<none>:<none>"
# A weights manifest lists files and tensors: megabytes for the largest models, never more.
MAX_MANIFEST_BYTES = 64 << 20

DEPS_KIND = "deps-image"
OLD_IMAGE_KIND = "old-image"
WHEELHOUSE_KIND = "wheelhouse"
WEIGHTS_KIND = "weights"


@dataclass(frozen=True)
class Engine:
    """One listing of the engine's images (`docker images -a`), with the relations prune needs."""

    images: dict[str, dict[str, Any]]  # id -> the list API's summary
    children: dict[str, set[str]]
    protected: set[str]  # tagged images and every image a tagged image is built on

    @classmethod
    def read(cls, client: Any) -> Engine:
        images = {summary["Id"]: summary for summary in client.api.images(all=True)}
        children: dict[str, set[str]] = {image_id: set() for image_id in images}
        for image_id, summary in images.items():
            parent = summary.get("ParentId") or ""
            if parent in children:
                children[parent].add(image_id)
        engine = cls(images, children, set())
        for image_id in images:
            if engine.tags(image_id):
                engine.protected.update(engine.lineage(image_id))
        return engine

    def tags(self, image_id: str) -> list[str]:
        return [t for t in self.images[image_id].get("RepoTags") or () if t != NO_TAG]

    def labels(self, image_id: str) -> dict[str, str]:
        return dict(self.images[image_id].get("Labels") or {})

    def lineage(self, image_id: str) -> Iterator[str]:
        """`image_id`, then its parent, its parent's parent, ... (local builds record them)."""
        seen: set[str] = set()
        current = image_id
        while current in self.images and current not in seen:
            seen.add(current)
            yield current
            current = self.images[current].get("ParentId") or ""

    def built_on(self, image_id: str) -> bool:
        """Whether a tagged image other than `image_id` itself has it in its lineage."""
        return any(
            image_id in self.lineage(other)
            for other in self.images
            if other != image_id and self.tags(other)
        )

    def is_head(self, image_id: str) -> bool:
        """No image is built on it: what `docker images` shows (and calls dangling if untagged)."""
        return not self.children.get(image_id)


@dataclass(frozen=True)
class Leftover:
    """An image prune would remove; `size` is what removing it frees (its unique layers)."""

    id: str
    kind: str
    arch: str | None
    refs: tuple[str, ...]  # the tags a payload image is removed by; empty for untagged images
    created: str
    size: int = 0
    state: str = "removable"  # "removable" | "removed" | "in use by container ..."

    @property
    def short_id(self) -> str:
        return self.id.removeprefix("sha256:")[:12]

    @property
    def name(self) -> str:
        return ", ".join(self.refs) or self.short_id

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "kind": self.kind,
            "arch": self.arch,
            "tags": list(self.refs),
            "created": self.created,
            "size_bytes": self.size,
            "state": self.state,
        }


def _created(summary: dict[str, Any]) -> str:
    stamp = dt.datetime.fromtimestamp(int(summary.get("Created") or 0), dt.UTC)
    return stamp.isoformat(timespec="seconds")


def deps_images(engine: Engine, arch: str | None) -> list[Leftover]:
    """Deps images (of `arch`, or of every arch) no tagged image is built on: the tagged
    ``sglx/deps:<arch>-<key>`` of deps.py, and the untagged labelled deps stages of builds
    before it."""
    found = []
    for image_id, summary in engine.images.items():
        tags = engine.tags(image_id)
        labels = engine.labels(image_id)
        if tags:
            if {tag.rpartition(":")[0] for tag in tags} != {DEPS_REPO}:
                continue
            owner: str | None = tags[0].rpartition(":")[2].rpartition("-")[0]
        elif labels.get(image_labels.STAGE) == DEPS_STAGE and engine.is_head(image_id):
            owner = labels.get(image_labels.ARCH)
        else:
            continue
        if arch is not None and owner != arch:
            continue
        if not engine.built_on(image_id):
            found.append(
                Leftover(image_id, DEPS_KIND, owner, tuple(sorted(tags)), _created(summary))
            )
    return found


def old_images(engine: Engine, arch: str | None) -> list[Leftover]:
    """Serving images `sglx image build` made whose tag has moved on to a newer build."""
    found = []
    for image_id, summary in engine.images.items():
        labels = engine.labels(image_id)
        built = image_labels.LOCK_DIGEST in labels and image_labels.STAGE not in labels
        if not built or engine.tags(image_id):
            continue
        if arch is not None and labels.get(image_labels.ARCH) != arch:
            continue
        if engine.is_head(image_id) and image_id not in engine.protected:
            arch_of = labels.get(image_labels.ARCH)
            found.append(Leftover(image_id, OLD_IMAGE_KIND, arch_of, (), _created(summary)))
    return found


def backing_tags(engine: Engine) -> set[str]:
    """The payload tags tagged serving images were built from (names as payload.py makes them)."""
    tags = set()
    for image_id in engine.images:
        labels = engine.labels(image_id)
        if not engine.tags(image_id) or image_labels.LOCK_DIGEST not in labels:
            continue
        if image_labels.WEIGHTS_DIGEST in labels:
            outside = "-outside" if labels.get(image_labels.WEIGHTS_OUTSIDE) == "true" else ""
            tags.add(
                f"{WEIGHTS_REPO}:{labels[image_labels.WEIGHTS_DIGEST].partition(':')[2][:16]}{outside}"
            )
    return tags


def payloads(client: Any, engine: Engine, arch: str | None) -> list[Leftover]:
    """Payload images no tagged serving image was built from (the next build re-imports them)."""
    backing = backing_tags(engine)
    found = []
    for image_id, summary in engine.images.items():
        tags = engine.tags(image_id)
        repos = {tag.rpartition(":")[0] for tag in tags}
        if not tags or not repos <= {WHEELHOUSE_REPO, WEIGHTS_REPO} or backing & set(tags):
            continue
        if not engine.is_head(image_id):
            continue
        owner: str | None
        if repos == {WHEELHOUSE_REPO}:
            kind, owner = WHEELHOUSE_KIND, tags[0].rpartition(":")[2].rpartition("-")[0]
        elif repos == {WEIGHTS_REPO}:
            kind = WEIGHTS_KIND
            # The tag names no arch: only the manifest inside says which arch it was made for.
            owner = _weights_arch(client, image_id)
        else:
            continue
        if arch is not None and owner != arch:
            continue
        found.append(Leftover(image_id, kind, owner, tuple(sorted(tags)), _created(summary)))
    return found


def _weights_arch(client: Any, image_id: str) -> str | None:
    """The arch in a weights image's manifest, read from a container that is never started."""
    raw = read_image_file(client, image_id, f"{MODEL_DIR}/{MANIFEST_NAME}", MAX_MANIFEST_BYTES)
    try:
        document = json.loads(raw) if raw is not None else {}
    except ValueError:
        return None
    owner = document.get("arch") if isinstance(document, dict) else None
    return owner if isinstance(owner, str) else None


def _with_sizes(client: Any, leftovers: list[Leftover]) -> list[Leftover]:
    """Each leftover with the bytes only it holds (`docker system df -v`'s unique size)."""
    if not leftovers:
        return leftovers
    unique = {
        summary["Id"]: int(summary.get("Size") or 0) - max(int(summary.get("SharedSize") or 0), 0)
        for summary in client.df().get("Images") or ()
    }
    return [replace(item, size=unique.get(item.id, 0)) for item in leftovers]


def _with_users(client: Any, leftovers: list[Leftover]) -> list[Leftover]:
    """Mark the leftovers a container (running or not) was created from: removing them would
    need --force and break that container, so they stay."""
    users: dict[str, list[str]] = {}
    for container in client.api.containers(all=True):
        name = (container.get("Names") or [container["Id"][:12]])[0].lstrip("/")
        users.setdefault(container.get("ImageID", ""), []).append(name)
    return [
        replace(item, state=f"in use by container {', '.join(sorted(users[item.id]))}")
        if item.id in users
        else item
        for item in leftovers
    ]


def _remove(client: Any, item: Leftover) -> Leftover:
    """Remove one leftover without force; its untagged parents go with it, a base never does."""
    from docker.errors import APIError, ImageNotFound

    try:
        for ref in item.refs or (item.id,):
            client.images.remove(ref)
    except ImageNotFound:
        return replace(item, state="removed", size=0)  # gone already (another prune)
    except APIError as exc:
        return replace(item, state=f"kept: {exc.explanation or exc}")
    return replace(item, state="removed")


def replace_deps(
    client: Any, arch: str, *, keep: str, base_id: str, progress: Progress
) -> list[Leftover]:
    """After a build: remove the deps images of `arch` on the same base other than `keep` that
    no tagged image is built on.

    Deps images on another base that is still tagged stay: a build on that base still reuses
    them (so concurrent builds on different bases do not undo each other's cache). Those whose
    base is gone (no tagged image below them) can never be reused and go too.
    """
    engine = Engine.read(client)
    stale = [
        item
        for item in deps_images(engine, arch)
        if item.id != keep and (base_id in engine.lineage(item.id) or _base_gone(engine, item))
    ]
    removed = []
    for item in _with_users(client, _with_sizes(client, stale)):
        if item.state != "removable":
            continue
        done = _remove(client, item)
        if done.state == "removed":
            progress(f"removed the older {arch} deps image {done.name} ({done.size / 1e9:.2f} GB)")
            removed.append(done)
    return removed


def _base_gone(engine: Engine, item: Leftover) -> bool:
    """Whether the base a deps image was made on is untagged (no build can name it again): the
    parent of deps.py's image (a commit on the base), or any tagged image below a labelled deps
    stage of an older build (its parents are the stage's steps)."""
    below = list(engine.lineage(item.id))[1:]
    if item.refs:
        return not below or not engine.tags(below[0])
    return not any(engine.tags(i) for i in below)


def find_leftovers(client: Any, arch: str | None) -> list[Leftover]:
    """Every sglx build leftover of `arch` (or of all arches), sized and marked if in use."""
    engine = Engine.read(client)
    found = deps_images(engine, arch) + old_images(engine, arch) + payloads(client, engine, arch)
    found.sort(key=lambda item: (item.arch or "", item.kind, item.created))
    return _with_users(client, _with_sizes(client, found))


def prune(arch: str | None, *, dry_run: bool, progress: Progress) -> Result:
    if arch is not None:
        profile_path(arch)  # an unknown arch is a typo: say so before touching the engine
    client = docker_client()
    leftovers = find_leftovers(client, arch)
    if not dry_run:
        done = []
        for item in leftovers:
            if item.state == "removable":
                progress(f"removing {item.kind} {item.name} ({item.size / 1e9:.2f} GB)")
                item = _remove(client, item)
            done.append(item)
        leftovers = done
    return _result(arch, dry_run, leftovers)


def _result(arch: str | None, dry_run: bool, leftovers: Iterable[Leftover]) -> Result:
    items = list(leftovers)
    freed = sum(i.size for i in items if i.state == "removed")
    reclaimable = sum(i.size for i in items if i.state == "removable")
    kept = [i for i in items if i.state not in ("removable", "removed")]
    scope = f"{arch} " if arch else ""
    if not items:
        line = f"no sglx {scope}build leftovers in the engine"
    elif dry_run:
        line = f"would free {reclaimable / 1e9:.2f} GB ({len(items) - len(kept)} images)"
    else:
        removed = len(items) - len(kept)
        line = f"freed {freed / 1e9:.2f} GB ({removed} images removed)"
    state = "would remove" if dry_run else "removed"
    rows = tuple(
        (
            i.kind,
            i.arch or "?",
            i.name,
            i.created,
            f"{i.size / 1e9:.2f} GB",
            state if i.state in ("removable", "removed") else i.state,
        )
        for i in items
    )
    findings = tuple(
        Finding(
            "image_in_use",
            f"{i.kind} {i.name} was kept: {i.state}",
            hint=f"remove the container (docker ps -a --filter ancestor={i.short_id}), "
            "then prune again",
        )
        for i in kept
    )
    return Result(
        command=("image", "prune"),
        data={
            "arch": arch,
            "dry_run": dry_run,
            "images": [i.to_json() for i in items],
            "freed_bytes": freed,
            "reclaimable_bytes": reclaimable,
        },
        tables=(Table(("kind", "arch", "image", "created", "size", "state"), rows),)
        if rows
        else (),
        lines=(line,),
        findings=findings,
    )

"""Build leftovers in the real engine: a build keeps one deps stage, `sglx image prune` the rest.

Two layers of tests:

- Tiny builds (seconds, no cpu build): a Dockerfile shaped like images/Dockerfile.j2 (payload
  stage, labelled deps stage, serving stage copying from it) built with the real
  `build.docker_build` on bases imported from a one-file tar. They carry a private arch,
  ``sglx-test-<run_id>``, given a profile in a copy of images/ (SGLX_IMAGES_DIR), so pruning
  it can never touch the leftovers of real arches or of other sessions.
- The session's cpu build (the `cpu_image` fixture of conftest.py and the rebuild in
  test_image_cpu.py): exactly one deps stage remains, and `sglx image prune --arch cpu` lists
  and removes it. Pruning drops the deps cache the rebuild test relies on, so this module must
  run after test_image_cpu.py: pytest runs the files of a folder in name order and
  test_image_prune.py sorts after test_image_cpu.py and test_image_fixtures.py (keep the name
  when moving it). Later modules (test_scan_image.py) build nothing from the cpu cache.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers.images_copy import copy_images, edit_yaml

from sglx.image import prune
from sglx.image.build import docker_build
from sglx.progress import Progress

pytestmark = pytest.mark.docker
CliRunner = Callable[..., tuple[int, str, str]]
QUIET = Progress("test", quiet=True)
PAYLOAD_BYTES = 1 << 20

DOCKERFILE = """\
ARG BASE
ARG WHEELHOUSE
FROM ${WHEELHOUSE} AS wheelhouse
FROM ${BASE} AS deps
COPY --from=wheelhouse /wheelhouse /tmp/wheelhouse
LABEL io.sglx.stage=deps io.sglx.arch=%(arch)s
FROM ${BASE}
COPY --from=deps /tmp/wheelhouse /venv
"""


def _tar(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@dataclass
class Tiny:
    """Tiny sglx-shaped images of a private arch, and everything made, for the cleanup."""

    docker: Any
    arch: str
    folder: Path
    tags: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)

    def imported(self, ref: str, files: dict[str, bytes]) -> str:
        archive = self.folder / f"{hashlib.sha256(ref.encode()).hexdigest()[:12]}.tar"
        archive.write_bytes(_tar(files))
        repository, _, tag = ref.rpartition(":")
        self.docker.api.import_image_from_file(
            str(archive),
            repository=repository,
            tag=tag,
            changes=[f"LABEL io.sglx.arch={self.arch}"],
        )
        self.tags.append(ref)
        return str(self.docker.images.get(ref).id)

    def base(self, name: str) -> str:
        ref = f"sglx-test/prune-base-{name}:{self.arch}"
        self.imported(ref, {f"base-{name}.txt": name.encode()})
        return ref

    def wheelhouse(self) -> tuple[str, str]:
        """A wheelhouse payload, tagged the way payload.py does; returns (tag, lock digest)."""
        content = os.urandom(PAYLOAD_BYTES)
        digest = "sha256:" + hashlib.sha256(content).hexdigest()
        tag = f"sglx/wheelhouse:{self.arch}-{digest[7:23]}"
        self.imported(tag, {"wheelhouse/a-1.0-py3-none-any.whl": content})
        return tag, digest

    def weights(self) -> tuple[str, str]:
        """A weights payload whose manifest names the private arch; returns (tag, digest)."""
        manifest = json.dumps({"arch": self.arch, "nonce": os.urandom(8).hex()}).encode()
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        tag = f"sglx/weights:{digest[7:23]}"
        self.imported(tag, {"models/model/sglx-weights.json": manifest})
        return tag, digest

    def build(
        self, base: str, wheelhouse: tuple[str, str], tag: str, weights: str | None = None
    ) -> tuple[str, str]:
        """Build the tiny image; returns (image id, deps-stage id) as `sglx image build` has
        them."""
        context = self.folder / "context"
        context.mkdir(exist_ok=True)
        (context / "Dockerfile").write_text(DOCKERFILE % {"arch": self.arch})
        labels = {"io.sglx.arch": self.arch, "io.sglx.lock.digest": wheelhouse[1]}
        if weights is not None:
            labels["io.sglx.weights.digest"] = weights
        self.tags.append(tag)
        image_id, deps = docker_build(
            self.docker,
            False,
            context,
            tag,
            {"BASE": base, "WHEELHOUSE": wheelhouse[0]},
            labels,
            QUIET,
        )
        assert deps is not None
        return image_id, str(self.docker.images.get(deps).id)

    def deps_stages(self) -> list[str]:
        engine = prune.Engine.read(self.docker)
        return [item.id for item in prune.deps_stages(engine, self.arch)]

    def exists(self, ref: str) -> bool:
        from docker.errors import ImageNotFound

        try:
            self.docker.images.get(ref)
        except ImageNotFound:
            return False
        return True


@pytest.fixture
def tiny(
    docker: Any, run_id: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Tiny]:
    arch = f"sglx-test-{run_id}"
    images = copy_images(tmp_path)
    (images / arch).mkdir()
    (images / arch / "arch.yaml").write_text((images / "cpu" / "arch.yaml").read_text())
    edit_yaml(images / arch / "arch.yaml", {"arch": arch})
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(images))
    made = Tiny(docker, arch, tmp_path)
    yield made
    for name in made.containers:
        with contextlib.suppress(Exception):
            docker.containers.get(name).remove(force=True)
    for ref in reversed(made.tags):
        with contextlib.suppress(Exception):
            docker.images.remove(ref, force=True)
    for image in docker.images.list(all=True, filters={"label": f"io.sglx.arch={arch}"}):
        with contextlib.suppress(Exception):
            docker.images.remove(image.id, force=True)


def test_a_build_keeps_only_the_deps_stage_its_cache_needs(tiny: Tiny) -> None:
    base = tiny.base("a")
    first, second = tiny.wheelhouse(), tiny.wheelhouse()
    tag = f"sglx-test/prune-image:{tiny.arch}"
    _, deps1 = tiny.build(base, first, tag)
    assert (
        prune.replace_deps(
            tiny.docker,
            tiny.arch,
            keep=deps1,
            base_id=tiny.docker.images.get(base).id,
            progress=QUIET,
        )
        == []
    )
    assert tiny.deps_stages() == [deps1]

    # A new lock: a new deps stage; the older one of the same base goes, with its size.
    _, deps2 = tiny.build(base, second, tag)
    assert deps2 != deps1
    removed = prune.replace_deps(
        tiny.docker, tiny.arch, keep=deps2, base_id=tiny.docker.images.get(base).id, progress=QUIET
    )
    assert [item.id for item in removed] == [deps1]
    assert removed[0].size >= PAYLOAD_BYTES
    assert removed[0].state == "removed"
    assert tiny.deps_stages() == [deps2]
    assert not tiny.exists(deps1)

    # The same lock again: the build reuses the kept deps stage and nothing is removed.
    _, again = tiny.build(base, second, f"sglx-test/prune-image-again:{tiny.arch}")
    assert again == deps2
    assert (
        prune.replace_deps(
            tiny.docker,
            tiny.arch,
            keep=again,
            base_id=tiny.docker.images.get(base).id,
            progress=QUIET,
        )
        == []
    )
    assert tiny.exists(base) and tiny.exists(tag)


def test_deps_stages_on_another_base_stay_until_that_base_is_gone(tiny: Tiny) -> None:
    mine, other = tiny.base("mine"), tiny.base("other")
    wheels = tiny.wheelhouse()
    _, theirs = tiny.build(other, wheels, f"sglx-test/prune-other:{tiny.arch}")
    _, kept = tiny.build(mine, wheels, f"sglx-test/prune-mine:{tiny.arch}")
    base_id = tiny.docker.images.get(mine).id
    progress = QUIET
    assert (
        prune.replace_deps(tiny.docker, tiny.arch, keep=kept, base_id=base_id, progress=progress)
        == []
    )
    assert sorted(tiny.deps_stages()) == sorted([theirs, kept])

    # Untagged, the other base can never be built on again: its deps stage is of no use.
    tiny.docker.images.remove(other)
    removed = prune.replace_deps(
        tiny.docker, tiny.arch, keep=kept, base_id=base_id, progress=progress
    )
    assert [item.id for item in removed] == [theirs]
    assert tiny.deps_stages() == [kept]


def test_prune_lists_then_removes_leftovers_and_never_a_tagged_image(
    tiny: Tiny, sglx: CliRunner
) -> None:
    base = tiny.base("p")
    old_wheels, wheels = tiny.wheelhouse(), tiny.wheelhouse()
    used_weights, orphan_weights = tiny.weights(), tiny.weights()
    tag = f"sglx-test/prune-serving:{tiny.arch}"
    old_image, _ = tiny.build(base, old_wheels, tag, weights=used_weights[1])
    image, deps = tiny.build(base, wheels, tag, weights=used_weights[1])  # moves the tag
    prune.replace_deps(
        tiny.docker, tiny.arch, keep=deps, base_id=tiny.docker.images.get(base).id, progress=QUIET
    )
    expected = {
        (prune.DEPS_KIND, deps),
        (prune.OLD_IMAGE_KIND, old_image),
        (prune.WHEELHOUSE_KIND, tiny.docker.images.get(old_wheels[0]).id),
        (prune.WEIGHTS_KIND, tiny.docker.images.get(orphan_weights[0]).id),
    }

    code, out, err = sglx("image", "prune", "--arch", tiny.arch, "--dry-run", "--json")
    envelope = json.loads(out)
    assert (code, envelope["status"]) == (0, "ok"), err
    listed = envelope["data"]["images"]
    assert {(item["kind"], item["id"]) for item in listed} == expected
    assert all(item["state"] == "removable" and item["arch"] == tiny.arch for item in listed)
    assert all(item["size_bytes"] >= PAYLOAD_BYTES for item in listed if item["kind"] != "weights")
    assert envelope["data"]["reclaimable_bytes"] == sum(item["size_bytes"] for item in listed)
    assert envelope["data"]["freed_bytes"] == 0
    assert all(tiny.exists(image_id) for _, image_id in expected)

    code, out, err = sglx("image", "prune", "--arch", tiny.arch, "--dry-run")
    assert code == 0
    assert out.splitlines()[0].split() == ["kind", "arch", "image", "created", "size", "state"]
    assert f"sglx/wheelhouse:{tiny.arch}-{old_wheels[1][7:23]}" in out
    assert "would remove" in out and "would free " in out
    assert "Traceback" not in out + err

    # A container made from the deps stage keeps it (no force): a finding, exit 1.
    container = f"sglx-test-prune-{tiny.arch}"
    tiny.docker.containers.create(deps, command=["/none"], name=container)
    tiny.containers.append(container)
    code, out, err = sglx("image", "prune", "--arch", tiny.arch)
    assert code == 1, err
    assert f"finding [image_in_use] deps-stage {deps[7:19]} was kept: in use by container " in out
    assert container in out
    assert "hint: remove the container (docker ps -a --filter ancestor=" in out
    assert "freed " in out and "(3 images removed)" in out
    assert "Traceback" not in out + err
    assert tiny.exists(deps)
    assert not any(tiny.exists(i) for kind, i in expected if kind != prune.DEPS_KIND)

    tiny.docker.containers.get(container).remove()
    code, out, _ = sglx("image", "prune", "--arch", tiny.arch, "--json")
    envelope = json.loads(out)
    assert code == 0
    [item] = envelope["data"]["images"]
    assert (item["kind"], item["id"], item["state"]) == (prune.DEPS_KIND, deps, "removed")
    assert envelope["data"]["freed_bytes"] == item["size_bytes"] >= PAYLOAD_BYTES
    assert not tiny.exists(deps)

    code, out, _ = sglx("image", "prune", "--arch", tiny.arch)
    assert (code, out) == (0, f"no sglx {tiny.arch} build leftovers in the engine\n")
    # Never the tagged serving image, its base or the payloads it was built from.
    assert tiny.docker.images.get(tag).id == image
    assert all(tiny.exists(ref) for ref in (base, wheels[0], used_weights[0]))


@pytest.mark.slow
def test_one_cpu_deps_stage_remains_and_prune_removes_it(
    docker: Any, cpu_image: dict[str, Any], cpu_base: str, sglx: CliRunner
) -> None:
    """After the session's cpu builds (the fixture, and test_image_cpu.py's rebuild when it
    ran), one deps stage built on the session's base remains; prune lists it, then frees it."""
    engine = prune.Engine.read(docker)
    base_id = docker.images.get(cpu_base).id
    mine = [
        item.id for item in prune.deps_stages(engine, "cpu") if base_id in engine.lineage(item.id)
    ]
    assert mine == [cpu_image["deps_image"]]

    code, out, err = sglx("image", "prune", "--arch", "cpu", "--dry-run", "--json")
    assert code == 0, err
    [listed] = [i for i in json.loads(out)["data"]["images"] if i["id"] == mine[0]]
    assert (listed["kind"], listed["arch"], listed["state"]) == ("deps-stage", "cpu", "removable")
    assert listed["size_bytes"] > 1e9  # the wheelhouse copy and the installed venv

    code, out, err = sglx("image", "prune", "--arch", "cpu", "--json")
    envelope = json.loads(out)
    assert code == 0, err
    [removed] = [i for i in envelope["data"]["images"] if i["id"] == mine[0]]
    assert removed["state"] == "removed"
    assert envelope["data"]["freed_bytes"] >= removed["size_bytes"] == listed["size_bytes"]
    assert mine[0] not in {i.id for i in prune.deps_stages(prune.Engine.read(docker), "cpu")}
    # The serving image and the payloads it was built from stay.
    assert docker.images.get(cpu_image["tag"]).id == cpu_image["id"]
    for payload_tag in cpu_image["payload_images"]:
        assert docker.images.get(payload_tag)

"""Build leftovers in the real engine: a build keeps one deps image, `sglx image prune` the rest.

Two layers of tests:

- Tiny builds (seconds, no cpu build): deps images made by the real `deps.deps_image` (a
  container of a base runs a two-line deps script over a one-wheel wheelhouse, and is
  committed) and serving images built FROM them by the real `build.docker_build`. The bases
  are labelled copies of the session's cpu base (a shell to run the script; a copy is a new
  image id over the same layers). They carry a private arch, ``sglx-test-<run_id>``, given a
  profile in a copy of images/ (SGLX_IMAGES_DIR), so pruning it can never touch the leftovers
  of real arches or of other sessions.
- The session's cpu build (the `cpu_image` fixture of conftest.py and the rebuild in
  test_image_cpu.py): its deps image stays while the serving image is built on it. Nothing
  here prunes a real arch, so the module needs no order against test_image_cpu.py.
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

from sglx.image import deps, prune
from sglx.image.build import docker_build
from sglx.progress import Progress
from sglx.wheels.lockfile import Lock, Wheel

pytestmark = pytest.mark.docker
CliRunner = Callable[..., tuple[int, str, str]]
QUIET = Progress("test", quiet=True)
PAYLOAD_BYTES = 1 << 20
# What the tiny deps image holds: the wheelhouse, copied where a venv would be.
SCRIPT = "set -eu\ncp -r /tmp/sglx-deps/wheelhouse /venv\nrm -rf /tmp/sglx-deps\n"
DOCKERFILE = "ARG DEPS\nFROM ${DEPS}\nLABEL io.sglx.test.serving=%(arch)s\n"


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
    cpu_base: str
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
        """A base of its own id: the cpu base with a label."""
        ref = f"sglx-test/prune-base-{name}:{self.arch}"
        self.tags.append(ref)
        context = f"FROM {self.cpu_base}\nLABEL io.sglx.arch={self.arch} io.sglx.test.base={name}\n"
        docker_build(self.docker, False, context, ref, {}, {}, QUIET)
        return ref

    def lock(self) -> tuple[Lock, Path]:
        """A one-wheel lock of random bytes and its wheelhouse folder (the lock file beside)."""
        content = os.urandom(PAYLOAD_BYTES)
        sha = hashlib.sha256(content).hexdigest()
        folder = self.folder / f"wheelhouse-{sha[:12]}"
        folder.mkdir()
        wheel = Wheel("a", "1.0", sha, "a-1.0-py3-none-any.whl")
        (folder / wheel.filename).write_bytes(content)
        (folder / "lock.txt").write_text(f"a==1.0 --hash=sha256:{sha}\n")
        return Lock(self.arch, "tiny", {}, (wheel,)), folder

    def deps(self, base: str, lock: tuple[Lock, Path], reuse: bool = True) -> tuple[str, str]:
        """The deps image of `base` and `lock`, made (or reused) as `sglx image build` does;
        returns (tag, image id)."""
        made = deps.deps_image(
            self.docker,
            arch=self.arch,
            base_ref=base,
            base_image=self.docker.images.get(base),
            lock=lock[0],
            lock_file=lock[1] / "lock.txt",
            wheelhouse=lock[1],
            script=SCRIPT,
            timeout_s=300,
            progress=QUIET,
            reuse=reuse,
        )
        self.tags.append(made.tag)
        return made.tag, str(self.docker.images.get(made.tag).id)

    def weights(self) -> tuple[str, str]:
        """A weights payload whose manifest names the private arch; returns (tag, digest)."""
        manifest = json.dumps({"arch": self.arch, "nonce": os.urandom(8).hex()}).encode()
        digest = "sha256:" + hashlib.sha256(manifest).hexdigest()
        tag = f"sglx/weights:{digest[7:23]}"
        self.imported(tag, {"models/model/sglx-weights.json": manifest})
        return tag, digest

    def build(self, deps_tag: str, lock: Lock, tag: str, weights: str | None = None) -> str:
        """Build the tiny serving image on `deps_tag`, labelled as `sglx image build` does."""
        labels = {"io.sglx.arch": self.arch, "io.sglx.lock.digest": lock.digest}
        if weights is not None:
            labels["io.sglx.weights.digest"] = weights
        self.tags.append(tag)
        dockerfile = DOCKERFILE % {"arch": self.arch}
        return docker_build(self.docker, False, dockerfile, tag, {"DEPS": deps_tag}, labels, QUIET)

    def replace(self, keep: str, base: str) -> list[prune.Leftover]:
        base_id = self.docker.images.get(base).id
        return prune.replace_deps(
            self.docker, self.arch, keep=keep, base_id=base_id, progress=QUIET
        )

    def deps_images(self) -> list[str]:
        engine = prune.Engine.read(self.docker)
        return [item.id for item in prune.deps_images(engine, self.arch)]

    def exists(self, ref: str) -> bool:
        from docker.errors import ImageNotFound

        try:
            self.docker.images.get(ref)
        except ImageNotFound:
            return False
        return True


@pytest.fixture
def tiny(
    docker: Any, run_id: str, cpu_base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Tiny]:
    arch = f"sglx-test-{run_id}"
    images = copy_images(tmp_path)
    (images / arch).mkdir()
    (images / arch / "arch.yaml").write_text((images / "cpu" / "arch.yaml").read_text())
    edit_yaml(images / arch / "arch.yaml", {"arch": arch})
    monkeypatch.setenv("SGLX_IMAGES_DIR", str(images))
    made = Tiny(docker, arch, tmp_path, cpu_base)
    yield made
    for name in made.containers:
        with contextlib.suppress(Exception):
            docker.containers.get(name).remove(force=True)
    for ref in reversed(made.tags):
        with contextlib.suppress(Exception):
            docker.images.remove(ref, force=True)
    for image_id in docker.api.images(
        all=True, quiet=True, filters={"label": f"io.sglx.arch={arch}"}
    ):
        with contextlib.suppress(Exception):
            docker.images.remove(image_id, force=True)


def test_a_deps_image_holds_the_script_s_work_and_no_wheelhouse_and_is_reused(
    tiny: Tiny,
) -> None:
    """The container ran the script over the copied wheelhouse and was committed as one layer
    on the base, without the copied folder; the same base, lock and script reuse it, and
    `reuse=False` (`--no-cache`) makes it again, the earlier image removed."""
    base = tiny.base("a")
    lock = tiny.lock()
    tag, first = tiny.deps(base, lock)
    assert tag == deps.deps_tag(tiny.arch, deps.deps_key(tiny.docker.images.get(base).id,
                                                         lock[0].digest, SCRIPT))  # fmt: skip
    layers = tiny.docker.images.get(first).attrs["RootFS"]["Layers"]
    assert layers[:-1] == tiny.docker.images.get(base).attrs["RootFS"]["Layers"]
    listing = tiny.docker.containers.run(
        tag, ["sh", "-c", "ls /venv; ls -d /tmp/sglx-deps 2>&1 || true"], remove=True,
        network_mode="none", entrypoint=[],
    ).decode()  # fmt: skip
    assert "a-1.0-py3-none-any.whl" in listing and "lock.txt" in listing
    assert "No such file or directory" in listing
    config = tiny.docker.images.get(first).attrs["Config"]
    base_config = tiny.docker.images.get(base).attrs["Config"]
    for key in ("Cmd", "Entrypoint"):  # the base's, not the script's
        assert (config[key] or []) == (base_config[key] or []), key
    assert tiny.deps(base, lock) == (tag, first)
    _, again = tiny.deps(base, lock, reuse=False)
    assert again != first and not tiny.exists(first)


def test_a_failing_deps_script_names_its_output_and_leaves_no_container(tiny: Tiny) -> None:
    base = tiny.base("f")
    lock, folder = tiny.lock()
    with pytest.raises(deps.SglxError) as failed:
        deps.deps_image(
            tiny.docker, arch=tiny.arch, base_ref=base, base_image=tiny.docker.images.get(base),
            lock=lock, lock_file=folder / "lock.txt", wheelhouse=folder,
            script="echo 'ERROR: THESE PACKAGES DO NOT MATCH THE HASHES'; exit 3\n",
            timeout_s=120, progress=QUIET, reuse=True,
        )  # fmt: skip
    assert "deps.sh exit 3" in failed.value.message
    assert "DO NOT MATCH THE HASHES" in failed.value.message
    assert "sglx wheels verify" in (failed.value.hint or "")
    # No container of the base is left (the engine's others come and go with the tests
    # running beside this one: CI-J saw one removed meanwhile).
    assert tiny.docker.containers.list(all=True, filters={"ancestor": base}) == []


def test_a_build_keeps_only_the_deps_image_its_next_build_needs(tiny: Tiny) -> None:
    base = tiny.base("b")
    first, second = tiny.lock(), tiny.lock()
    tag = f"sglx-test/prune-image:{tiny.arch}"
    deps1_tag, deps1 = tiny.deps(base, first)
    tiny.build(deps1_tag, first[0], tag)
    assert tiny.replace(deps1, base) == []
    assert tiny.deps_images() == []  # the tagged serving image is built on it

    # A new lock: a new deps image, the tag moves to the image built on it; the older deps
    # image then holds only the untagged old serving image, and goes, with its size.
    deps2_tag, deps2 = tiny.deps(base, second)
    assert deps2 != deps1
    tiny.build(deps2_tag, second[0], tag)
    removed = tiny.replace(deps2, base)
    assert [item.id for item in removed] == [deps1]
    assert removed[0].state == "removed"
    assert not tiny.exists(deps1_tag)
    assert tiny.deps_images() == []

    # The same lock again: the build reuses the deps image and nothing is removed.
    assert tiny.deps(base, second) == (deps2_tag, deps2)
    tiny.build(deps2_tag, second[0], f"sglx-test/prune-image-again:{tiny.arch}")
    assert tiny.replace(deps2, base) == []
    assert tiny.exists(base) and tiny.exists(tag)


def test_deps_images_on_another_base_stay_until_that_base_is_gone(tiny: Tiny) -> None:
    mine, other = tiny.base("mine"), tiny.base("other")
    lock = tiny.lock()
    _, theirs = tiny.deps(other, lock)
    _, kept = tiny.deps(mine, lock)
    assert tiny.replace(kept, mine) == []
    assert sorted(tiny.deps_images()) == sorted([theirs, kept])

    # Untagged, the other base can never be built on again: its deps image is of no use.
    tiny.docker.images.remove(other)
    removed = tiny.replace(kept, mine)
    assert [item.id for item in removed] == [theirs]
    assert tiny.deps_images() == [kept]


def test_prune_lists_then_removes_leftovers_and_never_a_tagged_image(
    tiny: Tiny, sglx: CliRunner
) -> None:
    base = tiny.base("p")
    old_lock, lock = tiny.lock(), tiny.lock()
    used_weights, orphan_weights = tiny.weights(), tiny.weights()
    old_wheelhouse = f"sglx/wheelhouse:{tiny.arch}-{old_lock[0].digest[7:23]}"
    tiny.imported(old_wheelhouse, {"wheelhouse/a-1.0-py3-none-any.whl": os.urandom(PAYLOAD_BYTES)})
    tag = f"sglx-test/prune-serving:{tiny.arch}"
    old_deps_tag, old_deps = tiny.deps(base, old_lock)
    old_image = tiny.build(old_deps_tag, old_lock[0], tag, weights=used_weights[1])
    deps_tag, deps_id = tiny.deps(base, lock)
    image = tiny.build(deps_tag, lock[0], tag, weights=used_weights[1])  # moves the tag
    spare_tag, spare = tiny.deps(tiny.base("spare"), lock)  # built on by nothing
    expected = {
        (prune.DEPS_KIND, old_deps),
        (prune.DEPS_KIND, spare),
        (prune.OLD_IMAGE_KIND, old_image),
        (prune.WHEELHOUSE_KIND, tiny.docker.images.get(old_wheelhouse).id),
        (prune.WEIGHTS_KIND, tiny.docker.images.get(orphan_weights[0]).id),
    }

    code, out, err = sglx("image", "prune", "--arch", tiny.arch, "--dry-run", "--json")
    envelope = json.loads(out)
    assert (code, envelope["status"]) == (0, "ok"), err
    listed = envelope["data"]["images"]
    assert {(item["kind"], item["id"]) for item in listed} == expected
    assert all(item["state"] == "removable" and item["arch"] == tiny.arch for item in listed)
    assert envelope["data"]["reclaimable_bytes"] == sum(item["size_bytes"] for item in listed)
    assert envelope["data"]["freed_bytes"] == 0
    assert all(tiny.exists(image_id) for _, image_id in expected)

    code, out, err = sglx("image", "prune", "--arch", tiny.arch, "--dry-run")
    assert code == 0
    assert out.splitlines()[0].split() == ["kind", "arch", "image", "created", "size", "state"]
    assert old_wheelhouse in out and spare_tag in out
    assert "would remove" in out and "would free " in out
    assert "Traceback" not in out + err

    # A container made from the spare deps image keeps it (no force): a finding, exit 1.
    container = f"sglx-test-prune-{tiny.arch}"
    tiny.docker.containers.create(spare, command=["/none"], name=container)
    tiny.containers.append(container)
    code, out, err = sglx("image", "prune", "--arch", tiny.arch)
    assert code == 1, err
    assert f"finding [image_in_use] deps-image {spare_tag} was kept: in use by container " in out
    assert container in out
    assert "hint: remove the container (docker ps -a --filter ancestor=" in out
    assert "freed " in out and "(4 images removed)" in out
    assert "Traceback" not in out + err
    assert tiny.exists(spare)
    assert not any(tiny.exists(i) for _, i in expected if i != spare)

    tiny.docker.containers.get(container).remove()
    code, out, _ = sglx("image", "prune", "--arch", tiny.arch, "--json")
    envelope = json.loads(out)
    assert code == 0
    [item] = envelope["data"]["images"]
    assert (item["kind"], item["id"], item["state"]) == (prune.DEPS_KIND, spare, "removed")
    assert not tiny.exists(spare)

    code, out, _ = sglx("image", "prune", "--arch", tiny.arch)
    assert (code, out) == (0, f"no sglx {tiny.arch} build leftovers in the engine\n")
    # Never the tagged serving image, its base, its deps image or the weights it was built from.
    assert tiny.docker.images.get(tag).id == image
    assert all(tiny.exists(ref) for ref in (base, deps_id, used_weights[0]))


@pytest.mark.slow
def test_the_cpu_deps_image_stays_while_its_serving_image_is_tagged(
    docker: Any, cpu_image: dict[str, Any], sglx: CliRunner
) -> None:
    """The session's cpu serving image is built on its deps image (the venv's layer is the
    image's, held once): prune leaves the deps image while a tagged image is built on it."""
    deps_id = cpu_image["deps_image"]
    deps_tag = cpu_image["payload_images"][0]
    assert docker.images.get(deps_tag).id == deps_id
    engine = prune.Engine.read(docker)
    assert deps_id in engine.lineage(cpu_image["id"])
    assert deps_id not in [item.id for item in prune.deps_images(engine, "cpu")]
    code, out, err = sglx("image", "prune", "--arch", "cpu", "--dry-run", "--json")
    assert code == 0, err
    assert deps_id not in [i["id"] for i in json.loads(out)["data"]["images"]]
    assert docker.images.get(cpu_image["tag"]).id == cpu_image["id"]

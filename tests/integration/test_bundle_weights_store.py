"""Weights outside the image, in the node-local weights store (issue 26, part 5), on the real
engine with two tiny images and no cpu image.

The weights (two 64 KiB shards and their manifest, made by hand) are above a 1 KiB threshold,
so `sglx image build`'s step (sglx.image.weights_outside.keep, run here directly: the suite's
cpu image stays below the profile's 4 GiB and keeps its weights baked) puts them in the build
host's store, and the image `v1` (a 3 MB `docker import`) is labelled as a build labels it
(io.sglx.weights.digest, io.sglx.weights.outside). `v2` is v1 plus a 50 kB layer: an image-only
upgrade, bundled as a delta over v1's bundle. v1's bundle carries the weights; v2's names them by
digest only. Each install goes to a store of its own test; the images are removed first, so each
test starts from a site without them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import child_image, import_tiny_image
from helpers.engine_fixtures import has_image, remove_images
from helpers.weights_store import converted_weights, flip_a_byte

JsonRunner = Callable[..., tuple[int, dict[str, Any]]]


@dataclass(frozen=True)
class World:
    digest: str
    tags: dict[str, str]
    ids: dict[str, str]
    bundles: dict[str, Path]

    @property
    def hex(self) -> str:
        return self.digest.removeprefix("sha256:")


@pytest.fixture(scope="module")
def world(docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    from sglx.cli import main
    from sglx.image.weights_outside import keep
    from sglx.progress import Progress
    from sglx_core.profile import load_profile

    folder = tmp_path_factory.mktemp("weights-store")
    digest = converted_weights(folder / "converted")
    built = folder / "build-store"
    entry = keep(load_profile("cpu"), folder / "converted", digest, 1024, built, Progress("t"))
    assert entry == built / digest.removeprefix("sha256:")
    shutil.rmtree(folder / "converted")  # bundle create finds them in the store
    tags = {v: f"sglx-test/weights-store-{v}:{run_id}" for v in ("v1", "v2")}
    labels = {
        "io.sglx.weights.digest": digest,
        "io.sglx.weights.outside": "true",
        "io.sglx.model.name": "demo",
    }
    ids = {"v1": import_tiny_image(docker, tags["v1"], labels=labels)}
    ids["v2"] = child_image(docker, tags["v1"], tags["v2"], "plugin-2", 50_000)
    bundles = {v: folder / v for v in ("v1", "v2")}
    args = ["bundle", "create", "--arch", "cpu", "--no-scan", "-q", "--models-root", str(built)]
    try:
        assert main([*args, "--image", tags["v1"], "--out", str(bundles["v1"])]) == 0
        since = ["--since", str(bundles["v1"])]
        assert main([*args, "--image", tags["v2"], "--out", str(bundles["v2"]), *since]) == 0
        yield World(digest, tags, ids, bundles)
    finally:
        for version in ("v2", "v1"):
            remove_images(docker, ids.get(version, tags[version]))
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def site(world: World, docker: Any, tmp_path: Path) -> Iterator[Path]:
    """A site without the two images; its weights store is tmp_path/models."""
    for version in ("v2", "v1"):
        remove_images(docker, world.ids[version])
    yield tmp_path
    for version in ("v2", "v1"):
        remove_images(docker, world.ids[version])


def stamps(entry: Path) -> dict[str, tuple[int, int]]:
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in entry.iterdir()}


def test_the_upgrade_carries_no_weights_and_reuses_the_store_entry(
    world: World, site: Path, sglx_json: JsonRunner, docker: Any
) -> None:
    v1 = json.loads((world.bundles["v1"] / "bundle.json").read_text())
    v2 = json.loads((world.bundles["v2"] / "bundle.json").read_text())
    assert v1["weights"]["digest"] == v2["weights"]["digest"] == world.digest
    assert v1["weights"]["path"] == "weights/demo"
    assert sorted(e["path"] for e in v1["files"] if e["kind"] == "weights") == [
        "weights/demo/model-00000-of-00002.safetensors",
        "weights/demo/model-00001-of-00002.safetensors",
        "weights/demo/sglx-weights.json",
    ]
    assert (v2["weights"]["carried"], v2["weights"]["path"]) == (False, None)
    assert not [e for e in v2["files"] if e["kind"] == "weights"]
    assert not (world.bundles["v2"] / "weights").exists()
    code, checked = sglx_json("bundle", "verify", str(world.bundles["v2"]), "--no-scan", "-q")
    assert (code, checked["findings"]) == (0, [])

    models, state = site / "models", str(site / "state")
    entry = models / world.hex
    mount = f"{entry}:/models/model:ro"
    install = install_args(state, models)
    code, first = sglx_json(*install, str(world.bundles["v1"]))
    assert code == 0, first
    assert first["data"]["steps"]["weights"]["status"] == "done"
    assert mount in first["data"]["docker_run"]
    placed = stamps(entry)
    assert len(placed) == 3
    code, second = sglx_json(*install, str(world.bundles["v2"]))
    assert code == 0, second
    assert second["data"]["redone"] == ["verify", "image"]
    assert second["data"]["steps"]["weights"]["status"] == "skipped"
    assert mount in second["data"]["docker_run"]
    assert stamps(entry) == placed  # the same files: not copied again
    assert has_image(docker, world.ids["v2"])
    assert sorted(p.name for p in models.iterdir()) == [world.hex]  # no staging left


def install_args(state: str, models: Path) -> tuple[str, ...]:
    """`sglx bundle install` into the test's store (the module's bundles are made with
    --no-scan, which install then accepts)."""
    return ("bundle", "install", "--no-scan", "--state", state, "--models-root", str(models))


def test_a_tampered_entry_is_replaced_only_when_asked_and_a_delta_never_mounts_it(
    world: World, site: Path, sglx_json: JsonRunner, docker: Any
) -> None:
    models, state = site / "models", str(site / "state")
    entry = models / world.hex
    install = install_args(state, models)
    code, _ = sglx_json(*install, str(world.bundles["v1"]))
    assert code == 0
    shard = entry / "model-00000-of-00002.safetensors"
    good = shard.read_bytes()
    flip_a_byte(shard)
    # Never replaced unasked (issue 37): every image mounting the entry would serve its bytes.
    code, refused = sglx_json(*install, str(world.bundles["v1"]))
    assert code == 2, refused
    [error] = refused["errors"]
    assert "install never replaces an entry that holds other bytes" in error["message"]
    assert "--replace-weights" in error["hint"]
    assert shard.read_bytes() != good  # left as it was found
    code, again = sglx_json(*install, "--replace-weights", str(world.bundles["v1"]))
    assert code == 0, again
    assert again["data"]["steps"]["weights"]["status"] == "done"
    assert shard.read_bytes() == good
    flip_a_byte(shard)
    code, refused = sglx_json(*install, str(world.bundles["v2"]))
    assert code == 2, refused
    [error] = refused["errors"]
    assert (
        "takes its weights" in error["message"]
        and "does not match its sha256" in (error["message"])
    )
    assert "install the bundle v1 first" in error["hint"]
    assert not has_image(docker, world.ids["v2"])  # nothing was loaded


def test_a_bundle_naming_another_models_digest_never_takes_its_entry(
    world: World, site: Path, sglx_json: JsonRunner, docker: Any
) -> None:
    """Issue 37 item 1: an unsigned bundle re-hashed to name another model's weights digest
    removed that model's store entry and put its own weights there. The entry is named by the
    digest of the manifest the bundle carries: a mismatch is refused naming both, before
    anything is written or loaded."""
    from sglx.bundle.manifest import dump, parse, render_sums, sha256_bytes

    other = "sha256:" + "ab" * 32
    forged = site / "forged"
    shutil.copytree(world.bundles["v1"], forged)
    manifest = parse((forged / "bundle.json").read_bytes(), "bundle.json")
    assert manifest.weights is not None
    manifest = manifest.model_copy(
        update={"weights": manifest.weights.model_copy(update={"digest": other})}
    )
    raw = dump(manifest)
    (forged / "bundle.json").write_bytes(raw)
    (forged / "SHA256SUMS").write_text(render_sums(manifest, sha256_bytes(raw), None))
    models = site / "models"
    theirs = models / other.removeprefix("sha256:")
    theirs.mkdir(parents=True)
    (theirs / "sglx-weights.json").write_text("another model's\n")
    install = (
        "bundle",
        "install",
        "--no-scan",
        "--state",
        str(site / "state"),
        "--models-root",
        str(models),
    )
    code, refused = sglx_json(*install, "-q", str(forged))
    assert code == 2, refused
    [error] = refused["errors"]
    assert f"bundle.json names the weights {other}" in error["message"]
    assert f"is of {world.digest}" in error["message"]
    assert (theirs / "sglx-weights.json").read_text() == "another model's\n"
    assert sorted(p.name for p in models.iterdir()) == [theirs.name]
    assert not has_image(docker, world.ids["v1"])  # nothing was loaded
    code, refused = sglx_json(*install, "-q", "--replace-weights", str(forged))
    assert code == 2 and "is of" in refused["errors"][0]["message"], refused


def install_sh(bundle: Path, site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(bundle / "install.sh"), "--no-scan", "--state", str(site / "state"), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_install_sh_places_checks_and_mounts_the_entry_the_same_way(
    world: World, site: Path, docker: Any
) -> None:
    models = site / "models"
    entry = models / world.hex
    root = ("--models-root", str(models))
    done = install_sh(world.bundles["v1"], site, *root)
    assert done.returncode == 0, done.stderr
    assert "placed the weights in" in done.stderr
    assert f"-v {entry}:/models/model:ro" in done.stdout
    placed = stamps(entry)
    done = install_sh(world.bundles["v2"], site, *root)
    assert done.returncode == 0, done.stderr
    assert "are in the weights store" in done.stderr
    assert f"-v {entry}:/models/model:ro" in done.stdout
    assert stamps(entry) == placed
    remove_images(docker, world.ids["v2"])
    flip_a_byte(entry / "sglx-weights.json")
    refused = install_sh(world.bundles["v2"], site, *root)
    assert refused.returncode == 2, refused.stderr
    assert "takes its weights" in refused.stderr and "does not match its sha256" in refused.stderr
    assert "nothing was loaded" in refused.stderr
    assert not has_image(docker, world.ids["v2"])
    refused = install_sh(world.bundles["v1"], site, *root)
    assert refused.returncode == 2, refused.stderr
    assert "install never replaces an entry that holds other bytes" in refused.stderr
    assert "nothing was loaded" in refused.stderr
    again = install_sh(world.bundles["v1"], site, *root, "--replace-weights")
    assert again.returncode == 0, again.stderr
    assert "replacing it (--replace-weights)" in again.stderr
    assert install_sh(world.bundles["v2"], site, *root).returncode == 0
    assert sorted(p.name for p in models.iterdir()) == [world.hex]

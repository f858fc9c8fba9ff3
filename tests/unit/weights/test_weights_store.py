"""Issue 26, part 5: weights above a size stay outside the image, in a node-local store keyed by
their manifest digest, placed once, checked on every install, mounted read-only.

Here without an engine: the threshold (flag, variable, profile) and `sglx image build`'s
decision with a low one; the store's check and placement (a damaged entry placed again, other
entries untouched, a failed placement leaving the old one); bundle.json's weights record for
weights named by digest only; the run spec's mount; install.sh's rendering. The real engine's
part is tests/integration/test_bundle_weights_store.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.weights_store import converted_weights, flip_a_byte

from sglx.image import weights_outside
from sglx.progress import Progress
from sglx.run_spec import RunSpec, Site, docker_run_words, run_spec
from sglx.weights import store
from sglx_core.errors import SglxError
from sglx_core.profile import load_profile
from sglx_core.sizes import parse_size
from sglx_core.weights_store import THRESHOLD_ENV, entry_folder, entry_name

QUIET = Progress("test", quiet=True)
DIGEST = "sha256:" + "ab" * 32


@pytest.fixture
def weights(tmp_path: Path) -> tuple[Path, str]:
    folder = tmp_path / "demo-cpu"
    return folder, converted_weights(folder)


# --- the threshold and `sglx image build`'s decision --------------------------------------------


def test_sizes_and_entry_names() -> None:
    assert parse_size("4GiB") == 4 << 30
    assert parse_size("700MB") == 700_000_000
    assert parse_size("1024") == 1024
    assert parse_size("4 GiB") == parse_size("4gib") == 4 << 30  # the one grammar (sizes.py)
    assert parse_size("-1") is None and parse_size("4g") is None and parse_size("1.5GB") is None
    assert entry_folder("/var/lib/sglx/models/", DIGEST) == f"/var/lib/sglx/models/{'ab' * 32}"
    with pytest.raises(ValueError, match="not a weights digest"):
        entry_name("sha256:XY")


def test_the_threshold_is_the_flag_else_the_variable_else_the_profile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profile = load_profile("cpu")
    monkeypatch.delenv(THRESHOLD_ENV, raising=False)
    assert profile.weights.outside_above == "4GiB"
    assert weights_outside.threshold(profile, None) == 4 << 30
    monkeypatch.setenv(THRESHOLD_ENV, "1MiB")
    assert weights_outside.threshold(profile, None) == 1 << 20
    assert weights_outside.threshold(profile, "2KiB") == 2048
    with pytest.raises(SglxError, match="--weights-outside-above is 'lots', not a size"):
        weights_outside.threshold(profile, "lots")
    monkeypatch.setenv(THRESHOLD_ENV, "4g")
    with pytest.raises(SglxError, match=f"{THRESHOLD_ENV} is '4g', not a size"):
        weights_outside.threshold(profile, None)


def test_below_the_threshold_the_weights_stay_baked(
    weights: tuple[Path, str], tmp_path: Path
) -> None:
    """The profile's default keeps small weights (the suite's demo model among them) in the
    image: nothing is written to any store."""
    folder, digest = weights
    profile = load_profile("cpu")
    limit = weights_outside.threshold(profile, None)
    assert weights_outside.keep(profile, folder, digest, limit, tmp_path / "store", QUIET) is None
    assert not (tmp_path / "store").exists()


def test_above_a_low_threshold_the_build_keeps_them_in_the_store_once(
    weights: tuple[Path, str], tmp_path: Path
) -> None:
    folder, digest = weights
    profile, root = load_profile("cpu"), tmp_path / "store"
    entry = weights_outside.keep(profile, folder, digest, 1024, root, QUIET)
    assert entry == root / entry_name(digest)
    files = store.folder_files(folder)
    assert sorted(p.name for p in entry.iterdir()) == sorted(f.name for f in files)
    assert store.problem(entry, files, digest) is None
    stamp = {p.name: p.stat().st_ino for p in entry.iterdir()}
    assert weights_outside.keep(profile, folder, digest, 1024, root, QUIET) == entry
    assert {p.name: p.stat().st_ino for p in entry.iterdir()} == stamp  # not copied again


# --- the store: check and placement -------------------------------------------------------------


def test_an_entry_is_checked_file_by_file(weights: tuple[Path, str], tmp_path: Path) -> None:
    folder, digest = weights
    files = store.folder_files(folder)
    entry = tmp_path / entry_name(digest)
    assert store.problem(entry, files, digest) == "is not there"
    store.place(entry, [(folder / f.name, f) for f in files], QUIET)
    assert store.problem(entry, files, digest, jobs=2) is None
    assert oct(entry.stat().st_mode & 0o777) == "0o755"
    assert {oct(p.stat().st_mode & 0o777) for p in entry.iterdir()} == {"0o644"}
    shard = entry / files[0].name
    flip_a_byte(shard)
    assert store.problem(entry, files, digest) == (
        f"{files[0].name} does not match its sha256 (it changed after it was placed)"
    )
    shard.write_bytes(b"short")
    assert "is 5 bytes, its manifest says" in str(store.problem(entry, files, digest))
    (entry / "extra").write_bytes(b"x")
    shard.unlink()
    assert store.problem(entry, files, digest) == f"lacks {files[0].name}"
    (entry / files[0].name).symlink_to(folder / files[0].name)
    assert store.problem(entry, files, digest) == "holds extra, which its manifest does not list"
    (entry / "extra").unlink()
    assert store.problem(entry, files, digest) == f"{files[0].name} is not a regular file"
    assert store.problem(entry, files, "sha256:" + "0" * 64) is not None


def test_a_damaged_entry_is_placed_again_and_other_entries_are_left_alone(
    weights: tuple[Path, str], tmp_path: Path
) -> None:
    folder, digest = weights
    files = store.folder_files(folder)
    root = tmp_path / "store"
    other = root / ("cd" * 32)
    other.mkdir(parents=True)
    (other / "kept").write_bytes(b"another version's weights")
    entry = store.entry(root, digest)
    store.place(entry, [(folder / f.name, f) for f in files], QUIET)
    flip_a_byte(entry / files[0].name)
    store.place(entry, [(folder / f.name, f) for f in files], QUIET)
    assert store.problem(entry, files, digest) is None
    assert (other / "kept").read_bytes() == b"another version's weights"
    assert sorted(p.name for p in root.iterdir()) == sorted([other.name, entry.name])


def test_a_placement_that_fails_leaves_the_entry_as_it_was(
    weights: tuple[Path, str], tmp_path: Path
) -> None:
    folder, digest = weights
    files = store.folder_files(folder)
    entry = tmp_path / entry_name(digest)
    store.place(entry, [(folder / f.name, f) for f in files], QUIET)
    flip_a_byte(folder / files[0].name)  # the source changed under the copy
    with pytest.raises(SglxError, match="does not match its sha256"):
        store.place(entry, [(folder / f.name, f) for f in files], QUIET)
    assert store.problem(entry, files, digest) is None
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


# --- bundle.json: weights named by digest only ------------------------------------------------


def _manifest_json(weights: dict[str, object], parent: bool) -> bytes:
    from sglx.bundle.manifest import (
        BundleManifest,
        FileEntry,
        ImageRecord,
        LayerEntry,
        ParentRecord,
        Slot,
        dump,
    )

    layer = LayerEntry(diff_id=DIGEST, chain_id=DIGEST, size=1, carried=not parent)
    manifest = BundleManifest(
        arch="cpu",
        created="now",
        sglx_version="test",
        image=ImageRecord(
            ref="x:1",
            id="sha256:" + "1" * 64,
            archive="image/image.tar",
            size=2048,
            chunk_size=4096,
            chunks=("image/image.tar.000",),
            layers=(layer,),
            parent=ParentRecord(
                digest="sha256:" + "2" * 64,
                bundle="v1",
                image_ref="x:0",
                image_id="sha256:" + "3" * 64,
            )
            if parent
            else None,
        ),
        wheelhouse=Slot(included=False),
        ansible=Slot(included=False),
        files=(
            FileEntry(path="image/image.tar.000", size=2048, sha256="0" * 64, kind="image-chunk"),
        ),
    )
    data = json.loads(dump(manifest))
    data["weights"] = weights
    return json.dumps(data).encode()


NAMED = {
    "name": "demo",
    "path": None,
    "digest": DIGEST,
    "size": 3,
    "carried": False,
    "files": [
        {"name": "model.safetensors", "size": 2, "sha256": "0" * 64},
        {"name": "sglx-weights.json", "size": 1, "sha256": "1" * 64},
    ],
}


def test_a_delta_names_its_parents_weights_without_carrying_them() -> None:
    from sglx.bundle.manifest import dump, parse, weights_files

    manifest = parse(_manifest_json(NAMED, parent=True), "bundle.json")
    assert manifest.weights is not None and not manifest.weights.carried
    assert [f.name for f in weights_files(manifest)] == ["model.safetensors", "sglx-weights.json"]
    assert json.loads(dump(manifest))["weights"]["carried"] is False


@pytest.mark.parametrize(
    ("change", "parent", "words"),
    [
        ({}, False, "only a delta (image.parent) takes its weights from the store"),
        ({"files": None}, True, "weights not carried must list their files"),
        ({"size": 4}, True, "weights.files add up to another size"),
        ({"path": "weights/demo"}, True, "weights not carried have no path"),
        ({"files": NAMED["files"][:1], "size": 2}, True, "no sglx-weights.json"),
        ({"digest": "sha256:12"}, True, "weights.digest: String should match pattern"),
    ],
)
def test_a_weights_record_that_contradicts_itself_is_refused(
    change: dict[str, object], parent: bool, words: str
) -> None:
    from sglx.bundle.manifest import parse

    with pytest.raises(SglxError, match="not a valid sglx bundle manifest") as caught:
        parse(_manifest_json({**NAMED, **change}, parent=parent), "bundle.json")
    assert words in caught.value.message


# --- the run spec: the entry mounted read-only at the model folder ---------------------------


def test_the_run_spec_mounts_the_store_entry_read_only() -> None:
    profile = load_profile("gfx942")
    spec = run_spec(profile)
    assert spec.models_root == profile.weights.store == "/var/lib/sglx/models"
    words = docker_run_words(spec, Site("i", "x", weights_digest=DIGEST))
    mount = f"/var/lib/sglx/models/{'ab' * 32}:/models/model:ro"
    assert words[words.index(mount) - 1] == "-v"
    moved = docker_run_words(spec, Site("i", "x", weights_digest=DIGEST, models_root="/srv/m"))
    assert f"/srv/m/{'ab' * 32}:/models/model:ro" in moved
    by_hand = docker_run_words(spec, Site("i", "x", model_dir="/w", weights_digest=DIGEST))
    assert "/w:/models/model:ro" in by_hand and mount not in by_hand
    assert not [w for w in docker_run_words(spec, Site("i", "x")) if "/models/model" in w]
    # a run.json written before the store: no root, no mount
    old = RunSpec.from_json({**spec.to_json(), "models_root": None}, "run.json")
    old_words = docker_run_words(old, Site("i", "x", weights_digest=DIGEST))
    assert not [w for w in old_words if w.endswith(":/models/model:ro")]


def test_install_sh_lists_the_entry_and_names_the_parent_of_weights_it_lacks() -> None:
    from sglx.bundle import install_sh
    from sglx.bundle.manifest import ImageRecord, WeightsFile, parse

    delta = parse(_manifest_json(NAMED, parent=True), "bundle.json")
    assert delta.weights is not None
    files = tuple(WeightsFile(**f) for f in NAMED["files"])  # type: ignore[arg-type]
    script = install_sh.render(
        load_profile("cpu"), version="t", image_ref="x:1", image_id=delta.image.id,
        chunks=delta.image.chunks, weights=delta.weights, weights_files=files, image=delta.image,
    )  # fmt: skip
    assert f"{'0' * 64} 2 model.safetensors\n{'1' * 64} 1 sglx-weights.json" in script
    assert "weights_from=v1" in script and "install the bundle" in script
    assert f"@SGLX_MODELS_ROOT@/{'ab' * 32}:/models/model:ro" in script
    full = ImageRecord(**{**delta.image.model_dump(), "parent": None, "layers": None})
    with pytest.raises(SglxError, match="no parent bundle"):
        install_sh.render(
            load_profile("cpu"), version="t", image_ref="x:1", image_id=delta.image.id,
            chunks=delta.image.chunks, weights=delta.weights, weights_files=files, image=full,
        )  # fmt: skip


def test_an_image_built_above_the_threshold_gets_the_folder_without_its_shards(
    weights: tuple[Path, str],
) -> None:
    """The weights payload of such a build (sglx.image.payload): the manifest, not the shards,
    under a tag of its own, so a baked build of the same weights never reuses it."""
    import tarfile

    from docker.errors import ImageNotFound

    from sglx.image import payload

    folder, digest = weights
    (folder / "config.json").write_text("{}")
    seen: dict[str, list[str]] = {}

    class Api:
        def import_image_from_file(self, path: str, repository: str, tag: str) -> None:
            with tarfile.open(path) as tar:
                seen[f"{repository}:{tag}"] = sorted(tar.getnames())

    class Images:
        def get(self, tag: str) -> None:
            raise ImageNotFound(tag)

    class Client:
        api, images = Api(), Images()

    done = payload.weights_image(Client(), folder, digest, QUIET, reuse=True, outside=True)
    assert done.tag == payload.weights_tag(digest, outside=True) != payload.weights_tag(digest)
    assert done.tag.endswith("-outside")
    assert seen[done.tag] == [
        "models", "models/model", "models/model/config.json", "models/model/sglx-weights.json"
    ]  # fmt: skip
    baked = payload.weights_image(Client(), folder, digest, QUIET, reuse=True)
    assert len([n for n in seen[baked.tag] if n.endswith(".safetensors")]) == 2

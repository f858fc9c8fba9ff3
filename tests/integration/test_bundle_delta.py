"""Delta bundles on the real engine (Docker 20.10): `create --since` carries only the layers the
previous bundle's image lacks, `install` and install.sh load it where the parent's layers are
and refuse it, before anything loads, where they are not; `verify --with` checks the chain.

Four tiny images, seconds each: a base made with `docker import` (3 MB), `plugin-1` (the base
and a 100 kB layer), `plugin-2` (plugin-1 and a 50 kB layer) and `other` (the base and another
100 kB layer: a sibling of plugin-1, the wrong parent for plugin-2's delta). The engine is shared
with the rest of the suite: every image carries the run's id, and each test first leaves in it
exactly the images of this module it needs.
"""

from __future__ import annotations

import hashlib
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

CliRunner = Callable[..., tuple[int, str, str]]
JsonRunner = Callable[..., tuple[int, dict[str, Any]]]
ORDER = ("plugin-2", "other", "plugin-1", "base")  # children before their parent


@dataclass(frozen=True)
class Chain:
    folder: Path
    tags: dict[str, str]
    ids: dict[str, str]
    bundles: dict[str, Path]  # base (full), plugin-1 over base, plugin-2 over plugin-1, other


def create(*args: str) -> None:
    from sglx.cli import main

    assert main(["bundle", "create", "--arch", "cpu", "--no-scan", "-q", *args]) == 0


@pytest.fixture(scope="module")
def chain(docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    tags = {name: f"sglx-test/bundle-delta-{name}:{run_id}" for name in ORDER}
    ids = {"base": import_tiny_image(docker, tags["base"])}
    ids["plugin-1"] = child_image(docker, tags["base"], tags["plugin-1"], "plugin-1", 100_000)
    ids["plugin-2"] = child_image(docker, tags["plugin-1"], tags["plugin-2"], "plugin-2", 50_000)
    ids["other"] = child_image(docker, tags["base"], tags["other"], "other", 100_000)
    folder = tmp_path_factory.mktemp("delta")
    bundles = {name: folder / name for name in ORDER}
    try:
        create("--image", tags["base"], "--out", str(bundles["base"]))
        for name, since in (("plugin-1", "base"), ("plugin-2", "plugin-1"), ("other", "base")):
            create(
                "--image", tags[name], "--out", str(bundles[name]), "--since", str(bundles[since])
            )
        yield Chain(folder, tags, ids, bundles)
    finally:
        for name in ORDER:
            remove_images(docker, ids.get(name, tags[name]))
        shutil.rmtree(folder, ignore_errors=True)


def engine_holds(docker: Any, chain: Chain, tmp: Path, *keep: str) -> None:
    """Leave exactly the images `keep` of this module in the engine: the others removed
    (children first), a missing one installed from its bundle (its parents first)."""
    from sglx.bundle.install import InstallOptions, install_bundle
    from sglx.progress import Progress

    for name in ORDER:
        if name not in keep:
            remove_images(docker, chain.ids[name])
    # The module's bundles are made with --no-scan (create's own scan is test_bundle_tiny's).
    options = InstallOptions(state=tmp / "engine-state", jit_root=tmp / "jit", no_scan=True)
    for name in reversed(ORDER):
        if name in keep and not has_image(docker, chain.ids[name]):
            done = install_bundle(chain.bundles[name], options, Progress("test", quiet=True))
            assert done.data["installed"], done
    for name in ORDER:
        assert has_image(docker, chain.ids[name]) == (name in keep), name


def install_sh(bundle: Path, state: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["sh", str(bundle / "install.sh"), "--no-scan", "--state", str(state)],
        capture_output=True,
        text=True,
    )


def test_a_delta_carries_only_the_new_layers_and_names_its_parent(
    chain: Chain, sglx: CliRunner, sglx_json: JsonRunner
) -> None:
    full = json.loads((chain.bundles["base"] / "bundle.json").read_text())
    delta = json.loads((chain.bundles["plugin-1"] / "bundle.json").read_text())
    # The delta's archive: the 100 kB layer, the config and manifest (the base is 3 MB).
    assert delta["image"]["size"] < full["image"]["size"] / 20
    assert [layer["carried"] for layer in full["image"]["layers"]] == [True]
    assert full["image"]["parent"] is None
    base_digest = hashlib.sha256((chain.bundles["base"] / "bundle.json").read_bytes()).hexdigest()
    assert delta["image"]["parent"] == {
        "digest": f"sha256:{base_digest}",
        "bundle": "base",
        "image_ref": chain.tags["base"],
        "image_id": chain.ids["base"],
    }
    layers = delta["image"]["layers"]
    assert [layer["carried"] for layer in layers] == [False, True]
    assert layers[0]["chain_id"] == full["image"]["layers"][0]["chain_id"]
    # Verify alone (the scan too: a delta's is the report made at create) says what it needs.
    # This delta was made with --no-scan: it carries no report, and that is "not scanned", a
    # finding, never "ok" (issue 37 item 4), unless the operator accepts it with --no-scan.
    code, envelope = sglx_json("bundle", "verify", str(chain.bundles["plugin-1"]), "-q")
    assert code == 1, envelope
    assert [f["code"] for f in envelope["findings"]] == ["bundle_not_scanned"], envelope
    assert envelope["data"]["parent"]["bundle"] == "base"
    assert envelope["data"]["needs"] == [layers[0]["chain_id"]]
    assert envelope["data"]["scan"].startswith("not scanned (a delta")
    code, out, _ = sglx("bundle", "verify", str(chain.bundles["plugin-1"]), "--no-scan", "-q")
    assert code == 0, out
    assert "it is a delta over the bundle base" in out and "install that bundle first" in out
    code, _, err = sglx("scan", "--bundle", str(chain.bundles["plugin-1"]), "-q")
    assert code == 2 and "cannot be scanned alone" in err
    code, envelope = sglx_json("bundle", "inspect", str(chain.bundles["plugin-2"] / "bundle.json"))
    assert code == 0
    assert [x["carried"] for x in envelope["data"]["layers"]] == [False, False, True]
    assert envelope["data"]["parent"]["bundle"] == "plugin-1"
    assert envelope["data"]["carried_bytes"] == envelope["data"]["layers"][2]["size"]
    code, out, _ = sglx("bundle", "inspect", str(chain.bundles["plugin-2"]))
    assert code == 0 and "from plugin-1" in out and "takes 2" in out


def test_over_its_parent_a_chain_of_deltas_installs_to_the_same_image_ids(
    chain: Chain, docker: Any, tmp_path: Path, sglx_json: JsonRunner
) -> None:
    engine_holds(docker, chain, tmp_path, "base")
    state = str(tmp_path / "state")
    for name in ("plugin-1", "plugin-2"):
        code, envelope = sglx_json(
            "bundle", "install", "--no-scan", str(chain.bundles[name]), "--state", state
        )
        assert code == 0, envelope
        assert envelope["data"]["steps"]["image"]["status"] == "done"
        # The config the engine had is the one loaded: the same id as a full install's.
        assert docker.images.get(chain.tags[name]).id == chain.ids[name]
    # install.sh loads a delta over its parent just the same.
    engine_holds(docker, chain, tmp_path, "base", "plugin-1")
    done = install_sh(chain.bundles["plugin-2"], tmp_path / "sh-state")
    assert done.returncode == 0, done.stderr
    assert docker.images.get(chain.tags["plugin-2"]).id == chain.ids["plugin-2"]


def test_without_its_parent_install_and_install_sh_refuse_before_loading(
    chain: Chain, docker: Any, tmp_path: Path, sglx: CliRunner
) -> None:
    """First an engine with none of the images; then one with the base and `other`, a sibling
    of plugin-1: plugin-2's delta is over plugin-1, and `other` is not it."""
    state = tmp_path / "state"
    for holds, name, parent, lacks in (
        ((), "plugin-1", "base", "1 of the 1"),
        (("base", "other"), "plugin-2", "plugin-1", "1 of the 2"),
    ):
        engine_holds(docker, chain, tmp_path, *holds)
        code, out, err = sglx(
            "bundle", "install", "--no-scan", str(chain.bundles[name]), "--state", str(state)
        )
        assert code == 2, out + err
        assert f"this bundle is a delta over the bundle {parent} (bundle.json sha256:" in err
        assert f"this engine lacks {lacks} layers it takes from it" in err
        assert "nothing was loaded" in err
        assert f"install the bundle {parent} first" in err and "Traceback" not in err
        assert not state.exists()
        done = install_sh(chain.bundles[name], tmp_path / "sh-state")
        assert done.returncode == 2, done.stderr
        assert f"this bundle is a delta over the bundle {parent}" in done.stderr
        assert f"install the bundle {parent} first" in done.stderr
        for image in ORDER:
            assert has_image(docker, chain.ids[image]) == (image in holds), image


def test_verify_with_checks_every_link_of_the_chain(chain: Chain, sglx_json: JsonRunner) -> None:
    b = chain.bundles
    code, envelope = sglx_json(
        "bundle", "verify", str(b["plugin-2"]), "--no-scan", "--with", str(b["plugin-1"]),
        "--with", str(b["base"] / "bundle.json"),
    )  # fmt: skip
    assert (code, envelope["findings"]) == (0, []), envelope
    code, envelope = sglx_json(
        "bundle", "verify", str(b["plugin-2"]), "--no-scan", "--with", str(b["other"])
    )
    assert code == 1
    [finding] = envelope["findings"]
    assert finding["code"] == "bundle_parent"
    assert "is a delta over the bundle plugin-1" in finding["message"]
    assert "no --with bundle is it (given: other (sha256:" in finding["message"]


def rewrite_manifest(bundle: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    """Edit bundle.json's layer list as a faulty `create` would write it: chain ids that agree
    with the diff ids, SHA256SUMS rendered anew, so only the layer check can find it."""
    from sglx.bundle.layers import chain_ids
    from sglx.bundle.manifest import parse, render_sums, sha256_bytes

    data = json.loads((bundle / "bundle.json").read_text())
    layers = data["image"]["layers"]
    edit(layers)
    for layer, chain_id in zip(layers, chain_ids([x["diff_id"] for x in layers]), strict=True):
        layer["chain_id"] = chain_id
    raw = (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()
    (bundle / "bundle.json").write_bytes(raw)
    sums = render_sums(parse(raw, "bundle.json"), sha256_bytes(raw), None)
    (bundle / "SHA256SUMS").write_text(sums)


def omit_top(layers: list[dict[str, Any]]) -> None:
    del layers[-1]


def add_one(layers: list[dict[str, Any]]) -> None:
    layers.append({"diff_id": "sha256:" + "5" * 64, "chain_id": "", "size": 1, "carried": True})


def carry_a_parent_layer(layers: list[dict[str, Any]]) -> None:
    layers[1]["carried"] = True


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (omit_top, "bundle.json omits layer 2"),
        (add_one, "bundle.json lists a layer the image does not have (sha256:5555"),
        (carry_a_parent_layer, "is carried by bundle.json, but the archive lacks"),
    ],
)
def test_a_delta_whose_manifest_omits_or_adds_a_layer_is_refused(
    chain: Chain, tmp_path: Path, sglx_json: JsonRunner, docker: Any, edit: Any, words: str
) -> None:
    bundle = tmp_path / "plugin-2"
    shutil.copytree(chain.bundles["plugin-2"], bundle)
    rewrite_manifest(bundle, edit)
    code, envelope = sglx_json("bundle", "verify", str(bundle), "--no-scan")
    assert code == 1, envelope
    assert [f["code"] for f in envelope["findings"]][:1] == ["bundle_layers"]
    assert words in envelope["findings"][0]["message"]
    engine_holds(docker, chain, tmp_path, "base", "plugin-1")
    code, envelope = sglx_json(
        "bundle", "install", "--no-scan", str(bundle), "--state", str(tmp_path / "s")
    )
    assert code == 1 and envelope["data"]["installed"] is False
    assert not has_image(docker, chain.ids["plugin-2"])


def test_create_refuses_a_previous_bundle_that_cannot_be_a_parent(
    chain: Chain, docker: Any, run_id: str, tmp_path: Path, sglx: CliRunner
) -> None:
    engine_holds(docker, chain, tmp_path, "base", "plugin-1")
    unrelated = f"sglx-test/bundle-delta-unrelated:{run_id}"
    import_tiny_image(docker, unrelated, blob_bytes=1000)
    try:
        cases = (
            (chain.tags["plugin-1"], chain.bundles["plugin-1"], "already carries image"),
            (unrelated, chain.bundles["base"], "shares no layer with the image of --since"),
            (chain.tags["plugin-1"], tmp_path / "nowhere", "no bundle there (no bundle.json)"),
        )
        for image, since, words in cases:
            out = tmp_path / "out"
            code, _, err = sglx(
                "bundle", "create", "--arch", "cpu", "--image", image, "--out", str(out),
                "--since", str(since), "--no-scan", "-q",
            )  # fmt: skip
            assert code == 2 and words in err and "Traceback" not in err, err
            assert not out.exists()
    finally:
        remove_images(docker, unrelated)

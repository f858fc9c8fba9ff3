"""The site registry (issue 26, item 4) on this machine: Debian's docker-registry set up by the
role sglx_registry (entry point main) on 127.0.0.1, seeded by its entry point seed with real
skopeo from tiny bundles, pulled from by digest by bundle_install's pull mode, and collected by
its entry point gc. Every play runs on localhost (local connection).

Two images, seconds each: a base made with `docker import` (1 MB) and `plugin`, the base and a
100 kB layer; their bundles are the base (full) and plugin as a delta over it (`--since`), in
chunks of 256 KiB. Seeding the delta before its parent, or into a registry whose storage
cannot keep the reserve, is refused with nothing pushed; the base then pushes its one layer,
and the delta only its own.

What sharing one engine hides: a host here is this machine, whose engine also built the images
and runs the rest of the suite. A pull downloads only the layers the engine lacks (and, for a
layer it holds, knows the registry digest of), so the images are removed from the engine
before each pull; without that, `docker pull` would succeed with no byte from the registry and
a tampered blob would go unnoticed. Two inventory hosts that pull at once are one engine: the
failure cases run on two such hosts, a fleet's parallel staging on one machine, but the bytes
each would fetch over the network are fetched once.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import child_image, import_tiny_image
from helpers.engine_fixtures import has_image, remove_images
from helpers.site_registry import SiteRegistry, playbook, role_play, site_registry
from helpers.test_hosts import recap

SEEDED = re.compile(
    r"seeded (\S+)@(sha256:[0-9a-f]{64}) \(\S+\): pushed (\d+) of (\d+) layers, (\d+) layer bytes"
)


@dataclass(frozen=True)
class Chain:
    tags: dict[str, str]
    ids: dict[str, str]
    bundles: dict[str, Path]
    layers: dict[str, list[dict[str, Any]]]  # bundle.json's image.layers


def engine_without(docker: Any, chain: Chain) -> None:
    """The engine holds neither image (children first), nor a reference pulled by digest."""
    for name in ("plugin", "base"):
        remove_images(docker, chain.ids[name])
        assert not has_image(docker, chain.ids[name])


@pytest.fixture(scope="module")
def chain(docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Chain]:
    from sglx.cli import main

    tags = {name: f"sglx-test/registry-{name}:{run_id}" for name in ("base", "plugin")}
    folder = tmp_path_factory.mktemp("registry-bundles")
    bundles = {name: folder / name for name in tags}
    ids: dict[str, str] = {}
    try:
        ids["base"] = import_tiny_image(docker, tags["base"], blob_bytes=1_000_000)
        ids["plugin"] = child_image(docker, tags["base"], tags["plugin"], "plugin", 100_000)
        for name, since in (("base", ()), ("plugin", ("--since", str(bundles["base"])))):
            args = ["--image", tags[name], "--out", str(bundles[name]), "--chunk-size", "256KiB"]
            assert (
                main(["bundle", "create", "--arch", "cpu", "--no-scan", "-q", *args, *since]) == 0
            )
        layers = {
            name: json.loads((bundles[name] / "bundle.json").read_text())["image"]["layers"]
            for name in tags
        }
        made = Chain(tags, ids, bundles, layers)
        engine_without(docker, made)
        yield made
    finally:
        for name in ("plugin", "base"):
            remove_images(docker, ids.get(name, tags[name]))
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SiteRegistry]:
    with site_registry(tmp_path_factory.mktemp("registry-work")) as made:
        yield made


def seed(registry: SiteRegistry, bundle: Path, *args: str, **extra: Any) -> Any:
    variables = {
        **registry.vars,
        "sglx_registry_bundle_src": str(bundle),
        "sglx_registry_no_scan": True,  # the bundles are made with --no-scan
        **extra,
    }
    return playbook(registry.work, [role_play("seed")], variables, *args)


def seeded(done: Any) -> tuple[str, str, int, int, int]:
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    [found] = SEEDED.findall(done.stdout)
    name, digest, pushed, layers, size = found
    return name, digest, int(pushed), int(layers), int(size)


def failure(done: Any) -> str:
    assert done.returncode == 2, done.stdout[-5000:] + done.stderr[-2000:]
    return " ".join(done.stdout.split())


def tags(registry: SiteRegistry) -> list[str]:
    status, body, _ = registry.get("/v2/sglx/cpu/tags/list")
    return sorted(json.loads(body).get("tags") or []) if status == 200 else []


def tag_of(image_id: str) -> str:
    return "image-" + image_id.split(":")[1]


@pytest.fixture
def digests(chain: Chain, registry: SiteRegistry) -> dict[str, str]:
    """The manifest digest of each image in the registry (seeded by the first test, or here
    when it did not run)."""
    found = {}
    for name in ("base", "plugin"):
        path = f"/v2/sglx/cpu/manifests/{tag_of(chain.ids[name])}"
        status, _, headers = registry.get(path, "HEAD")
        if status != 200:
            seeded(seed(registry, chain.bundles[name]))
            status, _, headers = registry.get(path, "HEAD")
        found[name] = headers["Docker-Content-Digest"]
    return found


def test_seeding_pushes_only_what_the_registry_lacks_and_refuses_what_it_cannot_hold(
    chain: Chain, registry: SiteRegistry
) -> None:
    digests: dict[str, str] = {}
    out = failure(seed(registry, chain.bundles["plugin"]))
    assert "is neither in the bundle's image archive nor in the registry" in out
    assert "a delta over the bundle base" in out and "seed that bundle first" in out
    out = failure(seed(registry, chain.bundles["base"], sglx_registry_reserve_bytes=10**18))
    assert f"the registry's storage {registry.storage} on localhost has" in out
    assert f"take {chain.layers['base'][0]['size']} (" in out and "nothing was pushed" in out
    assert (tags(registry), registry.blobs()) == ([], set())

    name, digests["base"], pushed, count, size = seeded(seed(registry, chain.bundles["base"]))
    assert (name, pushed, count) == (f"{registry.address}/sglx/cpu", 1, 1)
    assert size == chain.layers["base"][0]["size"]
    base_blobs = registry.blobs()
    assert base_blobs == {chain.layers["base"][0]["diff_id"], chain.ids["base"], digests["base"]}

    # The delta: its 100 kB layer, its config and manifest; the base's layer is not sent.
    _, digests["plugin"], pushed, count, size = seeded(seed(registry, chain.bundles["plugin"]))
    top = chain.layers["plugin"][1]
    assert (pushed, count, size) == (1, 2, top["size"])
    assert registry.blobs() - base_blobs == {top["diff_id"], chain.ids["plugin"], digests["plugin"]}
    assert tags(registry) == sorted(tag_of(chain.ids[n]) for n in ("base", "plugin"))

    # Again, with main: nothing changes, nothing is pushed.
    plays = [role_play("main"), role_play("seed")]
    variables = {
        **registry.vars,
        "sglx_registry_bundle_src": str(chain.bundles["plugin"]),
        "sglx_registry_no_scan": True,
    }
    done = playbook(registry.work, plays, variables)
    assert seeded(done)[1:4] == (digests["plugin"], 0, 2)
    assert recap(done.stdout)["localhost"]["changed"] == 0, done.stdout[-3000:]


# bundle_install in pull mode, its variables per inventory host (host_vars).
PULL = role_play("main", hosts="all", role="bundle_install")


def host_vars(
    registry: SiteRegistry, chain: Chain, work: Path, bundle: str, digest: str
) -> dict[str, Any]:
    return {
        "bundle_install_path": str(work / "host" / bundle),
        "bundle_install_src": str(chain.bundles[bundle]),
        "bundle_install_state_dir": str(work / "state"),
        "bundle_install_no_scan": True,  # the bundles are made with --no-scan
        "bundle_install_docker": shutil.which("docker"),
        "bundle_install_registry": f"{registry.address}/sglx/cpu",
        "bundle_install_registry_digest": digest,
    }


def test_a_host_pulls_the_bundles_image_by_digest_and_records_the_install(
    chain: Chain, registry: SiteRegistry, digests: dict[str, str], docker: Any, tmp_path: Path
) -> None:
    engine_without(docker, chain)
    hosts = {"localhost": host_vars(registry, chain, tmp_path, "plugin", digests["plugin"])}
    done = playbook(registry.work, [PULL], {}, hosts=hosts)
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert docker.images.get(chain.tags["plugin"]).id == chain.ids["plugin"]
    # Only the manifest files came from the control node; the image from the registry.
    assert sorted(p.name for p in (tmp_path / "host/plugin").iterdir()) == [
        "SHA256SUMS", "bundle.json"]  # fmt: skip
    [record] = (tmp_path / "state").glob("sha256-*.json")
    document = json.loads(record.read_text())
    assert (document["image_id"], document["door"]) == (chain.ids["plugin"], "bundle_install")
    assert document["bundle_path"] == str(tmp_path / "host/plugin") and document["installed_at"]
    assert f"pulled {registry.address}/sglx/cpu@{digests['plugin']}" in record.with_suffix(
        ".log").read_text()  # fmt: skip
    again = playbook(registry.work, [PULL], {}, hosts=hosts)
    assert recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-3000:]


def test_a_registry_serving_other_bytes_or_another_image_fails_the_hosts_staging(
    chain: Chain, registry: SiteRegistry, digests: dict[str, str], docker: Any, tmp_path: Path
) -> None:
    """h1 pulls the delta's image, whose layer blob in the registry's storage was altered;
    h2 is given the base's manifest digest for the delta's bundle."""
    engine_without(docker, chain)
    top = chain.layers["plugin"][1]["diff_id"]
    blob = registry.blob_file(top)
    kept = blob.read_bytes()
    altered = bytearray(kept)
    altered[5000] ^= 0xFF
    blob.write_bytes(bytes(altered))
    try:
        hosts = {
            "h1": host_vars(registry, chain, tmp_path / "h1", "plugin", digests["plugin"]),
            "h2": host_vars(registry, chain, tmp_path / "h2", "plugin", digests["base"]),
        }
        done = playbook(registry.work, [PULL], {}, hosts=hosts)
    finally:
        blob.write_bytes(kept)
    out = failure(done)
    assert f"h1: docker pull {registry.address}/sglx/cpu@{digests['plugin']} failed" in out
    assert f"verification failed for digest {top}" in out
    assert f"h2: the image pulled from {registry.address}/sglx/cpu@{digests['base']} is " in out
    assert f"{chain.ids['base']}, not bundle.json's image {chain.ids['plugin']}" in out
    assert "nothing was tagged or recorded" in out
    assert not list(tmp_path.glob("*/state/sha256-*.json"))
    assert not has_image(docker, chain.ids["plugin"]) and not has_image(docker, chain.ids["base"])


def test_gc_deletes_the_versions_no_host_holds_with_the_registry_read_only(
    chain: Chain, registry: SiteRegistry, digests: dict[str, str], docker: Any
) -> None:
    """The engine holds neither image; gc_keep names the delta's: the base's manifest and
    config go, its layer stays (the delta's manifest names it)."""
    engine_without(docker, chain)
    before = registry.blobs()
    plays = [role_play("held"), role_play("gc")]
    variables = {**registry.vars, "sglx_registry_fleet": "localhost",
                 "sglx_registry_gc_keep": [chain.ids["plugin"]]}  # fmt: skip
    done = playbook(registry.work, plays, variables, "--check")
    assert done.returncode == 0, done.stdout[-5000:]
    assert f"would delete the manifests of 1 versions no host holds ({chain.ids['base']})" in (
        " ".join(done.stdout.split()))  # fmt: skip
    assert registry.blobs() == before
    done = playbook(registry.work, plays, variables)
    assert done.returncode == 0, done.stdout[-5000:]
    assert "garbage-collect removed 2 blobs" in " ".join(done.stdout.split())
    assert tags(registry) == [tag_of(chain.ids["plugin"])]
    assert before - registry.blobs() == {chain.ids["base"], digests["base"]}
    assert registry.get("/v2/")[0] == 200
    assert "readonly:\n      enabled: false" in Path("/etc/docker/registry/config.yml").read_text()
    assert registry.get(f"/v2/sglx/cpu/manifests/{digests['plugin']}", "HEAD")[0] == 200
    again = playbook(registry.work, plays, variables)
    assert recap(again.stdout)["localhost"]["changed"] == 0, again.stdout[-3000:]

"""bundle_install and delta bundles (issue 26): the role checks a delta's `image.layers` and
`image.parent` as sglx does (types, sha256 forms, chain ids, a parent needs the layers and a
layer left out needs a parent), on the control node and on the host; and a delta on a host
whose engine lacks its parent's layers fails the host's install with install.sh's refusal
(exit 2), before anything is loaded and with no install record written.

Real ansible-playbook over a local inventory, no engine: the image checks run once for every
case (one inventory host per case), and install.sh meets a fake `docker` that holds no image.
The real engine's side of the refusal is tests/integration/test_bundle_delta.py's; the e2e test
rolls a delta out over its parent.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from helpers.ansible_play import ansible_playbook
from helpers.bundles import hand_bundle

from sglx.bundle import install_sh
from sglx.bundle.layers import chain_ids
from sglx.bundle.manifest import dump, parse, render_sums, sha256_bytes
from sglx_core.profile import load_profile

DIFFS = ["sha256:" + c * 64 for c in "abc"]
PARENT = {
    "digest": "sha256:" + "d" * 64,
    "bundle": "sglx-cpu-1",
    "image_ref": "sglx/cpu:1",
    "image_id": "sha256:" + "1" * 64,
}


def image_record(parent: bool = True) -> dict[str, Any]:
    """A delta's image record (its lower two layers from the parent), or a full bundle's."""
    layers = [
        {"diff_id": diff, "chain_id": chain, "size": 1000 * (i + 1),
         "carried": i == 2 or not parent}
        for i, (diff, chain) in enumerate(zip(DIFFS, chain_ids(DIFFS), strict=True))
    ]  # fmt: skip
    return {"id": "sha256:" + "0" * 64, "layers": layers, "parent": PARENT if parent else None}


def edited(change: Any, record: dict[str, Any] | None = None) -> dict[str, Any]:
    record = copy.deepcopy(image_record() if record is None else record)
    change(record)
    return record


# `create --exclude-base`: the lower two layers left to the base, the third carried.
BASE = {"ref": "rocm/base:1", "image_id": "sha256:" + "e" * 64, "layers": 2, "obtain": "load it"}
NO_BASE = edited(lambda r: r.update(parent=None, base=BASE), image_record())


def no_base(change: Any) -> dict[str, Any]:
    return edited(change, NO_BASE)


def run(
    work: Path, play: list[dict[str, Any]], hosts: dict[str, Any], *extra: str, path: str = ""
) -> str:
    """ansible-playbook of `play` over local `hosts` (`path` first on PATH): "exit N" and its
    output, one line per task result."""
    done = ansible_playbook(work, play, hosts, *extra, path=path)
    return f"exit {done.returncode}\n{done.stdout}{done.stderr}"


def failed(out: str) -> dict[str, str]:
    """{host: message} of every host a task failed."""
    found = {}
    for line in out.splitlines():
        if line.startswith("fatal: ["):
            host = line[len("fatal: [") :].split("]", 1)[0]
            found[host] = " ".join(str(json.loads(line.split(" => ", 1)[1])["msg"]).split())
    return found


ACCEPTED = {
    "delta": image_record(),
    "full": image_record(parent=False),
    "no-layers": {"id": "sha256:" + "0" * 64},  # a bundle made before layers were recorded
    "base": NO_BASE,
    "base-and-parent": edited(lambda r: r.update(base=BASE)),
    "base-null": image_record(parent=False) | {"base": None},
    "base-carried": no_base(lambda r: r["layers"][1].update(carried=True)),
}
REFUSED = {
    "chain": (
        edited(lambda r: r["layers"][1].update(chain_id=DIFFS[1])),
        "image.layers.1.chain_id: not the chain id its diff ids make",
    ),
    "order": (
        edited(lambda r: r["layers"].reverse()),
        "image.layers.0.chain_id: not the chain id its diff ids make",
    ),
    "size-text": (edited(lambda r: r["layers"][0].update(size="1000")), "image.layers.0.size:"),
    "size-bool": (edited(lambda r: r["layers"][0].update(size=True)), "image.layers.0.size:"),
    "size-negative": (edited(lambda r: r["layers"][2].update(size=-1)), "image.layers.2.size:"),
    "carried-text": (
        edited(lambda r: r["layers"][0].update(carried="no")),
        "image.layers.0.carried: not true or false",
    ),
    "diff-upper": (
        edited(lambda r: r["layers"][0].update(diff_id=DIFFS[0].upper())),
        "image.layers.0.diff_id: not sha256:<64 hex>",
    ),
    "diff-newline": (
        edited(lambda r: r["layers"][0].update(diff_id=DIFFS[0] + "\n")),
        "image.layers.0.diff_id: not sha256:<64 hex>",
    ),
    "layer-extra-key": (
        edited(lambda r: r["layers"][1].update(note="x")),
        "image.layers.1: not an object of diff_id, chain_id, size, carried",
    ),
    "layers-empty": (edited(lambda r: r.update(layers=[])), "at least one layer"),
    "layers-text": (edited(lambda r: r.update(layers="all")), "image.layers: not a list"),
    "parent-digest": (
        edited(lambda r: r["parent"].update(digest="sha256:" + "d" * 63)),
        "image.parent.digest: not sha256:<64 hex>",
    ),
    "parent-bundle": (
        edited(lambda r: r["parent"].update(bundle="../sglx-cpu-1")),
        "image.parent.bundle: not a folder name",
    ),
    "parent-bundle-newline": (
        edited(lambda r: r["parent"].update(bundle="v1\nhint: ok")),
        "image.parent.bundle: not a folder name",
    ),
    "parent-ref": (
        edited(lambda r: r["parent"].update(image_ref="SGLX/CPU:1")),
        "image.parent.image_ref: not an image reference",
    ),
    "parent-key-missing": (
        edited(lambda r: r["parent"].pop("image_id")),
        "image.parent: not an object of digest, bundle, image_ref, image_id",
    ),
    "parent-itself": (
        edited(lambda r: r["parent"].update(image_id=r["id"])),
        "the parent's image is this bundle's own image",
    ),
    "parent-no-layers": (edited(lambda r: r.pop("layers")), "a delta must list its layers"),
    "left-out-no-parent": (edited(lambda r: r.update(parent=None)), "no image.parent names"),
    "base-above": (
        no_base(lambda r: r["layers"][2].update(carried=False)),
        "a layer above the base is not carried, but no image.parent names",
    ),
    "base-key-missing": (
        no_base(lambda r: r["base"].pop("obtain")),
        "image.base: not an object of ref, image_id, layers, obtain",
    ),
    "base-ref": (
        no_base(lambda r: r["base"].update(ref="rocm/BASE")),
        "image.base.ref: not an image reference",
    ),
    "base-id": (
        no_base(lambda r: r["base"].update(image_id="sha256:e")),
        "image.base.image_id: not sha256:<64 hex>",
    ),
    "base-layers-zero": (
        no_base(lambda r: r["base"].update(layers=0)),
        "image.base.layers: not an integer >= 1",
    ),
    "base-layers-bool": (
        no_base(lambda r: r["base"].update(layers=True)),
        "image.base.layers: not an integer >= 1",
    ),
    "base-layers-over": (
        no_base(lambda r: r["base"].update(layers=4)),
        "image.base.layers: more than the image has",
    ),
    "base-obtain-newline": (
        no_base(lambda r: r["base"].update(obtain="load it\nhint: fine")),
        "image.base.obtain: not one line of text",
    ),
    "base-obtain-long": (
        no_base(lambda r: r["base"].update(obtain="x" * 2001)),
        "image.base.obtain: not one line of text",
    ),
    "base-itself": (
        no_base(lambda r: r["base"].update(image_id=r["id"])),
        "the base's image is this bundle's own image",
    ),
    "base-no-layers": (no_base(lambda r: r.pop("layers")), "without its base must list its layers"),
}


def test_the_image_checks_take_deltas_and_refuse_what_sglx_refuses(tmp_path: Path) -> None:
    """Each case is one host of one run; every refused one is named by its field, and sglx
    itself refuses the same record (so the role is not laxer than the manifest's schema)."""
    cases = {**{n: (r, "") for n, r in ACCEPTED.items()}, **REFUSED}
    hosts = {
        name: {"ansible_connection": "local", "__bundle_install_image_doc": record,
               "__bundle_install_image_where": f"{name}/bundle.json",
               "__bundle_install_image_fix": "re-copy it"}
        for name, (record, _) in cases.items()
    }  # fmt: skip
    play = [{"name": "Check image records", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Check", "ansible.builtin.include_role": {
            "name": "bundle_install", "tasks_from": "image"}},
    ]}]  # fmt: skip
    out = run(tmp_path, play, hosts)
    refused = failed(out)
    assert set(refused) == set(REFUSED), out
    for name, (record, words) in REFUSED.items():
        said = refused[name]
        assert said.startswith(f"{name}/bundle.json is not an sglx bundle manifest (image"), said
        assert words in said and said.endswith("): re-copy it"), (name, said)
        assert not sglx_accepts(record), name
    for record in ACCEPTED.values():
        assert sglx_accepts(record)


def sglx_accepts(image: dict[str, Any]) -> bool:
    """Whether sglx's manifest parser takes a hand bundle with this image record."""
    from sglx_core.errors import SglxError

    document = {
        "format": "sglx-bundle", "format_version": 1, "arch": "cpu", "created": "now",
        "sglx_version": "test",
        "image": {"ref": "sglx/cpu:2", "archive": "image/image.tar", "size": 10,
                  "chunk_size": 1024, "chunks": ["image/image.tar.000"], **image},
        "wheelhouse": {"included": False}, "ansible": {"included": False},
        "files": [{"path": "image/image.tar.000", "size": 10, "sha256": "0" * 64,
                   "kind": "image-chunk"}],
    }  # fmt: skip
    try:
        parse(json.dumps(document).encode(), "bundle.json")
    except SglxError:
        return False
    return True


def delta_bundle(where: Path) -> Path:
    """A hand-made delta (image.layers, image.parent) with the install.sh sglx renders for it."""
    archive = where.parent / "image.tar"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(os.urandom(8192))
    folder = hand_bundle(where, archive, {"install.sh": b"#!/bin/sh\n"}, chunk_size=4096)
    archive.unlink()
    document = json.loads((folder / "bundle.json").read_text())
    document["image"].update(image_record())
    image = parse(json.dumps(document).encode(), "bundle.json").image
    script = install_sh.render(
        load_profile("cpu"), version="test", image_ref=image.ref, image_id=image.id,
        chunks=image.chunks, weights_path=None, image=image,
    ).encode()  # fmt: skip
    (folder / "install.sh").write_bytes(script)
    for entry in document["files"]:
        if entry["path"] == "install.sh":
            entry.update(size=len(script), sha256=hashlib.sha256(script).hexdigest())
    manifest = parse(json.dumps(document).encode(), "bundle.json")
    raw = dump(manifest)
    (folder / "bundle.json").write_bytes(raw)
    (folder / "SHA256SUMS").write_text(render_sums(manifest, sha256_bytes(raw), None))
    return folder


FAKE_DOCKER = """#!/bin/sh
# An engine that holds no image: inspect fails, the image list is empty, anything else fails.
echo "$*" >>"$(dirname "$0")/calls"
case "$1 $2" in
  "image ls") exit 0 ;;
esac
exit 1
"""


def test_a_delta_without_its_parent_fails_the_hosts_install_with_install_shs_refusal(
    tmp_path: Path,
) -> None:
    """The whole role: the control node accepts the delta and copies it; install.sh on the host
    refuses it (exit 2) naming the parent, before `docker load`; no record, no report."""
    src = delta_bundle(tmp_path / "ctl" / "sglx-cpu-2")
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "docker").write_text(FAKE_DOCKER)
    (fake / "docker").chmod(0o755)
    host, state = tmp_path / "host" / "sglx-cpu-2", tmp_path / "host" / "state"
    play = [{"name": "Install a delta", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Install", "ansible.builtin.include_role": {"name": "bundle_install"}},
    ]}]  # fmt: skip
    out = run(
        tmp_path, play, {"h": {"ansible_connection": "local"}},
        "-e", f"bundle_install_src={src}", "-e", f"bundle_install_path={host}",
        "-e", f"bundle_install_state_dir={state}", "-e", f"bundle_install_docker={fake}/docker",
        path=str(fake),
    )  # fmt: skip
    assert out.startswith("exit 2\n"), out
    said = failed(out)["h"]
    assert said.startswith(f"install.sh of {host} failed (exit 2): install.sh: error: "), said
    assert (
        "this bundle is a delta over the bundle sglx-cpu-1 (bundle.json sha256:dddd" in said
        and "this engine lacks 2 layers it takes from it; nothing was loaded" in said
        and "hint: install the bundle sglx-cpu-1 first" in said
    ), said
    assert "all files match" not in said  # the error and hint, not the progress lines
    assert (host / "bundle.json").read_bytes() == (src / "bundle.json").read_bytes()  # copied
    calls = (fake / "calls").read_text()
    assert "image ls -aq --no-trunc" in calls and "load" not in calls, calls
    assert list(state.iterdir()) == []  # no install record, no report, no temporary file

"""The bundle_install role and the weights store (issue 26, part 5): the role runs the bundle's
install.sh with its store root, which places the weights once; it exports their digest for
sglang_service_weights_digest; on the next run it checks the entry again (a recorded install
does not skip that) and refuses a damaged one unless bundle_install_replace_weights.

ansible-playbook over a local host, a hand-made bundle with weights, and a fake `docker` that
holds the image (nothing is loaded): about 14 s for the two runs on 2 cores.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from helpers.ansible_play import ansible_playbook
from helpers.bundles import hand_bundle
from helpers.weights_store import flip_a_byte

from sglx.bundle import install_sh
from sglx.bundle.manifest import WeightsFile, WeightsRecord
from sglx_core.profile import load_profile

DIGEST = "sha256:" + "5e" * 32
WEIGHTS = {"model.safetensors": os.urandom(4096), "sglx-weights.json": b"{}\n"}
SAY = "digest={{ bundle_install_weights_digest }}"
# Holds every image: `image inspect` prints the (last) id asked for, as an engine that has it.
FAKE_DOCKER = (
    '#!/bin/sh\necho "$*" >>"$(dirname "$0")/calls"\n'
    'if [ "$1" = image ]; then for a; do id=$a; done; echo "$id"; fi\nexit 0\n'
)


def weights_bundle(where: Path) -> Path:
    stored = tuple(
        WeightsFile(name=name, size=len(data), sha256=hashlib.sha256(data).hexdigest())
        for name, data in WEIGHTS.items()
    )
    weights = WeightsRecord(
        name="demo", path="weights/demo", digest=DIGEST, size=sum(f.size for f in stored)
    )
    archive = where.parent / "image.tar"
    archive.parent.mkdir(parents=True)
    archive.write_bytes(os.urandom(2048))
    script = install_sh.render(
        load_profile("cpu"), version="test", image_ref="fixture-scan:test",
        image_id="sha256:" + "0" * 64, chunks=("image/image.tar.000",), weights=weights,
        weights_files=stored,
    )  # fmt: skip
    files = {
        "install.sh": script.encode(),
        **{f"weights/demo/{name}": data for name, data in WEIGHTS.items()},
    }
    folder = hand_bundle(where, archive, files, chunk_size=4096, weights=weights)
    archive.unlink()
    return folder


def run(work: Path, *extra: str, path: str) -> tuple[int, str]:
    play = [{"name": "Install", "hosts": "all", "gather_facts": False, "tasks": [
        {"name": "Install", "ansible.builtin.include_role": {"name": "bundle_install"}},
        {"name": "Say", "ansible.builtin.debug": {"msg": SAY}},
    ]}]  # fmt: skip
    done = ansible_playbook(work, play, {"h": {"ansible_connection": "local"}}, *extra, path=path)
    return done.returncode, done.stdout + done.stderr


def test_the_role_places_the_weights_once_and_a_damaged_entry_only_when_asked(
    tmp_path: Path,
) -> None:
    src = weights_bundle(tmp_path / "ctl" / "sglx-cpu-1")
    fake = tmp_path / "fake-bin"
    fake.mkdir()
    (fake / "docker").write_text(FAKE_DOCKER)
    (fake / "docker").chmod(0o755)
    host, models = tmp_path / "host" / "sglx-cpu-1", tmp_path / "host" / "models"
    extra = (
        "-e", f"bundle_install_src={src}", "-e", f"bundle_install_path={host}",
        "-e", f"bundle_install_state_dir={tmp_path / 'host' / 'state'}",
        "-e", f"bundle_install_docker={fake}/docker", "-e", f"bundle_install_models_root={models}",
    )  # fmt: skip
    code, out = run(tmp_path, *extra, path=str(fake))
    assert code == 0, out
    assert f"digest={DIGEST}" in out
    entry = models / DIGEST.removeprefix("sha256:")
    assert {p.name: p.read_bytes() for p in entry.iterdir()} == WEIGHTS
    assert "load" not in (fake / "calls").read_text()  # the fake engine holds the image
    record = json.loads(next((tmp_path / "host" / "state").glob("*.json")).read_text())
    assert record["door"] == "bundle_install"
    flip_a_byte(entry / "model.safetensors")
    # Never replaced unasked (issue 37): the role fails naming the entry, the bytes stay.
    code, out = run(tmp_path, *extra, path=str(fake))
    assert code != 0, out
    assert "install never replaces an entry that holds other bytes" in out, out
    assert (entry / "model.safetensors").read_bytes() != WEIGHTS["model.safetensors"]
    code, out = run(tmp_path, *extra, "-e", "bundle_install_replace_weights=true", path=str(fake))
    assert code == 0, out
    assert (entry / "model.safetensors").read_bytes() == WEIGHTS["model.safetensors"]
    log = next((tmp_path / "host" / "state").glob("*.log")).read_text()
    assert "does not match its sha256: replacing it (--replace-weights)" in log
    assert sorted(p.name for p in models.iterdir()) == [entry.name]

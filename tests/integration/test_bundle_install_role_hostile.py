"""bundle_install's control-node verification (issue 21, items 2 and 17), with real
ansible-playbook on localhost (local connection), as test_bundle_copy_resume runs the copy: a
manifest that lists `../../escaped.txt` with consistent hashes, an unsigned or wrongly signed
bundle where the site has allowed signers, and a FIFO in the bundle are all refused before the
copy, and nothing is written on the host, inside `bundle_install_path` or outside it."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.bundles import hand_bundle

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent


def rollout_copy(
    src: Path, dest: Path, work: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    """The role's preflight and copy (which verifies first), as rollout.yml includes them."""
    playbook = work / "copy.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Copy a bundle", "hosts": "localhost", "connection": "local",
        "gather_facts": False,
        "tasks": [
            {"name": "Preflight", "ansible.builtin.include_role": {
                "name": "bundle_install", "tasks_from": "preflight"}},
            {"name": "Copy", "ansible.builtin.include_role": {
                "name": "bundle_install", "tasks_from": "copy"}},
        ],
    }]))  # fmt: skip
    return subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook),
         "-e", f"bundle_install_src={src}", "-e", f"bundle_install_path={dest}",
         "-e", f"ansible_python_interpreter={sys.executable}", *extra],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip


def small_bundle(where: Path, *, scanned: bool = True) -> Path:
    archive = where.parent / f"{where.name}-image.tar"
    where.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(os.urandom(8192))
    files = {"install.sh": b"#!/bin/sh\n"}
    bundle = hand_bundle(where, archive, files, chunk_size=4096, scanned=scanned)
    archive.unlink()
    return bundle


def reseal(bundle: Path, signature: bytes | None = None) -> None:
    """SHA256SUMS rendered again from bundle.json as it now is (and the signature)."""
    raw = (bundle / "bundle.json").read_bytes()
    files = sorted(json.loads(raw)["files"], key=lambda f: f["path"])
    lines = [f"{f['sha256']}  {f['path']}" for f in files]
    lines.append(f"{hashlib.sha256(raw).hexdigest()}  bundle.json")
    if signature is not None:
        (bundle / "bundle.json.sig").write_bytes(signature)
        lines.append(f"{hashlib.sha256(signature).hexdigest()}  bundle.json.sig")
    (bundle / "SHA256SUMS").write_text("\n".join(lines) + "\n")


def tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def failure(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr
    return " ".join(done.stdout.split())


def test_a_manifest_listing_a_path_outside_is_refused_before_any_copy(tmp_path: Path) -> None:
    """Item 2: with the hashes made consistent, the copy task never runs."""
    src = small_bundle(tmp_path / "ctl" / "a" / "src")
    data = b"outside the bundle\n"
    (tmp_path / "ctl" / "escaped.txt").write_bytes(data)  # src/../../escaped.txt
    manifest = json.loads((src / "bundle.json").read_text())
    manifest["files"].append({"path": "../../escaped.txt", "size": len(data), "kind": "meta",
                              "sha256": hashlib.sha256(data).hexdigest()})  # fmt: skip
    (src / "bundle.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    reseal(src)
    host = tmp_path / "host"
    host.mkdir()
    done = rollout_copy(src, host / "x" / "bundle", tmp_path)
    out = failure(done)
    assert "bundle.json is not an sglx bundle manifest: a file path that is not a plain" in out
    assert '("../../escaped.txt")' in out and "nothing was copied" in out
    assert "TASK [bundle_install : Copy the bundle's files" not in done.stdout
    assert tree(host) == set()


def test_a_fifo_in_the_bundle_is_refused_without_hanging(tmp_path: Path) -> None:
    """Item 11 on the control node: the type is checked before sha256sum opens anything."""
    src = small_bundle(tmp_path / "src")
    chunk = src / "image/image.tar.001"
    chunk.unlink()
    os.mkfifo(chunk)
    done = rollout_copy(src, tmp_path / "host" / "bundle", tmp_path)
    out = failure(done)
    assert "entries that are not regular files or folders: image/image.tar.001" in out
    assert not (tmp_path / "host").exists()


def test_an_unscanned_bundle_is_refused_before_any_copy_unless_the_site_accepts_it(
    tmp_path: Path,
) -> None:
    """Issue 37 item 4 in the rollout: a bundle made with --no-scan carries no scan report; the
    role refuses it on the control node, naming the switch that accepts it, and copies it once
    the site sets bundle_install_no_scan (install.sh on the host checks the same)."""
    src = small_bundle(tmp_path / "src", scanned=False)
    host = tmp_path / "host"
    done = rollout_copy(src, host / "bundle", tmp_path)
    out = failure(done)
    assert (
        "not scanned: the bundle carries no meta/scan.json (bundle.json lists none: made "
        "with --no-scan). Create the bundle again" in out
    )
    assert "set bundle_install_no_scan to accept an unscanned bundle; nothing was copied" in out
    assert not host.exists()
    done = rollout_copy(src, host / "bundle", tmp_path, "-e", "bundle_install_no_scan=true")
    assert done.returncode == 0, done.stdout[-3000:]
    assert tree(host / "bundle") == tree(src)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    where = tmp_path_factory.mktemp("keys")
    found: dict[str, Path] = {}
    for name in ("site", "other"):
        key = where / name
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        found[name] = key
    allowed = where / "allowed_signers"
    public = " ".join((where / "site.pub").read_text().split()[:2])
    allowed.write_text(f"site@sglx {public}\n")
    found["allowed"] = allowed
    return found


def sign(bundle: Path, key: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-Y", "sign", "-f", str(key), "-n", "sglx-bundle",
         str(bundle / "bundle.json")], check=True, capture_output=True,
    )  # fmt: skip
    signature = bundle / "bundle.json.sig"
    reseal(bundle, signature.read_bytes())


def test_with_allowed_signers_only_a_bundle_signed_by_one_of_them_is_copied(
    tmp_path: Path, keys: dict[str, Path]
) -> None:
    """Item 17: an unsigned bundle (the signature deleted and SHA256SUMS re-rendered: the
    downgrade) and one signed by another key fail before the copy; a good one is copied."""
    site = tmp_path / "etc-sglx" / "allowed_signers"  # the host's copy (never this machine's /etc)
    signers = (
        "-e", f"bundle_install_allowed_signers={keys['allowed']}",
        "-e", f"bundle_install_site_signers={site}",
    )  # fmt: skip
    src = small_bundle(tmp_path / "unsigned")
    done = rollout_copy(src, tmp_path / "host1" / "bundle", tmp_path, *signers)
    assert "is not signed (no bundle.json.sig), and bundle_install_allowed_signers is set" in (
        failure(done)
    )
    assert not (tmp_path / "host1").exists()

    src = small_bundle(tmp_path / "other")
    sign(src, keys["other"])
    done = rollout_copy(src, tmp_path / "host2" / "bundle", tmp_path, *signers)
    assert "ssh-keygen" in done.stdout and "nothing was copied" in failure(done)
    assert not (tmp_path / "host2").exists()

    src = small_bundle(tmp_path / "good")
    sign(src, keys["site"])
    done = rollout_copy(src, tmp_path / "host3" / "bundle", tmp_path, *signers)
    assert done.returncode == 0, done.stdout[-3000:]
    assert tree(tmp_path / "host3" / "bundle") == tree(src)
    # sglx bundle verify/install on the host read it, so a signature is required there too.
    assert site.read_text() == keys["allowed"].read_text()


def test_allowed_signers_without_a_source_on_the_control_node_is_refused(
    tmp_path: Path, keys: dict[str, Path]
) -> None:
    done = rollout_copy(
        Path(), tmp_path / "host" / "bundle", tmp_path,
        "-e", f"bundle_install_allowed_signers={keys['allowed']}", "-e", "bundle_install_src=",
    )  # fmt: skip
    assert "so the bundle must be signed by one of its keys" in failure(done)


def test_the_roles_rules_are_sglxs() -> None:
    """The role's copies of sglx's rules (vars/main.yml) stay equal to the Python ones."""
    from sglx import image_reference
    from sglx.bundle import install_sh, layout, manifest
    from sglx_core.profile.loader import NAME_PATTERN

    rules = yaml.safe_load((ANSIBLE / "roles/bundle_install/vars/main.yml").read_text())
    assert rules["_bundle_install_path_pattern"] == f"^{install_sh._pattern(manifest.RelPath)}$"
    assert (
        "".join(rules["_bundle_install_ref_pattern_parts"])
        == f"^{image_reference.REFERENCE.pattern}$"
    )
    assert rules["_bundle_install_arch_pattern"] == NAME_PATTERN.pattern
    assert rules["_bundle_install_max_sums_bytes"] == install_sh.MAX_SUMS_BYTES
    assert rules["_bundle_install_max_manifest_bytes"] == layout.MAX_MANIFEST_BYTES
    assert rules["_bundle_install_scan_report"] == layout.SCAN_REPORT
    assert rules["_bundle_install_ansible_dir"] == layout.ANSIBLE
    assert rules["_bundle_install_max_meta_bytes"] == layout.MAX_META_BYTES
    assert rules["_bundle_install_sign_namespace"] == layout.SIGN_NAMESPACE
    # A delta bundle's image record (tasks/image.yml).
    fields = {**manifest.LayerEntry.model_fields, **manifest.ParentRecord.model_fields}
    for name in ("diff_id", "chain_id", "digest", "image_id"):
        assert rules["_bundle_install_id_pattern"] == fields[name].metadata[0].pattern, name
    assert rules["_bundle_install_layer_fields"] == list(manifest.LayerEntry.model_fields)
    assert rules["_bundle_install_parent_fields"] == list(manifest.ParentRecord.model_fields)
    bundle_name = manifest.ParentRecord.model_fields["bundle"].metadata[0]
    assert rules["_bundle_install_parent_bundle_pattern"] == bundle_name.pattern
    assert bundle_name.max_length == 255  # image.yml's bound
    assert rules["_bundle_install_max_layers"] == layout.MAX_LAYERS

"""The bundle's Ansible slot (`sglx.bundle.ansible_content`): what ansible/ carries (the repo's
playbooks and roles, the arch's rendered variables, the host checks, the control-node lock and,
with --control-wheels, its hash-checked wheels), what it leaves out (caches), what it refuses
(links, non-files, too much), and that verify and install.sh check it like any other file.
Fake checkouts in tmp stand in for the repo where a test needs to break something."""

from __future__ import annotations

import hashlib
import os
import subprocess
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.bundles import hand_bundle
from helpers.image_archives import docker_archive
from helpers.image_archives import tree_layer as layer

import sglx
from sglx.ansible_vars import vars_text
from sglx.bundle import ansible_content, install_sh, layout
from sglx.bundle.ansible_content import AnsibleContent, collect, write
from sglx_core.errors import SglxError
from sglx_core.profile import Profile, load_profile

CliJson = Callable[..., tuple[int, dict[str, Any]]]
REPO = Path(__file__).resolve().parents[3]
FETCH = "pip download --no-deps --require-hashes -r bundles/locks/ansible.txt -d"


@pytest.fixture(scope="module")
def cpu() -> Profile:
    return load_profile("cpu")


def by_path(content: AnsibleContent) -> dict[str, ansible_content.Item]:
    return {item.path: item for item in content.items}


def fake_root(tmp_path: Path, lock: str = "") -> Path:
    """A checkout with a small ansible/, a host-check suite and a control-node lock."""
    root = tmp_path / "checkout"
    files = {
        "ansible/site.yml": "---\n",
        "ansible/ansible.cfg": "[defaults]\n",
        "ansible/roles/r/tasks/main.yml": "---\n",
        "ansible/inventory/example/hosts.yml": "---\n",
        "ansible/inventory/example/group_vars/cpu/sglx_profile.yml": "stale copy\n",
        "hostchecks/conftest.py": "",
        "hostchecks/test_preflight.py": "",
        "hostchecks/pytest.ini": "[pytest]\n",
        "hostchecks/notes.txt": "not part of the suite\n",
        "bundles/locks/ansible.txt": lock or "# no pins\n",
    }
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_the_content_is_the_repo_ansible_tree_the_host_checks_and_the_lock(
    cpu: Profile, tmp_path: Path
) -> None:
    content = collect(cpu)
    items = by_path(content)
    for name in ("ansible.cfg", "site.yml", "rollout.yml", "bundle.yml", "requirements.yml"):
        assert items[f"ansible/{name}"].kind == "ansible"
    assert "ansible/README.md" in items
    assert "ansible/roles/sglx_rollout/templates/summary.j2" in items
    assert "ansible/roles/sglx_rollout/filter_plugins/sglx_rollout.py" in items
    assert "ansible/inventory/example/hosts.yml" in items
    roles = ("accel_host", "container_runtime", "bundle_install", "sglang_service", "sglx_rollout")
    for role in roles:
        assert f"ansible/roles/{role}/tasks/main.yml" in items
        assert f"ansible/roles/{role}/defaults/main.yml" in items
    assert "ansible/roles/sglang_service/library/sglx_health.py" in items
    # The suite as it is in hostchecks now (its *.py and pytest.ini), under host-checks/.
    suite = sorted(
        p.name
        for p in (REPO / "hostchecks").iterdir()
        if p.suffix == ".py" or p.name == "pytest.ini"
    )
    checks = sorted(p.rsplit("/", 1)[1] for p in items if p.startswith("ansible/host-checks/"))
    assert checks == suite
    assert {"conftest.py", "pytest.ini"} <= set(checks)
    lock = items["ansible/control-node.txt"]
    assert lock.kind == "lock"
    assert lock.source == REPO / "bundles/locks/ansible.txt"
    assert not [p for p in items if p.startswith("ansible/wheels/")]
    assert {i.kind for i in content.items} == {"ansible", "lock"}
    # Written through the hashed copy: every entry is what landed on disk.
    entries = write(content, tmp_path / "stage")
    assert [e.path for e in entries] == sorted(items)
    for entry in entries:
        data = (tmp_path / "stage" / entry.path).read_bytes()
        assert (len(data), hashlib.sha256(data).hexdigest()) == (entry.size, entry.sha256)
        source = items[entry.path].source
        if source is not None:
            assert data == source.read_bytes()
    slot = content.slot()
    assert (slot.included, slot.path) == (True, "ansible")
    assert "wheels are not included" in slot.note and "--control-wheels DIR" in slot.note


@pytest.mark.parametrize("arch", ["cpu", "gfx942"])
def test_the_arch_variables_are_rendered_not_copied(arch: str, tmp_path: Path) -> None:
    profile = load_profile(arch)
    path = f"ansible/inventory/example/group_vars/{arch}/sglx_profile.yml"
    item = by_path(collect(profile))[path]
    assert (item.source, item.data) == (None, vars_text(profile).encode())
    # Even when the checkout's copy is stale, the bundle has the rendering.
    root = fake_root(tmp_path)
    stale = root / "ansible/inventory/example/group_vars" / arch / "sglx_profile.yml"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("stale copy\n")
    content = collect(profile, root=root)
    write(content, tmp_path / "stage")
    assert (tmp_path / "stage" / path).read_text() == vars_text(profile)
    # Other arches' files stay what the checkout has (the fake one has a cpu file only).
    cpu_copy = "ansible/inventory/example/group_vars/cpu/sglx_profile.yml"
    assert sorted(p for p in by_path(content) if p.endswith("sglx_profile.yml")) == sorted(
        {path, cpu_copy}
    )


def test_caches_hidden_names_and_empty_folders_are_left_out(cpu: Profile, tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    for path in (
        "ansible/roles/r/library/__pycache__/m.cpython-311.pyc",
        "ansible/roles/r/library/m.pyc",
        "ansible/.ansible/tmp/ansible-local-1/x",
        "ansible/.ansible-lint",
        "hostchecks/__pycache__/conftest.cpython-311.pyc",
        "hostchecks/.pytest_cache/v/x",
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("cache")
    (root / "ansible/collections").mkdir()
    (root / "ansible/roles/r/library/m.py").write_text("")
    paths = sorted(by_path(collect(cpu, root=root)))
    assert paths == [
        "ansible/ansible.cfg",
        "ansible/control-node.txt",
        "ansible/host-checks/conftest.py",
        "ansible/host-checks/pytest.ini",
        "ansible/host-checks/test_preflight.py",
        "ansible/inventory/example/group_vars/cpu/sglx_profile.yml",
        "ansible/inventory/example/hosts.yml",
        "ansible/roles/r/library/m.py",
        "ansible/roles/r/tasks/main.yml",
        "ansible/site.yml",
    ]


@pytest.mark.parametrize(
    "link", ["ansible/roles/r/tasks/extra.yml", "ansible/roles/shared", "hostchecks/probes.py"]
)
def test_a_symlink_is_refused_naming_its_path(cpu: Profile, tmp_path: Path, link: str) -> None:
    root = fake_root(tmp_path)
    (root / link).symlink_to(root / "ansible/site.yml")
    with pytest.raises(SglxError, match="is a symbolic link") as caught:
        collect(cpu, root=root)
    assert caught.value.message.startswith(f"{root / link} is a symbolic link: a bundle carries")
    assert caught.value.path == str(root / link)
    assert "replace the link with the file" in str(caught.value.hint)


def test_a_fifo_and_a_name_a_bundle_cannot_carry_are_refused(cpu: Profile, tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    os.mkfifo(root / "ansible/pipe")
    with pytest.raises(SglxError, match="pipe is not a regular file or folder"):
        collect(cpu, root=root)
    (root / "ansible/pipe").unlink()
    (root / "ansible/my notes.md").write_text("x")
    with pytest.raises(SglxError, match=r"my notes.md cannot be carried in a bundle as ansible/"):
        collect(cpu, root=root)


def test_a_missing_ansible_folder_or_lock_is_named(cpu: Profile, tmp_path: Path) -> None:
    root = fake_root(tmp_path)
    (root / "bundles/locks/ansible.txt").unlink()
    with pytest.raises(SglxError, match=r"no control-node lock at .*bundles/locks/ansible\.txt"):
        collect(cpu, root=root)
    with pytest.raises(SglxError, match=r"the Ansible content is not at .*/nowhere/ansible"):
        collect(cpu, root=tmp_path / "nowhere")


def test_the_file_count_and_size_are_bounded(
    cpu: Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = fake_root(tmp_path)
    monkeypatch.setattr(layout, "MAX_ANSIBLE_FILES", 5)
    with pytest.raises(SglxError, match=r"would hold more than 5 files \(the limit\)"):
        collect(cpu, root=root)
    monkeypatch.setattr(layout, "MAX_ANSIBLE_FILES", 2_000)
    monkeypatch.setattr(layout, "MAX_ANSIBLE_BYTES", 1024)
    (root / "ansible/roles/r/files").mkdir()
    (root / "ansible/roles/r/files/big.bin").write_bytes(b"x" * 2000)
    with pytest.raises(SglxError, match=r"larger than 1.0 KiB \(the limit\), at .*big.bin"):
        collect(cpu, root=root)


def test_the_real_content_is_well_inside_the_bounds(cpu: Profile) -> None:
    content = collect(cpu)
    assert len(content.items) < layout.MAX_ANSIBLE_FILES // 10
    assert content.size < layout.MAX_ANSIBLE_BYTES // 10


WHEELS = {
    "demo_pkg-1.0-py3-none-any.whl": b"demo wheel bytes",
    "ruamel.yaml-0.19.1-py3-none-any.whl": b"another wheel",
}


def control_wheels(tmp_path: Path, wrong: str | None = None) -> tuple[Path, Path]:
    """A folder of fake wheels (and one the lock does not name) and a checkout whose lock
    pins them; `wrong` gets a hash in the lock that is not its own."""
    folder = tmp_path / "wheels"
    folder.mkdir()
    for name, data in WHEELS.items():
        (folder / name).write_bytes(data)
    (folder / "unrelated-3.0-py3-none-any.whl").write_bytes(b"not in the lock")
    pins = []
    for name, data, pin in zip(
        WHEELS, WHEELS.values(), ("demo-pkg==1.0", "ruamel-yaml==0.19.1"), strict=True
    ):
        digest = hashlib.sha256(b"other" if name == wrong else data).hexdigest()
        pins.append(f"{pin} \\\n    --hash=sha256:{digest}\n")
    return folder, fake_root(tmp_path, "# control node\n" + "".join(pins))


def test_control_wheels_are_copied_and_hash_checked(cpu: Profile, tmp_path: Path) -> None:
    folder, root = control_wheels(tmp_path)
    content = collect(cpu, root=root, control_wheels=folder)
    items = by_path(content)
    wheels = sorted(p for p in items if p.startswith("ansible/wheels/"))
    own = f"ansible/wheels/sglx-{sglx.__version__}-py3-none-any.whl"
    assert wheels == sorted([f"ansible/wheels/{name}" for name in WHEELS] + [own])
    assert {items[p].kind for p in wheels} == {"ansible"}
    assert content.wheels == 3
    stage = tmp_path / "stage"
    entries = {e.path: e for e in write(content, stage)}
    for name, data in WHEELS.items():
        assert (stage / "ansible/wheels" / name).read_bytes() == data
        assert entries[f"ansible/wheels/{name}"].sha256 == hashlib.sha256(data).hexdigest()
    # sglx's own wheel, built from the checkout, is pinned by its hash in the bundle's lock:
    # `pip install --require-hashes -r control-node.txt` installs sglx with the rest.
    pins = {pin.name: pin for pin in ansible_content.read_pins(stage / "ansible/control-node.txt")}
    assert set(pins) == {"demo-pkg", "ruamel-yaml", "sglx"}
    assert pins["sglx"].hashes == (entries[own].sha256,)
    assert pins["sglx"].version == sglx.__version__
    with zipfile.ZipFile(stage / own) as wheel:
        assert "sglx/hosts/check.py" in wheel.namelist()
        assert "sglx_core/paths.py" in wheel.namelist()
    assert "its 3 wheels, sglx's own among them, in ansible/wheels/" in content.slot().note
    assert "--find-links wheels" in content.slot().note


def test_a_control_wheel_with_a_wrong_hash_is_refused(cpu: Profile, tmp_path: Path) -> None:
    name = "ruamel.yaml-0.19.1-py3-none-any.whl"
    folder, root = control_wheels(tmp_path, wrong=name)
    with pytest.raises(SglxError) as caught:
        collect(cpu, root=root, control_wheels=folder)
    assert f"--control-wheels: {name} does not match its sha256 in" in caught.value.message
    assert f"{FETCH} {folder}" in str(caught.value.hint)


def test_a_missing_control_wheel_is_named_with_the_fix(cpu: Profile, tmp_path: Path) -> None:
    folder, root = control_wheels(tmp_path)
    (folder / "demo_pkg-1.0-py3-none-any.whl").unlink()
    with pytest.raises(SglxError) as caught:
        collect(cpu, root=root, control_wheels=folder)
    assert caught.value.message.endswith(
        "lacks 1 wheels of " + str(root / "bundles/locks/ansible.txt") + ": demo-pkg==1.0"
    )
    assert f"fetch them: {FETCH} {folder}" == caught.value.hint
    with pytest.raises(SglxError, match=r"--control-wheels .*/nope is not a folder"):
        collect(cpu, root=root, control_wheels=tmp_path / "nope")


def test_a_control_wheel_changed_before_it_is_copied_is_refused(
    cpu: Profile, tmp_path: Path
) -> None:
    folder, root = control_wheels(tmp_path)
    content = collect(cpu, root=root, control_wheels=folder)
    (folder / "demo_pkg-1.0-py3-none-any.whl").write_bytes(b"swapped")
    with pytest.raises(SglxError, match="changed while the bundle was being written"):
        write(content, tmp_path / "stage")


def test_a_lock_line_that_is_not_hash_pinned_is_refused(cpu: Profile, tmp_path: Path) -> None:
    folder, root = control_wheels(tmp_path)
    (root / "bundles/locks/ansible.txt").write_text("ansible-core>=2.18\n")
    with pytest.raises(SglxError, match=r"ansible.txt:1: not a hash-pinned requirement"):
        collect(cpu, root=root, control_wheels=folder)


def test_the_real_lock_parses_into_pins(tmp_path: Path) -> None:
    pins = ansible_content.read_pins(REPO / "bundles/locks/ansible.txt")
    names = {pin.name for pin in pins}
    assert {"ansible-core", "ansible-lint", "pytest", "pytest-testinfra", "pytest-xdist"} <= names
    assert all(len(pin.hashes) == 1 for pin in pins)


def test_verify_and_install_sh_check_the_ansible_files(
    cpu: Profile, tmp_path: Path, sglx_json: CliJson
) -> None:
    """A bundle with the slot filled verifies, with `sglx bundle verify` and `install.sh
    --check`; a changed ansible file is named by both."""
    stage = tmp_path / "stage"
    content = collect(cpu)
    write(content, stage)
    files = {item.path: (stage / item.path).read_bytes() for item in content.items}
    archive = docker_archive(tmp_path / "image.tar", [layer([("etc/hello", "file", b"hi\n")])])
    chunks = ("image/image.tar.000",)
    script = install_sh.render(
        cpu, version="test", image_ref="fixture-scan:test", image_id="sha256:" + "0" * 64,
        chunks=chunks, weights_path=None,
    )  # fmt: skip
    files["install.sh"] = script.encode()
    bundle = hand_bundle(tmp_path / "bundle", archive, files, chunk_size=1 << 20)
    code, envelope = sglx_json("bundle", "verify", str(bundle), "--no-scan", "-q")
    assert (code, envelope["findings"]) == (0, [])
    check = subprocess.run(
        ["sh", "install.sh", "--check"], cwd=bundle, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stderr
    assert "all files match" in check.stderr
    target = bundle / "ansible/roles/accel_host/tasks/main.yml"
    target.write_text(target.read_text() + "# edited\n")
    code, envelope = sglx_json("bundle", "verify", str(bundle), "--no-scan", "-q")
    assert code == 1
    assert [f["path"] for f in envelope["findings"]] == ["ansible/roles/accel_host/tasks/main.yml"]
    check = subprocess.run(
        ["sh", "install.sh", "--check"], cwd=bundle, capture_output=True, text=True
    )
    assert check.returncode == 1
    assert "ansible/roles/accel_host/tasks/main.yml: FAILED" in check.stderr

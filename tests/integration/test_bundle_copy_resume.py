"""bundle_install's copy with resume, with real ansible-playbook (local connection): a bundle
copied to a host folder, then cut off (a chunk missing, another damaged, an Ansible file gone
and another altered) and copied again: only those are sent; a third run sends nothing. The
bundle's Ansible content travels as one archive that the host unpacks where anything differs.
The e2e test's first bundle reaches its hosts through a bind mount, so this is where the copy
itself is tested file by file."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from helpers.bundles import hand_bundle

ANSIBLE = Path(__file__).resolve().parents[2] / "ansible"
BIN = Path(sys.executable).parent


ANSIBLE_FILES = {
    "ansible/site.yml": b"---\n- hosts: all\n",
    "ansible/roles/r/tasks/main.yml": b"---\n[]\n",
    "ansible/host-checks/test_x.py": b"def test_x() -> None: ...\n",
}


def _copy(src: Path, dest: Path, work: Path) -> tuple[dict[str, bool], bool, int]:
    """Run the role's copy tasks: ({file: changed} of the copy task, one entry per file,
    whether the Ansible content's archive was unpacked, the bytes the role says it copied)."""
    playbook = work / "copy.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Copy a bundle", "hosts": "localhost", "connection": "local",
        "gather_facts": False,
        "tasks": [{"name": "Copy", "ansible.builtin.include_role": {
            "name": "bundle_install", "tasks_from": "copy"}},
            {"name": "Say", "ansible.builtin.debug": {
                "msg": "copied={{ bundle_install_bytes_copied }}"}}],
    }]))  # fmt: skip
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook),
         "-e", f"bundle_install_src={src}", "-e", f"bundle_install_path={dest}",
         # this Python runs the modules (interpreter discovery can find a broken shim)
         "-e", f"ansible_python_interpreter={sys.executable}"],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    # The default callback prints one line per item: "changed: [localhost] => (item=PATH)".
    section = done.stdout.split("TASK [bundle_install : Copy the bundle's files", 1)[1]
    section = section.split("TASK [", 1)[0]
    unpack = done.stdout.split("TASK [bundle_install : Unpack the bundle's Ansible content", 1)[1]
    copied = re.search(r"msg: copied=(\d+)", done.stdout)
    assert copied, done.stdout[-3000:]
    return (
        {
            m.group(2): m.group(1) == "changed"
            for m in re.finditer(r"^(ok|changed): \[localhost\] => \(item=(\S+)\)", section, re.M)
        },
        unpack.split("TASK [", 1)[0].split("\n", 1)[1].lstrip().startswith("changed"),
        int(copied.group(1)),
    )


def test_a_cut_off_copy_resumes_with_only_what_is_missing_or_damaged(tmp_path: Path) -> None:
    archive = tmp_path / "image.tar"
    archive.write_bytes(os.urandom(32 * 1024))  # split into 8 chunks of 4 KiB
    files = {"install.sh": b"#!/bin/sh\n", **ANSIBLE_FILES}
    src = hand_bundle(tmp_path / "src", archive, files, chunk_size=4096)
    chunks = sorted(p.relative_to(src).as_posix() for p in (src / "image").iterdir())
    assert len(chunks) == 8
    dest = tmp_path / "host" / "bundle"
    total = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())

    first, unpacked, copied = _copy(src, dest, tmp_path)
    assert set(first) >= {*chunks, "bundle.json", "SHA256SUMS", "install.sh"}
    assert not set(first) & set(ANSIBLE_FILES)  # they came in the archive
    assert all(first.values()) and unpacked and copied == total
    for path, content in ANSIBLE_FILES.items():
        assert (dest / path).read_bytes() == content
        assert (dest / path).stat().st_mode & 0o777 == 0o644, path
    assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file()) == (
        sorted(p.relative_to(src).as_posix() for p in src.rglob("*") if p.is_file())
    )

    (dest / chunks[3]).unlink()  # the copy was cut off before this chunk ...
    damaged = dest / chunks[6]
    damaged.write_bytes(damaged.read_bytes()[:100])  # ... and while this one was written
    (dest / "ansible/site.yml").unlink()
    (dest / "ansible/roles/r/tasks/main.yml").write_bytes(b"---\n[changed]\n")
    second, unpacked, _ = _copy(src, dest, tmp_path)
    assert {item for item, changed in second.items() if changed} == {chunks[3], chunks[6]}
    assert (dest / chunks[6]).read_bytes() == (src / chunks[6]).read_bytes()
    assert unpacked
    for path, content in ANSIBLE_FILES.items():
        assert (dest / path).read_bytes() == content

    third, unpacked, copied = _copy(src, dest, tmp_path)
    assert not any(third.values()) and not unpacked and copied == 0

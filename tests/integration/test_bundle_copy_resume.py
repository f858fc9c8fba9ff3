"""bundle_install's copy with resume, with real ansible-playbook (local connection): a bundle
copied to a host folder, then cut off (a chunk missing, another damaged) and copied again: only
those two are sent; a third run sends nothing. The e2e test's hosts see their bundles through a
bind mount, so this is where the copy itself is tested."""

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


def _copy(src: Path, dest: Path, work: Path) -> dict[str, bool]:
    """Run the role's copy tasks; {file: changed} of the copy task, one entry per file."""
    playbook = work / "copy.yml"
    playbook.write_text(yaml.safe_dump([{
        "name": "Copy a bundle", "hosts": "localhost", "connection": "local",
        "gather_facts": False,
        "tasks": [{"name": "Copy", "ansible.builtin.include_role": {
            "name": "bundle_install", "tasks_from": "copy"}}],
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
    return {
        m.group(2): m.group(1) == "changed"
        for m in re.finditer(r"^(ok|changed): \[localhost\] => \(item=(\S+)\)", section, re.M)
    }


def test_a_cut_off_copy_resumes_with_only_what_is_missing_or_damaged(tmp_path: Path) -> None:
    archive = tmp_path / "image.tar"
    archive.write_bytes(os.urandom(32 * 1024))  # split into 8 chunks of 4 KiB
    src = hand_bundle(tmp_path / "src", archive, {"install.sh": b"#!/bin/sh\n"}, chunk_size=4096)
    chunks = sorted(p.relative_to(src).as_posix() for p in (src / "image").iterdir())
    assert len(chunks) == 8
    dest = tmp_path / "host" / "bundle"

    first = _copy(src, dest, tmp_path)
    assert set(first) >= {*chunks, "bundle.json", "SHA256SUMS", "install.sh"}
    assert all(first.values())

    (dest / chunks[3]).unlink()  # the copy was cut off before this chunk ...
    damaged = dest / chunks[6]
    damaged.write_bytes(damaged.read_bytes()[:100])  # ... and while this one was written
    second = _copy(src, dest, tmp_path)
    assert {item for item, changed in second.items() if changed} == {chunks[3], chunks[6]}
    assert (dest / chunks[6]).read_bytes() == (src / chunks[6]).read_bytes()

    assert not any(_copy(src, dest, tmp_path).values())

"""The sglang_service role's node-local JIT cache tasks (issue 27), run by the real
ansible-playbook over a local inventory: the image's folder is created owned by the profile's
uid with mode 0700 (a wrong mode is put right), a second run changes nothing, check mode changes
nothing on disk, and after the record the folders of images the host neither runs nor keeps
for a rollback are removed, while the rollback's, foreign names and links stay.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.test_hosts import recap

from sglx.ansible_vars import render_vars
from sglx_core.profile import load_profile

ANSIBLE = Path(__file__).resolve().parents[3] / "ansible"
BIN = Path(sys.executable).parent
RUNS, KEPT, OLD, OTHER = "a" * 64, "b" * 64, "c" * 64, "d" * 64

# The role's two task files the `run` entry point imports around the server's start.
PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - ansible.builtin.include_role:
        name: sglang_service
        tasks_from: jit_cache
    - ansible.builtin.include_role:
        name: sglang_service
        tasks_from: jit_prune
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role chowns to the profile's uid")


def play(work: Path, host: dict[str, Any], *extra: str) -> tuple[int, str]:
    (work / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {"node": host}}}))
    (work / "play.yml").write_text(PLAY)
    done = subprocess.run(
        [str(BIN / "ansible-playbook"), "-i", str(work / "inventory.yml"), str(work / "play.yml"),
         *extra],
        capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "ANSIBLE_CONFIG": str(ANSIBLE / "ansible.cfg"),
             "ANSIBLE_ROLES_PATH": str(ANSIBLE / "roles"), "ANSIBLE_NOCOLOR": "1"},
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def listing(root: Path) -> dict[str, tuple[int, str]]:
    """Each entry of the root: (uid, mode) of a folder, (uid, 'link') of a link."""
    return {
        p.name: (p.lstat().st_uid, "link" if p.is_symlink() else f"{p.stat().st_mode & 0o7777:04o}")
        for p in root.iterdir()
    }


def test_the_folder_is_made_private_and_old_caches_are_pruned(tmp_path: Path) -> None:
    profile = load_profile("cpu")
    uid = profile.container.uid
    root = tmp_path / "jit"
    state = tmp_path / "state" / "deployed.json"
    (state.parent / "rollback").mkdir(parents=True)
    (state.parent / "rollback" / state.name).write_text(json.dumps({"image_id": f"sha256:{KEPT}"}))
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sglang_service_image": f"sha256:{RUNS}",
        "sglang_service_state_file": str(state),
        "sglang_service_jit_cache_root": str(root),
        "sglang_service_jit_cache": render_vars(profile)["sglang_service_jit_cache"],
    }
    for name in (RUNS, KEPT, OLD, "not-an-image"):
        (root / name).mkdir(parents=True, mode=0o755)
        (root / name / "entry").write_text("x")
    (root / OTHER).symlink_to(tmp_path / "state")
    before = listing(root)

    code, out = play(tmp_path, host, "--check")
    assert code == 0, out
    assert listing(root) == before  # check mode: nothing on disk changes
    assert (root / OLD / "entry").is_file()

    code, out = play(tmp_path, host)
    assert code == 0, out
    assert listing(root) == {
        RUNS: (uid, "0700"),  # put right: the container user's alone
        KEPT: (0, "0755"),  # the rollback's image: kept as it is
        "not-an-image": (0, "0755"),  # not sglx's
        OTHER: (0, "link"),  # a link is no cache folder of sglx's
    }
    assert (root / RUNS / "entry").read_text() == "x"  # the cache itself is kept
    assert root.stat().st_mode & 0o7777 == 0o755 and root.stat().st_uid == 0

    code, again = play(tmp_path, host)
    assert code == 0, again
    assert recap(again)["node"]["changed"] == 0, again


def test_a_profile_without_the_cache_makes_and_prunes_nothing(tmp_path: Path) -> None:
    root = tmp_path / "jit"
    (root / OLD).mkdir(parents=True)
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sglang_service_image": f"sha256:{RUNS}",
        "sglang_service_state_file": str(tmp_path / "deployed.json"),
        "sglang_service_jit_cache_root": str(root),
    }  # sglang_service_jit_cache: the role's default {} (vars rendered before it existed)
    code, out = play(tmp_path, host)
    assert code == 0, out
    assert sorted(p.name for p in root.iterdir()) == [OLD]

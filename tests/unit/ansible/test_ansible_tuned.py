"""The sglang_service role places the rollout's tuned set where its unit mounts it (tasks/
tuned.yml), run by the real ansible-playbook over a local inventory: copied from the staged
bundle's tuned/ to <root>/<digest hex>, root's and read-only to others; a second run changes
nothing, check mode writes nothing; a digest sglx would refuse, or a set neither placed nor
given, stops the play naming the fix.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.ansible_play import ansible_playbook
from helpers.test_hosts import recap
from helpers.tuned_files import write_tuning_run

from sglx.ansible_vars import render_vars
from sglx_core import tuned
from sglx_core.profile import load_profile

PLAY = [
    {
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {
                "ansible.builtin.include_role": {"name": "sglang_service", "tasks_from": "tuned"},
            }
        ],
    }
]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the role chowns to root")


def play(work: Path, host: dict[str, Any], *extra: str) -> tuple[int, str]:
    done = ansible_playbook(work / "plays", PLAY, {"node": host}, *extra)
    return done.returncode, done.stdout + done.stderr


def test_the_set_is_placed_once_where_the_unit_mounts_it(tmp_path: Path) -> None:
    profile = load_profile("gfx942")
    staged = tmp_path / "bundle" / "tuned"
    tuned_set, _ = tuned.capture(write_tuning_run(tmp_path / "run"), staged, profile,
                                 captured_from="t", host="h", sglx="t")  # fmt: skip
    root = tmp_path / "tuned-root"
    tuning = {**render_vars(profile)["sglang_service_tuning"], "root": str(root)}
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sglang_service_tuning": tuning,
        "sglang_service_tuned_digest": tuned_set.digest,
        "sglang_service_tuned_src": str(staged),
    }
    folder = root / tuned_set.digest.removeprefix("sha256:")
    code, out = play(tmp_path, host, "--check")
    assert code == 0, out
    assert not root.exists()
    code, out = play(tmp_path, host)
    assert code == 0, out
    assert recap(out)["node"]["changed"] > 0
    # What the container reads is the set itself: sglx-serve's own check passes on it.
    assert tuned.load(folder, profile).digest == tuned_set.digest
    for path in (folder, *folder.iterdir()):
        mode = path.stat().st_mode & 0o777
        assert path.stat().st_uid == 0 and mode == (0o755 if path.is_dir() else 0o644), path
    code, out = play(tmp_path, host)
    assert code == 0 and recap(out)["node"]["changed"] == 0, out
    # Placed once: a later rollout of the same bundle needs no source.
    code, out = play(tmp_path, {**host, "sglang_service_tuned_src": ""})
    assert code == 0, out


def test_a_bad_digest_or_a_missing_set_stops_the_play_naming_the_fix(tmp_path: Path) -> None:
    profile = load_profile("gfx942")
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "sglang_service_tuning": {
            **render_vars(profile)["sglang_service_tuning"],
            "root": str(tmp_path / "root"),
        },
        "sglang_service_tuned_digest": "sha256:../../etc",
    }
    code, out = play(tmp_path, host)
    assert code != 0 and "not sha256:<64 hex>" in " ".join(out.split()), out
    assert not (tmp_path / "root").exists()
    code, out = play(tmp_path, {**host, "sglang_service_tuned_digest": "sha256:" + "e" * 64})
    assert code != 0
    assert "is neither placed nor given in sglang_service_tuned_src" in out, out

"""A site's control node with the bundle's lock alone (issue 38): a fresh virtual environment
gets `BUNDLE/ansible/control-node.txt` from `BUNDLE/ansible/wheels` and nothing else (no
checkout, no sglx[host] extras, no torch), and `sglx hosts check --bundle BUNDLE` from it runs
the bundle's own host checks against this machine: real pip (--no-index --require-hashes), real
pytest and testinfra's Ansible backend.

The bundle is made with the lock's real wheels, which `make setup` keeps in the venv's
control-wheels/ folder (scripts/bootstrap.sh)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.bundles import import_tiny_image

pytestmark = pytest.mark.docker

SGLX = str(Path(sys.executable).parent / "sglx")
CONTROL_WHEELS = Path(sys.prefix) / "control-wheels"


@pytest.fixture(scope="module")
def bundle(docker: Any, run_id: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A bundle of a tiny image carrying the control node's wheels; the image is removed from
    the engine again at once (the checks read the bundle, not the image)."""
    if not CONTROL_WHEELS.is_dir():
        pytest.fail(f"no {CONTROL_WHEELS}: run `make setup`, which fetches the control wheels")
    tag = f"sglx-test/control-node:{run_id}"
    image_id = import_tiny_image(docker, tag)
    out = tmp_path_factory.mktemp("control-node") / "bundle"
    try:
        done = subprocess.run(
            [SGLX, "bundle", "create", "--arch", "cpu", "--image", tag, "--out", str(out),
             "--no-scan", "--control-wheels", str(CONTROL_WHEELS), "-q"],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    finally:
        docker.images.remove(image_id, force=True)
    yield out


@pytest.fixture(scope="module")
def control_node(bundle: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv holding only what the bundle's control-node.txt pins, installed offline."""
    venv = tmp_path_factory.mktemp("control-venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    ansible = bundle / "ansible"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install",
         "--quiet", "--no-index", "--no-compile", "--disable-pip-version-check",
         "--require-hashes", "-r", str(ansible / "control-node.txt"),
         "--find-links", str(ansible / "wheels")],
        capture_output=True, text=True, timeout=600, check=False, env=_clean_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return venv


def _clean_env() -> dict[str, str]:
    """This process's environment without what points Python at the checkout or its venv."""
    drop = {"PYTHONPATH", "VIRTUAL_ENV", "SGLX_ROOT", "SGLX_IMAGES_DIR", "ANSIBLE_CONFIG"}
    return {k: v for k, v in os.environ.items() if k not in drop}


def test_the_control_node_holds_the_lock_and_sglx_and_nothing_of_the_image(
    control_node: Path, tmp_path: Path
) -> None:
    python = str(control_node / "bin" / "python")
    done = subprocess.run(
        [python, "-c", "import importlib.util as u, sglx; print(sglx.__file__); print(*("
         "n for n in ('torch', 'sglang', 'docker', 'sglx_platform', 'sglx_runtime') "
         "if u.find_spec(n)))"],
        capture_output=True, text=True, cwd=tmp_path, env=_clean_env(), check=True,
    )  # fmt: skip
    where, image_packages = done.stdout.splitlines()
    assert where.startswith(str(control_node)), where
    assert image_packages == ""


def test_hosts_check_runs_the_bundles_own_suite_from_the_control_node(
    bundle: Path, control_node: Path, tmp_path: Path
) -> None:
    """No checkout on that machine: the suite and ansible.cfg that run are the bundle's, and
    the host is held to the bundle's profile."""
    inventory = tmp_path / "hosts.yml"
    host = {"ansible_connection": "local", "sglx_arch": "cpu"}
    inventory.write_text(yaml.safe_dump({"sglx": {"hosts": {"localhost": host}}}))
    done = subprocess.run(
        [str(control_node / "bin" / "sglx"), "hosts", "check", "--bundle", str(bundle),
         "-i", str(inventory), "--no-sudo", "--json"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=_clean_env(),
        check=False,
    )  # fmt: skip
    envelope = json.loads(done.stdout)
    assert done.returncode == 0, (envelope, done.stderr[-3000:])
    seen = {c["check"]: c["outcome"] for c in envelope["data"]["checks"]}
    assert seen["container_engine"] == seen["disk_covers_bundle"] == "passed"
    assert {c["mode"] for c in envelope["data"]["checks"]} == {"preflight"}
    # Without --bundle there is no suite on that machine: exit 2, saying where one is.
    done = subprocess.run(
        [str(control_node / "bin" / "sglx"), "hosts", "check", "-i", str(inventory), "--json"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, env=_clean_env(),
        check=False,
    )  # fmt: skip
    assert done.returncode == 2
    (error,) = json.loads(done.stdout)["errors"]
    assert error["message"].startswith("host check suite ") and "pass --bundle" in error["hint"]

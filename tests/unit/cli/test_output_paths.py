"""User-given output files are written only where a regular file is, or nothing is (issue 21,
item 8). sglx writes through a temporary file renamed over the target, and a rename replaces
whatever held the name: `--out /dev/full` turned the device into a regular file, `--junitxml`
onto a link to /proc/self/fd/1 replaced the link. Anything else is refused, exit 2, with the
path and what it is named, and the target left as it was."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from sglx_core.errors import SglxError
from sglx_core.output_files import atomic_write_text

SGLX = str(Path(sys.executable).parent / "sglx")
CliRunner = Callable[..., tuple[int, str, str]]


def _fifo(tmp_path: Path) -> Path:
    os.mkfifo(tmp_path / "out.yml")
    return tmp_path / "out.yml"


def _link(tmp_path: Path) -> Path:
    (tmp_path / "target.yml").write_text("kept\n")
    (tmp_path / "out.yml").symlink_to(tmp_path / "target.yml")
    return tmp_path / "out.yml"


def _folder(tmp_path: Path) -> Path:
    (tmp_path / "out.yml").mkdir()
    return tmp_path / "out.yml"


KINDS: dict[str, Callable[[Path], Path]] = {
    "a FIFO": _fifo,
    "a symlink": _link,
    "a folder": _folder,
}


def _state(tmp_path: Path) -> dict[str, tuple[int, str]]:
    """Every entry of the folder, with its type and (for regular files) its content."""
    seen = {}
    for entry in sorted(tmp_path.rglob("*")):
        mode = entry.lstat().st_mode
        text = entry.read_text() if stat.S_ISREG(mode) else ""
        seen[str(entry.relative_to(tmp_path))] = (stat.S_IFMT(mode), text)
    return seen


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ansible_vars_out_refuses_anything_but_a_regular_file(
    sglx: CliRunner, tmp_path: Path, kind: str
) -> None:
    out = KINDS[kind](tmp_path)
    before = _state(tmp_path)
    code, stdout, err = sglx("ansible", "vars", "--arch", "cpu", "--out", str(out))
    assert code == 2
    assert f"--out {out} is {kind}: sglx writes only to a regular file or to a path" in err
    assert "Traceback" not in stdout + err
    assert _state(tmp_path) == before  # nothing written, replaced or left behind


def test_ansible_vars_out_leaves_a_device_a_device(sglx: CliRunner) -> None:
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)
    code, _, err = sglx("ansible", "vars", "--arch", "cpu", "--out", "/dev/null")
    assert code == 2
    assert "--out /dev/null is a character device" in err
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


def test_ansible_vars_out_replaces_a_regular_file_or_writes_a_new_one(
    sglx: CliRunner, tmp_path: Path
) -> None:
    old = tmp_path / "old.yml"
    old.write_text("stale\n")
    for out in (old, tmp_path / "group_vars" / "cpu" / "new.yml"):
        code, _, err = sglx("ansible", "vars", "--arch", "cpu", "--out", str(out))
        assert code == 0, err
        assert yaml.safe_load(out.read_text())["sglx_arch"] == "cpu"
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == ["new.yml", "old.yml"]


def test_the_rule_holds_for_every_atomic_write(tmp_path: Path) -> None:
    fifo = _fifo(tmp_path)
    with pytest.raises(SglxError) as raised:
        atomic_write_text(fifo, "x")  # returns at once: a FIFO is never opened
    assert raised.value.message.startswith(f"output file {fifo} is a FIFO")
    assert raised.value.code == "usage"
    assert [p.name for p in tmp_path.iterdir()] == ["out.yml"]


def test_hosts_check_junitxml_onto_a_link_is_refused_before_any_check(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yml"
    dead = {"ansible_host": "127.0.0.1", "ansible_port": 1, "sglx_arch": "cpu"}
    inventory.write_text(yaml.safe_dump({"sglx": {"hosts": {"dead-a": dead}}}))
    link = tmp_path / "stdout.xml"
    link.symlink_to("/proc/self/fd/1")
    done = subprocess.run(
        [SGLX, "hosts", "check", "-i", str(inventory), "--junitxml", str(link)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert f"--junitxml {link} is a symlink" in done.stderr
    assert "preflight checks on" not in done.stderr  # refused before the checks ran
    assert link.readlink() == Path("/proc/self/fd/1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inventory.yml", "stdout.xml"]
